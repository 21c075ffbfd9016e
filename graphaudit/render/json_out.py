"""Write a report as JSON, atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..errors import GraphAuditError
from ..report import AuditReport

__all__ = ["write_json", "write_atomic"]


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same directory and ``os.replace``.

    Raises
    ------
    GraphAuditError
        The directory does not exist or is not writable.
    """
    p = Path(path)
    if not p.parent.is_dir():
        raise GraphAuditError(f"{p}: directory {p.parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, p)
    except OSError as e:
        raise GraphAuditError(f"{p}: cannot write ({e.strerror})") from e
    return p


def write_json(report: AuditReport | list[AuditReport], path: str | os.PathLike) -> Path:
    """Write one report (a JSON object) or several (a JSON list of objects) to ``path``."""
    data = [r.to_dict() for r in report] if isinstance(report, list) else report.to_dict()
    return write_atomic(path, json.dumps(data, indent=1, default=str) + "\n")
