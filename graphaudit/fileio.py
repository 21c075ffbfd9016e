"""Files, safely: outputs never over or inside the user's inputs and never half-written; inputs only from
regular files (a FIFO would block a read, a device never end)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import GraphAuditError

__all__ = ["require_regular_file", "atomic_write", "write_atomic", "check_output_path", "check_output_dir", "check_not_input", "check_default_place", "resolve_path", "make_dir",
           "user_inputs", "StageFileDir"]


def require_regular_file(path: str | os.PathLike, what: str, error: type[Exception] = GraphAuditError) -> Path:
    """``path`` when it is a regular file (or a symlink to one), before anything opens it.

    Raises
    ------
    GraphAuditError (or ``error``)
        Missing (``"no such file"``), a directory, or not a regular file (FIFO, socket, device), naming ``path`` and
        ``what`` was expected there.
    """
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise error(f"{p}: no such file") from None
    except (OSError, ValueError) as e:
        raise error(f"{p}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if stat.S_ISDIR(mode):
        raise error(f"{p}: is a directory, expected {what}")
    if not stat.S_ISREG(mode):
        raise error(f"{p}: not a regular file (a FIFO, socket or device), expected {what}")
    return p


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


def resolve_path(p: Path) -> Path:
    """``p.resolve()`` with a one-line error for paths that cannot be resolved (symlink loops, permissions).

    Raises
    ------
    GraphAuditError
    """
    try:
        return p.resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: "Symlink loop" (Python < 3.13)
        raise GraphAuditError(f"{p}: cannot resolve the path ({getattr(e, 'strerror', None) or e})") from None


def check_not_input(p: Path, protect: list[Path] | None, what: str = "overwrite",
                    hint: str = "name an output place outside it") -> None:
    """Refuse an output path (file or directory, existing or not) that is one of the inputs or lies inside an
    input directory (``hint``: what to do instead, in the message).

    Raises
    ------
    GraphAuditError
    """
    rp = resolve_path(p)
    for q in protect or []:
        try:
            rq = q.resolve()
            is_dir = q.is_dir()
        except (OSError, RuntimeError):
            continue
        if is_dir and (rq == rp or rq in rp.parents):
            where = (f"{q}, the directory of the stage file {q.file}" if isinstance(q, StageFileDir) else
                     f"the input directory {q}")
            raise GraphAuditError(f"{p}: is or lies inside {where}; refusing to write there ({hint})")
        if not is_dir and rq == rp:
            raise GraphAuditError(f"{p}: is one of the input files; refusing to {what} it")


def check_default_place(p: str | os.PathLike, inputs: list[Path] | None, what: str, option: str) -> None:
    """Refuse an output that graphaudit places by default (not a path the user typed) in or below the directory of
    one of the user's input files, or at or inside one of the input directories: the user's files get nothing
    written next to them or in their tree unless the user asked for that place.

    Parameters
    ----------
    p : path-like
        The default output path (file or directory, existing or not).
    inputs : list of Path
        What the user gave (stage files and directories, config, data, log, ...).
    what : str
        The output, for the message (``"the default report directory"``).
    option : str
        How to place it elsewhere, for the message (``"--out DIR"``).

    Raises
    ------
    GraphAuditError
        One line naming the output, the input and ``option``.
    """
    rp = resolve_path(Path(p))
    for q in inputs or []:
        try:
            if q.is_dir():
                rq = q.resolve()
                if rq == rp or rq in rp.parents:
                            raise GraphAuditError(f"{p}: {what} would be written inside the input directory {q}; "
                                          f"give {option} outside it")
                continue
            homes = {q.resolve().parent, Path(os.path.abspath(q)).parent.resolve()}  # a symlink's directory too
        except (OSError, RuntimeError):
            continue
        if rp.parent in homes:
            raise GraphAuditError(f"{p}: {what} would be written next to the input file {q}; "
                                  f"give {option} to place it elsewhere")
        home = next((h for h in homes if h in rp.parents), None)
        if home is not None:  # the working directory is below the stage files' directory
            raise GraphAuditError(f"{p}: {what} would be written inside {home}, the directory of the input file "
                                  f"{q}; give {option} outside it")


def check_output_path(path: str | os.PathLike, protect: list[Path] | None = None, probe: bool = True) -> Path:
    """Validate an output file path before any work is done (see :func:`write_atomic` for the rules).

    With ``probe``, that the file can be written is proven, not guessed: a temporary file is made and removed at
    once in its directory, where the atomic write makes its own (permission bits say nothing for root, nor on
    /proc or a read-only mount).

    Raises
    ------
    GraphAuditError
        Empty path; one of the inputs or inside an input directory; an existing directory or other non-regular
        file (a device such as /dev/null, a FIFO: an atomic write would replace it); a missing parent directory;
        a path that cannot be resolved (symlink loop); a directory no file can be written in (the reason from the
        operating system).
    """
    if not str(path):
        raise GraphAuditError("empty output file name")
    p = Path(path)
    check_not_input(p, protect)
    if p.is_dir():
        raise GraphAuditError(f"{p}: is a directory")
    if p.exists() and not p.is_file():
        raise GraphAuditError(f"{p}: exists and is not a regular file (a device or FIFO); refusing to replace it")
    if not p.parent.is_dir():
        raise GraphAuditError(f"{p}: {p.parent} is not an existing directory")
    if probe:
        try:
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".graphaudit-probe-")
            os.close(fd)
            os.unlink(tmp)
        except OSError as e:
            raise GraphAuditError(f"{p}: cannot write in {p.parent}: {e.strerror or e}") from None
    return p


def write_atomic(path: str | os.PathLike, text: str, protect: list[Path] | None = None) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same directory and ``os.replace``.

    ``protect`` lists files that must not be overwritten (the user's inputs).

    Raises
    ------
    GraphAuditError
        Empty path, a protected file, a missing parent directory, a directory or non-regular file as target,
        or an unwritable location. No temporary file is left behind.
    """
    p = check_output_path(path, protect, probe=False)  # the write itself says whether it can be written
    try:
        atomic_write(p, text)
    except OSError as e:
        raise GraphAuditError(f"{p}: cannot write ({e.strerror or e})") from e
    return p


