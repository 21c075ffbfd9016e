"""graphaudit: explain accuracy loss across the stage models of a PTQ toolchain.

The library in five names: :func:`audit` runs the main job (``graphaudit explain``) and returns an
:class:`Audit` whose ``.report`` is an :class:`AuditReport`; :func:`write_reports` writes its HTML and JSON;
:func:`lint_config` lints a conversion YAML; :func:`lower` rewrites a Horizon stage into standard ONNX.
"""

from ._version import __version__
from .errors import GraphAuditError
from .lineage import align, align_chain
from .load import load_stage
from .measure import NumericOptions
from .pipeline import Audit, audit, load_pipeline
from .report import AuditReport
from .samples import samples_dir

__all__ = ["__version__", "GraphAuditError", "Audit", "AuditReport", "NumericOptions", "audit", "load_pipeline",
           "align", "align_chain", "load_stage", "samples_dir"]
