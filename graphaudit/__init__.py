"""graphaudit: explain accuracy loss across the stage models of a PTQ toolchain."""

__version__ = "0.1.0"

from .errors import GraphAuditError  # noqa: E402
from .explain import audit, explain, load_pipeline  # noqa: E402
from .lineage import align, align_chain  # noqa: E402
from .load import load_stage  # noqa: E402

__all__ = ["__version__", "GraphAuditError", "audit", "explain", "load_pipeline", "align", "align_chain", "load_stage"]
