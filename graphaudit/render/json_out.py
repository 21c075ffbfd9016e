"""Write a report as JSON, atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import GraphAuditError
from ..fileio import atomic_write
from ..report import AuditReport

__all__ = ["write_json", "write_atomic", "check_output_path"]


def check_output_path(path: str | os.PathLike, protect: list[Path] | None = None) -> Path:
    """Validate an output path before any work is done (see :func:`write_atomic` for the rules).

    Raises
    ------
    GraphAuditError
    """
    if not str(path):
        raise GraphAuditError("--json: empty file name")
    p = Path(path)
    for q in protect or []:
        try:
            if q.is_dir():
                if q.resolve() in p.resolve().parents:
                    raise GraphAuditError(f"{p}: is inside the input directory {q}; refusing to write there")
            elif p.exists() and q.exists() and os.path.samefile(p, q):
                raise GraphAuditError(f"{p}: is one of the input files; refusing to overwrite it")
        except OSError:
            continue
    if not p.parent.is_dir():
        raise GraphAuditError(f"{p}: {p.parent} is not an existing directory")
    if p.is_dir():
        raise GraphAuditError(f"{p}: is a directory")
    return p


def write_atomic(path: str | os.PathLike, text: str, protect: list[Path] | None = None) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same directory and ``os.replace``.

    ``protect`` lists files that must not be overwritten (the user's inputs).

    Raises
    ------
    GraphAuditError
        Empty path, a protected file, a missing parent directory, a directory as target, or an
        unwritable location. No temporary file is left behind.
    """
    p = check_output_path(path, protect)
    try:
        atomic_write(p, text)
    except OSError as e:
        raise GraphAuditError(f"{p}: cannot write ({e.strerror})") from e
    return p


def write_json(report: AuditReport | list[AuditReport], path: str | os.PathLike,
               protect: list[Path] | None = None) -> Path:
    """Write one report (a JSON object) or several (a JSON list of objects) to ``path`` (see :func:`write_atomic`)."""
    data = [r.to_dict() for r in report] if isinstance(report, list) else report.to_dict()
    return write_atomic(path, json.dumps(data, indent=1, default=str) + "\n", protect)
