"""What a model input takes (InputSpec) and how an array of data splits into its samples; shared error helpers."""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DataError, DataFileError

if TYPE_CHECKING:  # pragma: no cover
    from ..stage import StageGraph

__all__ = ["InputSpec", "input_specs", "natural_key"]

PICKLE = "pickled/object array, refusing to unpickle"

#: Most elements of one input's sample graphaudit reads: 2**25 = 33,554,432 (a 4K image, 1x3x2160x3840, has
#: 24,883,200). The statistics' float64 sums hold several copies of the sample (about 10 x 8 bytes per element, 2.7 GB
#: here), so a file of larger samples is refused from its header, before any of its data is read or decompressed.
MAX_STATS_ELEMENTS = 2 ** 25


@dataclass
class InputSpec:
    """One model input to feed.

    Attributes
    ----------
    name : str
        The graph input name (the key of every sample dict).
    dtype : str
        numpy dtype name (``"float32"``, ``"uint8"``, ``"int64"``, ``"bool"``...).
    shape : tuple or None
        Dims: ``int`` for a static dim, ``str`` (symbol) or ``None`` for a dynamic one; ints <= 0
        (``-1``/``0`` of some exporters) count as dynamic too. ``None`` for an unknown rank.
    """

    name: str
    dtype: str
    shape: tuple | None

    def __post_init__(self) -> None:
        if self.shape is not None and not isinstance(self.shape, tuple):
            self.shape = tuple(self.shape)


def is_static(d: Any) -> bool:
    """True for a static dim (a positive int; bool is not a dim)."""
    return isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0


def fmt_shape(shape: tuple | None) -> str:
    """``(1, "N", None)`` -> ``"[1,N,?]"``; ``None`` -> ``"[unknown rank]"``."""
    if shape is None:
        return "[unknown rank]"
    return "[" + ",".join(d if isinstance(d, str) else str(int(d)) if isinstance(d, (int, np.integer)) else "?"
                          for d in shape) + "]"


def data_error(label: Any, problem: str) -> DataError:
    """A one-line DataError ``"<label>: <problem>"`` (line breaks in names are escaped)."""
    text = f"{label}: {problem}"
    return DataError(text.replace("\r", "\\r").replace("\n", "\\n"))


def file_error(label: Any, problem: str, path: Any = None) -> DataFileError:
    """:func:`data_error` for a problem of one file's content (:class:`DataFileError`; ``path`` defaults to
    ``label``): a directory of data leaves that file out and goes on."""
    text = f"{label}: {problem}".replace("\r", "\\r").replace("\n", "\\n")
    return DataFileError(text, Path(path if path is not None else label))


def check_sample_size(label: Any, shape: tuple, name: str, path: Any = None) -> None:
    """:class:`DataFileError` (naming ``label``; ``path`` as in :func:`file_error`) when samples of ``shape`` for
    input ``name`` hold more than :data:`MAX_STATS_ELEMENTS` elements."""
    n = 1
    for d in shape:
        n *= int(d)
    if n > MAX_STATS_ELEMENTS:
        raise file_error(label, f"samples of shape {fmt_shape(shape)} for input {name!r} have {n:,} elements, more "
                                f"than the {MAX_STATS_ELEMENTS:,} graphaudit reads per sample; not read", path)


def one_line(e: BaseException) -> str:
    """An exception's message collapsed to one line."""
    return " ".join(str(e).split()) or type(e).__name__


def os_error(label: str, e: OSError, path: Any = None) -> DataFileError:
    """The one-line error of an OSError met reading ``label`` (a :class:`DataFileError` of ``path``, default
    ``label``)."""
    if isinstance(e, FileNotFoundError):
        return file_error(label, "no such file", path)
    if isinstance(e, IsADirectoryError):
        return file_error(label, "is a directory, not a file", path)
    return file_error(label, f"cannot read: {e.strerror or one_line(e)}", path)


