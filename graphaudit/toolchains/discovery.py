"""Find and order the stage files of a pipeline (Horizon stage naming or an explicit list)."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import StageDiscoveryError
from .roles import ROLE_ORDER

__all__ = ["STAGE_SUFFIXES", "StageFile", "discover_stages", "role_of"]

#: File-name suffix -> stage role, in pipeline order. Horizon names come from
#: rdk_x3_doc ptq_process.md and the OE 3.x docs (docs/HORIZON.md section 1); the plain
#: ``_original/_optimized/_qdq`` names are graphaudit's convention for onnxruntime pipelines.
STAGE_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("_original_float_model.onnx", "original"),
    ("_optimized_float_model.onnx", "optimized"),
    ("_calibrated_model.onnx", "calibrated"),
    ("_ptq_model.onnx", "ptq"),
    ("_quantized_model.onnx", "quantized"),
    ("_original.onnx", "original"),
    ("_optimized.onnx", "optimized"),
    ("_qdq.onnx", "quantized"),
)


@dataclass(frozen=True)
class StageFile:
    """A stage file with its role and display name."""

    path: Path
    role: str
    name: str


def role_of(path: Path) -> tuple[str, str]:
    """(role, prefix) from a stage file name; ("custom", stem) when the name follows no convention."""
    for suffix, role in STAGE_SUFFIXES:
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return role, path.name[: -len(suffix)]
    return "custom", path.stem


def _working_dir_below(d: Path) -> Path | None:
    """The one subdirectory of ``d`` that holds stage files (hb_mapper's ``working_dir``, by default
    ``model_output/``), or None when none or several do."""
    found = []
    for entry in sorted(d.iterdir()):
        try:
            if entry.is_dir() and any(role_of(f)[0] != "custom" for f in entry.iterdir()
                                      if f.is_file() and f.name.endswith(".onnx")):
                found.append(entry)
        except OSError:
            continue
    return found[0] if len(found) == 1 else None


def _why_not_a_file(entry: Path) -> str | None:
    """Why a directory entry named like a stage file cannot be read as one (None: a regular file, or a directory,
    which is not a stage and is skipped)."""
    try:
        mode = entry.stat().st_mode
    except FileNotFoundError:
        return f"is a dangling symbolic link (to {os.readlink(entry)})" if entry.is_symlink() else "vanished"
    except OSError as e:
        if entry.is_symlink() and e.errno == errno.ELOOP:
            return "is a symbolic link loop"
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "is not a regular file (a FIFO, socket or device)"


def _from_directory(d: Path) -> list[StageFile]:
    by_prefix: dict[str, dict[str, Path]] = {}
    for entry in sorted(d.iterdir()):
        if not entry.name.endswith(".onnx"):
            continue
        role, prefix = role_of(entry)
        if role == "custom":
            continue
        why = _why_not_a_file(entry)
        if why is not None:  # the user's stage set is broken: refused, not reported with a stage fewer
            raise StageDiscoveryError(f"{entry}: {why}; the {role} stage of {d} cannot be read")
        if not entry.is_file():
            continue
        slot = by_prefix.setdefault(prefix, {})
        if role in slot:
            raise StageDiscoveryError(f"{d}: two {role} stage files for prefix {prefix!r}: {slot[role].name}, {entry.name}")
        slot[role] = entry
    if not by_prefix:
        sub = _working_dir_below(d)
        if sub is not None:  # an hb_mapper project directory: its stages are in working_dir (model_output/)
            return _from_directory(sub)
        onnx_files = [e.name for e in d.iterdir() if e.name.endswith(".onnx")]
        hint = (f" ({len(onnx_files)} other .onnx file(s): pass them explicitly in pipeline order)" if onnx_files else "")
        raise StageDiscoveryError(
            f"{d}: no stage files found (expected names ending in "
            f"{', '.join(sfx for sfx, _ in STAGE_SUFFIXES)}){hint}")
    if len(by_prefix) > 1:
        raise StageDiscoveryError(f"{d}: stage files of several models ({', '.join(sorted(by_prefix))}); "
                                  "pass one model's files explicitly")
    (prefix, slot), = by_prefix.items()
    return [StageFile(p, role, f"{role}") for role, p in sorted(slot.items(), key=lambda kv: ROLE_ORDER[kv[0]])]


def discover_stages(paths: list[str | os.PathLike], source: str | os.PathLike | None = None,
                    min_stages: int = 2) -> list[StageFile]:
    """Resolve the user's arguments to an ordered list of stage files.

    Parameters
    ----------
    paths : list of path-like
        Either one directory holding stage files (ordered by role: original, optimized,
        calibrated, ptq, quantized), or two or more ONNX files given in pipeline order.
    source : path-like, optional
        The user's pre-toolchain float model, added as stage 0 with role ``"source"``.
    min_stages : int
        Fewer stages are refused (1: one model alone is a pipeline of one stage, ``explain``'s structure view).

    Raises
    ------
    StageDiscoveryError
        Missing paths, a directory without stage files, mixed directories and files, fewer
        than two stages in total, one file given as two stages (also through another path, a symlink or a hard
        link; ``source`` included).
    """
    if not paths:
        raise StageDiscoveryError("no stage directory or files given")
    ps = [Path(p) for p in paths]
    for p in ps:
        try:
            if not p.exists():
                raise StageDiscoveryError(f"{p}: no such file or directory")
        except OSError as e:
            raise StageDiscoveryError(f"{p}: cannot access ({e.strerror})") from e
    try:
        return _discover(ps, source, min_stages)
    except PermissionError as e:
        raise StageDiscoveryError(f"{e.filename or ps[0]}: permission denied") from e
    except OSError as e:
        raise StageDiscoveryError(f"{e.filename or ps[0]}: cannot read ({e.strerror})") from e


def _once_each(stages: list[StageFile]) -> None:
    """StageDiscoveryError when two stages are one file on disk: the same path twice, another spelling of it
    (``a.onnx`` and ``./a.onnx``), a symlink or a hard link to it (same device and inode). A pipeline of a stage
    and itself compares nothing, and the roles the run gives the two would be made up."""
    seen: dict[tuple[int, int], StageFile] = {}
    for f in stages:
        st = f.path.stat()
        first = seen.setdefault((st.st_dev, st.st_ino), f)
        if first is not f:
            how = "--source and a stage" if "source" in (first.role, f.role) else "two stages"
            same = "" if str(first.path) == str(f.path) else f" (the same file as {first.path})"
            raise StageDiscoveryError(f"{f.path}: given as {how}{same}; give each stage file once, in pipeline "
                                      "order")


def _discover(ps: list[Path], source, min_stages: int = 2) -> list[StageFile]:
    if any(p.is_dir() for p in ps):
        if len(ps) != 1:
            what = "several directories" if all(p.is_dir() for p in ps) else "directories and files mixed"
            raise StageDiscoveryError(f"{', '.join(map(str, ps))}: {what}; give one stage directory, or stage files")
        stages = _from_directory(ps[0])
    else:
        stages = []
        names: set[str] = set()
        for p in ps:
            role, _prefix = role_of(p)
            name = role if role != "custom" and role not in names else p.name.removesuffix(".onnx")
            names.add(name)
            stages.append(StageFile(p, role, name))
        known = [(f, ROLE_ORDER[f.role]) for f in stages if f.role in ROLE_ORDER]
        for (f1, o1), (f2, o2) in zip(known, known[1:]):
            if o2 < o1:
                article = "an" if f2.role[0] in "aeiou" else "a"
                raise StageDiscoveryError(
                    f"{f2.path}: {article} {f2.role} stage given after {f1.path.name} ({f1.role}); list stages in "
                    "pipeline order (original, optimized, calibrated, ptq/quantized)")
    if source is not None:
        sp = Path(source)
        if not str(source):
            raise StageDiscoveryError("--source: empty path")
        if sp.is_dir():
            raise StageDiscoveryError(f"{sp}: --source must be an ONNX file, not a directory")
        if not sp.is_file():
            raise StageDiscoveryError(f"{sp}: --source model not found")
        stages.insert(0, StageFile(sp, "source", "source"))
    _once_each(stages)
    if len(stages) < min_stages:
        raise StageDiscoveryError(f"{ps[0]}: only one stage ({stages[0].path.name}); a pipeline needs at least two")
    return stages
