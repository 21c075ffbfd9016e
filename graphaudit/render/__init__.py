"""Renderers: turn an AuditReport into terminal output or files. Nothing here analyses.

The console renderers (rich, about 2.6 MB of RSS to import) and the JSON writer are imported on first use
(:func:`__getattr__`), so that a library user of :mod:`graphaudit.pipeline`, which reads :mod:`.diffmodel`, does not
pay for the terminal."""

from __future__ import annotations

import importlib

__all__ = ["render_diff", "render_explain", "render_findings", "render_input_stats", "render_numeric", "render_rules",
           "write_json"]

_HOME = {"write_json": ".json_out", **{name: ".console" for name in __all__ if name != "write_json"}}


def __getattr__(name: str):
    """The renderers of :data:`__all__`, imported from their module on first access."""
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
