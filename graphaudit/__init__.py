"""graphaudit: explain accuracy loss across the stage models of a PTQ toolchain.

The library in a handful of names: :func:`audit` runs the main job (``graphaudit explain``) and returns an
:class:`Audit` whose ``.report`` is an :class:`AuditReport`; :func:`write_reports` writes its JSON and HTML;
:func:`evaluate_stages` runs the user's own metric on every stage (``--eval``); :func:`lint_config` lints a
conversion YAML; :func:`lower` rewrites a Horizon stage into standard ONNX that
stock onnxruntime runs. Each has a runnable Examples section (``tests/test_api.py`` runs them).
"""

from ._version import __version__
from .errors import GraphAuditError
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

__all__ = ["__version__", "GraphAuditError", "Audit", "AuditReport", "NumericOptions", "audit", "lint_config", "lower",
           "write_reports", "load_pipeline", "align", "align_chain", "load_stage", "samples_dir",
           "evaluate_stages"]
