"""Renderers: turn an AuditReport into terminal output or files. Nothing here analyses."""

from .console import render_diff, render_explain, render_findings, render_input_stats, render_numeric, render_rules
from .json_out import write_json

__all__ = ["render_diff", "render_explain", "render_findings", "render_input_stats", "render_numeric", "render_rules",
           "write_json"]