def natural_key(name: str) -> tuple:
    """Sort key ordering digit runs by value: ``"2.npy"`` before ``"10.npy"`` (ties broken by the name).

    Parameters
    ----------
    name : str
        A file name.

    Returns
    -------
    tuple
        Alternating lower-cased text runs and ints (ASCII digits only), then the name itself.
    """
    parts = re.split(r"(\d+)", name, flags=re.ASCII)
    return tuple(int(t) if i % 2 else t.lower() for i, t in enumerate(parts)), name


def list_files(d: Path) -> list[Path]:
    """Regular, non-hidden files of a directory, naturally sorted (DataError when it cannot be listed)."""
    try:
        entries = list(d.iterdir())
    except OSError as e:
        raise data_error(d, f"cannot list directory: {e.strerror or one_line(e)}") from None
    files = [p for p in entries if not p.name.startswith(".") and p.is_file()]
    return sorted(files, key=lambda p: natural_key(p.name))


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def entry_problem(p: Path) -> str | None:
    """Why directory entry ``p`` cannot be read as a data file, one line naming it, or None for a regular file
    (symbolic links followed). Only ``stat``: the entry is never opened (a FIFO would block, a device never end)."""
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        why = "no such file"
        if p.is_symlink():
            try:
                why = f"dangling symbolic link (its target {os.readlink(p)!r} does not exist)"
            except OSError:
                why = "dangling symbolic link"
        return str(file_error(p, why))
    except OSError as e:
        why = "symbolic link loop" if e.errno == errno.ELOOP else f"cannot read: {e.strerror or one_line(e)}"
        return str(file_error(p, why))
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    if p.is_symlink():
        try:
            kind += f" (symbolic link to {os.readlink(p)!r})"
        except OSError:
            pass
    return str(file_error(p, f"{kind}, not a regular file; not opened"))


def list_entries(d: Path) -> list[tuple[Path, str | None]]:
    """Every non-hidden entry of a directory, naturally sorted, with :func:`entry_problem` (None for a regular
    file): data-named entries that cannot be read are said, not skipped (DataError when ``d`` cannot be listed)."""
    try:
        entries = [p for p in d.iterdir() if not p.name.startswith(".")]
    except OSError as e:
        raise data_error(d, f"cannot list directory: {e.strerror or one_line(e)}") from None
    return [(p, entry_problem(p)) for p in sorted(entries, key=lambda p: natural_key(p.name))]


def dtype_kind(dt: np.dtype) -> str:
    """numpy kind, with ml_dtypes' extension floats/ints (kind ``V``) mapped to ``f``/``i``/``u``."""
    if dt.kind == "V" and dt.fields is None:
        n = dt.name
        if n.startswith(("bfloat", "float")):
            return "f"
        if n.startswith("uint"):
            return "u"
        if n.startswith("int"):
            return "i"
    return dt.kind


# Input kind -> data kinds accepted. Real numbers (f, i, u) are interchangeable: conversion and range
# checks belong to the module that adapts data to a stage. Complex, bool and strings need their own kind.
_ACCEPT = {"f": "fiu", "i": "fiu", "u": "fiu", "c": "c", "b": "b", "O": "US", "U": "US", "S": "US"}


def _spec_dtype(spec: InputSpec, label: Any) -> np.dtype:
    if not isinstance(spec.dtype, str):
        raise data_error(label, f"input {spec.name!r}: dtype must be a numpy dtype name, got {spec.dtype!r}")
    try:
        return np.dtype(spec.dtype)
    except TypeError as e:
        raise data_error(label, f"input {spec.name!r}: unknown dtype {spec.dtype!r} ({one_line(e)})") from None