def check_output_dir(path: str | os.PathLike, protect: list[Path] | None = None,
                     hint: str = "name an output place outside it") -> Path:
    """Validate an output directory before any work is done; it need not exist yet (it is created on write).

    Whether it can be created (or written in) is proven, not guessed: a temporary directory is made and removed at
    once in it, or in its first existing ancestor (permission bits say nothing for root, nor on /proc or a
    read-only mount).

    Parameters
    ----------
    path : path-like
        The directory (``--out``).
    protect : list of Path
        The user's inputs: files, and directories whose whole tree is off limits.
    hint : str
        What to do instead, in the refusal (:func:`check_not_input`).

    Raises
    ------
    GraphAuditError
        ``path`` is empty, an existing non-directory, a dangling symbolic link or a symlink loop (itself or an
        ancestor), an input file, one of the input directories or inside one, or cannot be created or written in
        (the reason from the operating system, naming the place that refused).
    """
    if not str(path):
        raise GraphAuditError("empty output directory name")
    p = Path(path)
    check_not_input(p, protect, "write into", hint)
    for q in (p, *p.parents):  # the first existing ancestor must be a directory we can create it in
        try:
            q.stat()
        except (FileNotFoundError, NotADirectoryError):  # not there, or below a file (found further up)
            if q.is_symlink():
                what = "" if q == p else f"{q} "
                raise GraphAuditError(f"{p}: {what}is a dangling symbolic link (to {os.readlink(q)})") from None
            continue
        except OSError as e:  # ELOOP, ENOTDIR, EACCES
            loop = " (a symbolic link loop)" if q.is_symlink() and e.strerror and "symbolic" in e.strerror else ""
            raise GraphAuditError(f"{p}: cannot resolve {q}{loop}: {e.strerror or e}") from None
        if not q.is_dir():
            raise GraphAuditError(f"{p}: exists and is not a directory" if q == p else f"{p}: {q} is not a directory")
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".graphaudit-probe-", dir=q))
        except OSError as e:
            where = "cannot write in it" if q == p else f"cannot be created under {q}"
            raise GraphAuditError(f"{p}: {where}: {e.strerror or e}") from None
        break
    return p


def make_dir(path: Path) -> Path:
    """Create an output directory (and its parents) validated by :func:`check_output_dir`.

    Raises
    ------
    GraphAuditError
        It cannot be created (read-only location, a dangling symlink, a file in the way).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GraphAuditError(f"{path}: cannot create the directory ({e.strerror or e})") from None
    return path


def user_inputs(paths: list[str | os.PathLike], *extra: str | os.PathLike | None) -> list[Path]:
    """Everything the user gave us, which outputs must never overwrite or land in (``protect`` of the checks above).

    Parameters
    ----------
    paths : list of path-like
        The stage paths as given: a stage directory, or stage files.
    extra : path-like or None
        Other files or directories given (source model, config, data, log; None skipped).

    Returns
    -------
    list of Path
        The stage paths (a directory and the files in it), the ``extra`` paths, then the directory holding each
        existing stage file given as a file (its symbolic link's and its target's): the toolchain's output directory,
        kept clear of outputs as a stage directory given is. A directory holding only an ``extra`` path (a project
        directory with the config or the float model given as source) is not listed.
    """
    out: list[Path] = [Path(x) for x in extra if x]
    homes: dict[Path, Path] = {}  # directory -> the first stage file given in it
    for p in map(Path, paths):
        out.append(p)
        try:
            if p.is_dir():
                out.extend(q for q in p.iterdir() if q.is_file())
            elif p.exists():
                for d in (p.parent, p.resolve().parent):
                    if not any(os.path.samefile(d, h) for h in homes):
                        homes[d] = p
        except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
            pass
    return out + [StageFileDir.of(d, f) for d, f in homes.items() if d not in out]


class StageFileDir(type(Path())):
    """The directory holding a stage file the user gave (``file``), in :func:`user_inputs`: kept clear of outputs
    as a stage directory given is; the refusal names the stage file."""

    file: Path | None = None

    @classmethod
    def of(cls, directory: str | os.PathLike, file: str | os.PathLike) -> StageFileDir:
        """``directory`` as the home of the stage file ``file``."""
        home = cls(directory)
        home.file = Path(file)
        return home
