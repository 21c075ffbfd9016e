"""Write a report as JSON, atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..fileio import check_output_path, write_atomic
from ..report import AuditReport

__all__ = ["write_json", "write_atomic", "check_output_path"]  # the last two re-exported from fileio


def write_json(report: AuditReport | list[AuditReport], path: str | os.PathLike,
               protect: list[Path] | None = None) -> Path:
    """Write one report (a JSON object) or several (a JSON list of objects) to ``path`` (see :func:`write_atomic`)."""
    data = [r.to_dict() for r in report] if isinstance(report, list) else report.to_dict()
    return write_atomic(path, json.dumps(data, indent=1, default=str) + "\n", protect)
