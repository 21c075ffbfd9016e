"""Writing graphaudit's outputs safely: never over or inside the user's inputs, never half-written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import GraphAuditError

__all__ = ["atomic_write", "write_atomic", "check_output_path", "check_output_dir"]


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and ``os.replace``.

    The file gets the usual permissions (0666 minus the umask, as ``open`` would give), not
    ``mkstemp``'s 0600.

    Raises
    ------
    OSError
        The directory is missing or not writable; the temporary file is removed.
    """
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


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


def check_output_dir(path: str | os.PathLike, protect: list[Path] | None = None) -> Path:
    """Validate an output directory before any work is done; it need not exist yet (it is created on write).

    Parameters
    ----------
    path : path-like
        The directory (``--out``).
    protect : list of Path
        The user's inputs: files, and directories whose whole tree is off limits.

    Raises
    ------
    GraphAuditError
        ``path`` is empty, an existing non-directory, an input file, one of the input directories
        or inside one.
    """
    if not str(path):
        raise GraphAuditError("--out: empty directory name")
    p = Path(path)
    rp = p.resolve()
    for q in protect or []:
        try:
            rq = q.resolve()
        except OSError:
            continue
        if q.is_dir() and (rq == rp or rq in rp.parents):
            raise GraphAuditError(f"{p}: is or lies inside the input directory {q}; refusing to write there")
        if q.exists() and not q.is_dir() and rq == rp:
            raise GraphAuditError(f"{p}: is one of the input files; refusing to write there")
    if p.exists() and not p.is_dir():
        raise GraphAuditError(f"{p}: exists and is not a directory")
    return p