def check_specs(inputs: Any, label: Any) -> list[InputSpec]:
    """``inputs`` as a list of InputSpec with distinct names and numpy dtype names (DataError naming ``label``)."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise data_error(label, "no model inputs given (inputs must be a non-empty list of InputSpec)")
    seen: set[str] = set()
    for s in inputs:
        if not isinstance(s, InputSpec):
            raise data_error(label, f"inputs must be InputSpec objects, got {type(s).__name__}")
        if s.name in seen:
            raise data_error(label, f"input {s.name!r} given twice")
        seen.add(s.name)
        _spec_dtype(s, label)
    return list(inputs)


def check_dtype(spec: InputSpec, dt: np.dtype, label: Any) -> None:
    """DataFileError when data of dtype ``dt`` cannot feed ``spec`` (object, structured, wrong kind): the file's
    problem, which a directory of data leaves out."""
    if dt.hasobject:
        raise file_error(label, PICKLE)
    if dt.fields is not None:
        raise file_error(label, f"structured dtype {dt} cannot feed input {spec.name!r}")
    want = dtype_kind(np.dtype(spec.dtype))
    if dtype_kind(dt) not in _ACCEPT.get(want, want):
        raise file_error(label, f"dtype {dt.name} cannot feed input {spec.name!r} ({spec.dtype})")


def split_samples(spec: InputSpec, shape: tuple[int, ...], label: Any, path: Any = None) -> tuple[int, tuple[int, ...]]:
    """How an array of ``shape`` splits into samples of ``spec``: ``(count, sample shape)``.

    * rank == model rank + 1: a stack along axis 0, ``count = shape[0]`` samples of ``shape[1:]``;
    * rank == model rank, static batch ``B`` and ``shape[0] = k*B`` with ``k > 1``: ``k`` samples of batch ``B``;
    * rank == model rank otherwise: one sample (a dynamic batch keeps the array's batch);
    * unknown model rank: one sample, unchecked.

    Every static dim of the sample must equal the model's (DataError giving both shapes). An array without elements
    (a dim of size 0: ``[0,3,224,224]`` for a dynamic batch, an empty stack) holds no samples: a
    :class:`DataFileError` naming ``label`` (``path`` as in :func:`file_error`), which a directory of data leaves
    out; run as a sample of batch 0 it compared empty outputs as equal (cosine 1, SQNR inf).
    """
    if spec.shape is None:
        return 1, shape
    rank = len(spec.shape)
    count, sample = 1, shape
    if len(shape) == rank + 1:
        count, sample = shape[0], shape[1:]
    elif len(shape) == rank and rank and is_static(spec.shape[0]):
        b = int(spec.shape[0])
        if shape[0] != b and shape[0] % b == 0:
            count, sample = shape[0] // b, (b,) + shape[1:]
    if len(sample) != rank or any(is_static(d) and int(d) != s for d, s in zip(spec.shape, sample)):
        raise data_error(label, f"array shape {fmt_shape(shape)} does not match input {spec.name!r} "
                                f"shape {fmt_shape(spec.shape)}")
    if count == 0 or 0 in sample:
        raise file_error(label, f"array shape {fmt_shape(shape)} holds no samples (it has no elements)", path)
    return count, tuple(sample)


def input_specs(stage: "StageGraph") -> list[InputSpec]:
    """The input specs of a loaded stage, in graph input order.

    Parameters
    ----------
    stage : StageGraph
        From :func:`graphaudit.load.load_stage`.

    Returns
    -------
    list of InputSpec
        ONNX element types mapped to numpy dtype names (``"FLOAT"`` -> ``"float32"``,
        ``"STRING"`` -> ``"object"``); shapes as in :attr:`TensorInfo.shape` (symbols kept).

    Raises
    ------
    DataError
        A stage without graph inputs (nothing to feed samples to), an input without an element type, or of a type
        numpy cannot represent.
    """
    import onnx

    if not stage.inputs:
        raise data_error(stage.path, "the stage file has no graph inputs (its outputs depend on its weights only), "
                                     "so there is nothing to feed samples to")
    out = []
    for name in stage.inputs:
        t = stage.tensors[name]
        if not t.dtype:
            raise data_error(stage.path, f"input {name!r} has no element type")
        try:
            dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(onnx.TensorProto.DataType.Value(t.dtype)))
        except (ValueError, KeyError, TypeError):
            raise data_error(stage.path, f"input {name!r} has element type {t.dtype}, which numpy cannot "
                                         "represent") from None
        out.append(InputSpec(name, dt.name, t.shape))
    return out
