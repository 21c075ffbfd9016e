"""graphaudit: explain accuracy loss across the stage models of a PTQ toolchain.

The library in a handful of names: :func:`audit` runs the main job (``graphaudit explain``) and returns an
:class:`Audit` whose ``.report`` is an :class:`AuditReport`; :func:`write_reports` writes its JSON and HTML;
:func:`evaluate_stages` runs the user's own metric on every stage (``--eval``); :func:`lint_config` lints a
conversion YAML; :func:`lower` rewrites a Horizon stage into standard ONNX that
stock onnxruntime runs. Each has a runnable Examples section (``tests/test_api.py`` runs them).
"""

from __future__ import annotations

import importlib

from ._version import __version__
from .errors import GraphAuditError

#: Public name -> module that defines it: imported on first use (PEP 562), so ``import graphaudit`` (and the
#: ``graphaudit`` command's start, before it can catch a Ctrl-C) does not import onnx, numpy and ruamel.
_LAZY = {"evaluate_stages": "evaluate", "align": "lineage", "align_chain": "lineage", "lint_config": "lint",
         "load_stage": "load", "NumericOptions": "measure", "lower": "numeric.lower", "write_reports": "outputs",
         "Audit": "pipeline", "audit": "pipeline", "load_pipeline": "pipeline", "AuditReport": "report",
         "samples_dir": "samples"}

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:  # what type checkers and IDEs see
    from .evaluate import evaluate_stages
    from .lineage import align, align_chain
    from .lint import lint_config
    from .load import load_stage
    from .measure import NumericOptions
    from .numeric.lower import lower_file as lower
    from .outputs import write_reports
    from .pipeline import Audit, audit, load_pipeline
    from .report import AuditReport
    from .samples import samples_dir


def __getattr__(name: str):
    """A public name of :data:`__all__` (imported from its module on first use), or a submodule."""
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), "lower_file" if name == "lower" else name)
        globals()[name] = value
        return value
    if not name.startswith("__"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["__version__", "GraphAuditError", "Audit", "AuditReport", "NumericOptions", "audit", "lint_config", "lower",
           "write_reports", "load_pipeline", "align", "align_chain", "load_stage", "samples_dir",
           "evaluate_stages"]
