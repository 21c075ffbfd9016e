"""User-facing errors: bad files, bad arguments, bad data (distinct from findings)."""

from __future__ import annotations

__all__ = [
    "GraphAuditError",
    "ModelLoadError",
    "StageDiscoveryError",
    "StagesUnrelatedError",
    "RuleCatalogueError",
]


class GraphAuditError(Exception):
    """Base class of every error caused by the user's input.

    The CLI prints ``str(err)`` on one line and exits with code 2. The message must
    name the offending file (or argument) and the problem.
    """


class ModelLoadError(GraphAuditError):
    """An ONNX file could not be read: missing, not ONNX, truncated or inconsistent."""


class StageDiscoveryError(GraphAuditError):
    """No stage files were found, or the given stages cannot be ordered."""


class StagesUnrelatedError(GraphAuditError):
    """Two consecutive stages share no tensors or structure (not one pipeline)."""


class RuleCatalogueError(GraphAuditError):
    """A rule file in ``rules/`` is malformed (this is a packaging defect)."""
