"""Model input data for stage models: .npy/.npz files, Horizon calibration_data, raw files, images, random data."""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import re
import struct
import zipfile
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ..errors import DataError

if TYPE_CHECKING:  # pragma: no cover
    from ..stage import StageGraph

__all__ = ["InputSpec", "DataSource", "open_data", "random_source", "input_specs", "natural_key",
           "NPY_EXTS", "RAW_EXTS", "IMAGE_EXTS"]

#: File name suffixes (lower case) recognised for each source family.
NPY_EXTS = (".npy", ".npz")
RAW_EXTS = (".bin", ".rgb", ".raw")
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp")

_MAX_HEADER = 10000  # numpy's own default limit for .npy headers
_PICKLE = "pickled/object array, refusing to unpickle"


# --------------------------------------------------------------------------------------------------
# Specs and helpers


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


def _static(d: Any) -> bool:
    """True for a static dim (a positive int; bool is not a dim)."""
    return isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0


def _fmt_shape(shape: tuple | None) -> str:
    """``(1, "N", None)`` -> ``"[1,N,?]"``; ``None`` -> ``"[unknown rank]"``."""
    if shape is None:
        return "[unknown rank]"
    return "[" + ",".join(d if isinstance(d, str) else str(int(d)) if isinstance(d, (int, np.integer)) else "?"
                          for d in shape) + "]"


def _msg(label: Any, problem: str) -> DataError:
    """A one-line DataError ``"<label>: <problem>"`` (line breaks in names are escaped)."""
    text = f"{label}: {problem}"
    return DataError(text.replace("\r", "\\r").replace("\n", "\\n"))


def _one_line(e: BaseException) -> str:
    """An exception's message collapsed to one line."""
    return " ".join(str(e).split()) or type(e).__name__


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


def _kind(dt: np.dtype) -> str:
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
        raise _msg(label, f"input {spec.name!r}: dtype must be a numpy dtype name, got {spec.dtype!r}")
    try:
        return np.dtype(spec.dtype)
    except TypeError as e:
        raise _msg(label, f"input {spec.name!r}: unknown dtype {spec.dtype!r} ({_one_line(e)})") from None


def _check_specs(inputs: Any, label: Any) -> list[InputSpec]:
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise _msg(label, "no model inputs given (inputs must be a non-empty list of InputSpec)")
    seen: set[str] = set()
    for s in inputs:
        if not isinstance(s, InputSpec):
            raise _msg(label, f"inputs must be InputSpec objects, got {type(s).__name__}")
        if s.name in seen:
            raise _msg(label, f"input {s.name!r} given twice")
        seen.add(s.name)
        _spec_dtype(s, label)
    return list(inputs)


def _check_dtype(spec: InputSpec, dt: np.dtype, label: Any) -> None:
    """DataError when data of dtype ``dt`` cannot feed ``spec`` (object, structured, wrong kind)."""
    if dt.hasobject:
        raise _msg(label, _PICKLE)
    if dt.fields is not None:
        raise _msg(label, f"structured dtype {dt} cannot feed input {spec.name!r}")
    want = _kind(np.dtype(spec.dtype))
    if _kind(dt) not in _ACCEPT.get(want, want):
        raise _msg(label, f"dtype {dt.name} cannot feed input {spec.name!r} ({spec.dtype})")


def _plan(spec: InputSpec, shape: tuple[int, ...], label: Any) -> tuple[int, tuple[int, ...]]:
    """How an array of ``shape`` splits into samples of ``spec``: ``(count, sample shape)``.

    * rank == model rank + 1: a stack along axis 0, ``count = shape[0]`` samples of ``shape[1:]``;
    * rank == model rank, static batch ``B`` and ``shape[0] = k*B`` with ``k > 1``: ``k`` samples of batch ``B``;
    * rank == model rank otherwise: one sample (a dynamic batch keeps the array's batch);
    * unknown model rank: one sample, unchecked.

    Every static dim of the sample must equal the model's (DataError giving both shapes).
    """
    if spec.shape is None:
        return 1, shape
    rank = len(spec.shape)
    count, sample = 1, shape
    if len(shape) == rank + 1:
        count, sample = shape[0], shape[1:]
    elif len(shape) == rank and rank and _static(spec.shape[0]):
        b = int(spec.shape[0])
        if shape[0] != b and shape[0] % b == 0:
            count, sample = shape[0] // b, (b,) + shape[1:]
    if len(sample) != rank or any(_static(d) and int(d) != s for d, s in zip(spec.shape, sample)):
        raise _msg(label, f"array shape {_fmt_shape(shape)} does not match input {spec.name!r} "
                          f"shape {_fmt_shape(spec.shape)}")
    if count == 0:
        raise _msg(label, f"array shape {_fmt_shape(shape)} holds no samples")
    return count, tuple(sample)


# --------------------------------------------------------------------------------------------------
# Arrays inside files: .npy, .npz members, raw files


@dataclass
class _ArrayRef:
    """Where an array's bytes are: a file (``member=None``) or a .npz member, from byte ``offset``."""

    path: Path
    member: str | None
    label: str
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    offset: int
    npy: bool  # has a .npy header (re-checked when read)


#: numpy >= 1.24 bounds the header it parses (``max_header_size``); numpy 1.23, the Horizon toolchain's pin, has no
#: such argument and reads headers up to its own limit with ``ast.literal_eval`` (never unpickling) either way.
_HEADER_LIMIT = ({"max_header_size": _MAX_HEADER}
                 if "max_header_size" in inspect.signature(np.lib.format.read_array_header_1_0).parameters else {})


def _parse_header(fh: Any, label: str, size: int) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """Read a .npy header from ``fh`` (at its start): ``(dtype, shape, fortran_order, data offset)``.

    ``size`` is the byte size of the file or member, to detect truncation. Never unpickles.
    """
    magic = fh.read(8)
    if magic[:1] == b"\x80":
        raise _msg(label, _PICKLE)
    if len(magic) < 8 and b"\x93NUMPY".startswith(magic[:6]):
        raise _msg(label, "truncated .npy (no complete header)")
    if magic[:6] != b"\x93NUMPY":
        raise _msg(label, "not a .npy array (bad magic)")
    version = (magic[6], magic[7])
    try:
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh, **_HEADER_LIMIT)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh, **_HEADER_LIMIT)
        else:
            raise _msg(label, f"unsupported .npy format version {version[0]}.{version[1]}")
    except (ValueError, SyntaxError, TypeError, struct.error) as e:
        if "EOF" in str(e):
            raise _msg(label, "truncated .npy (incomplete header)") from None
        raise _msg(label, f"corrupt .npy header ({_one_line(e)})") from None
    offset = fh.tell()
    if dtype.hasobject:
        raise _msg(label, _PICKLE)
    need = offset + math.prod(shape) * dtype.itemsize
    if size < need:
        raise _msg(label, f"truncated .npy: {size} bytes, {_fmt_shape(shape)} {dtype.name} needs {need}")
    return dtype, tuple(int(d) for d in shape), bool(fortran), offset


def _npy_ref(path: Path) -> _ArrayRef:
    label = str(path)
    try:
        with open(path, "rb") as fh:
            dtype, shape, fortran, offset = _parse_header(fh, label, os.fstat(fh.fileno()).st_size)
    except OSError as e:
        raise _os_error(label, e) from None
    return _ArrayRef(path, None, label, dtype, shape, fortran, offset, True)


def _npz_refs(path: Path) -> dict[str, _ArrayRef]:
    """Header of every ``<key>.npy`` member of a .npz, keyed by ``<key>`` (no array data read)."""
    out: dict[str, _ArrayRef] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.is_dir() or not info.filename.endswith(".npy"):
                    continue
                key = info.filename[:-4]
                label = f"{path} (key {key!r})"
                with zf.open(info) as fh:
                    dtype, shape, fortran, offset = _parse_header(fh, label, info.file_size)
                out[key] = _ArrayRef(path, info.filename, label, dtype, shape, fortran, offset, True)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as e:
        raise _msg(path, f"corrupt or truncated .npz ({_one_line(e)})") from None
    except OSError as e:
        raise _os_error(str(path), e) from None
    return out


def _raw_ref(path: Path, raw_dtype: str | None, raw_shape: tuple | None) -> _ArrayRef:
    label = str(path)
    if raw_dtype is None or raw_shape is None:
        raise _msg(label, "raw file: give --raw-dtype and --raw-shape to read it")
    try:
        dtype = np.dtype(raw_dtype)
    except TypeError:
        raise _msg(label, f"raw_dtype {raw_dtype!r} is not a numpy dtype") from None
    if dtype.hasobject or dtype.itemsize == 0:
        raise _msg(label, f"raw_dtype {raw_dtype!r} cannot describe raw bytes")
    try:
        shape = tuple(int(d) for d in raw_shape)
    except (TypeError, ValueError):
        raise _msg(label, f"raw_shape {raw_shape!r} must be a tuple of positive ints") from None
    if not shape or any(d <= 0 for d in shape) or any(isinstance(d, bool) for d in raw_shape):
        raise _msg(label, f"raw_shape {raw_shape!r} must be a tuple of positive ints")
    try:
        size = path.stat().st_size
    except OSError as e:
        raise _os_error(label, e) from None
    need = math.prod(shape) * dtype.itemsize
    if size != need:
        raise _msg(label, f"{size} bytes, but raw_shape {_fmt_shape(shape)} x {dtype.name} is {need} bytes")
    return _ArrayRef(path, None, label, dtype, shape, False, 0, False)


def _os_error(label: str, e: OSError) -> DataError:
    if isinstance(e, FileNotFoundError):
        return _msg(label, "no such file")
    if isinstance(e, IsADirectoryError):
        return _msg(label, "is a directory, not a file")
    return _msg(label, f"cannot read: {e.strerror or _one_line(e)}")


def _read_exact(fh: Any, dtype: np.dtype, shape: tuple[int, ...], label: str) -> np.ndarray:
    """Read one C-ordered block of ``shape`` x ``dtype`` from ``fh`` into a fresh native-order array."""
    arr = np.empty(shape, dtype)
    buf = memoryview(arr.reshape(-1).view(np.uint8))
    got = 0
    while got < len(buf):
        k = fh.readinto(buf[got:])
        if not k:
            raise _msg(label, f"truncated: data ends after {got} of {len(buf)} bytes of a sample")
        got += k
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


class _Reader:
    """Sequential reader of the samples of one array (one open file or .npz member)."""

    def __init__(self, ref: _ArrayRef, sample_shape: tuple[int, ...], count: int, stack: contextlib.ExitStack,
                 zips: dict[Path, zipfile.ZipFile]):
        self.ref, self.sample_shape, self.count, self.i = ref, sample_shape, count, 0
        self.whole: np.ndarray | None = None
        if ref.member is None:
            fh = stack.enter_context(open(ref.path, "rb"))
            size = os.fstat(fh.fileno()).st_size
        else:
            if ref.path not in zips:
                zips[ref.path] = stack.enter_context(zipfile.ZipFile(ref.path))
            info = zips[ref.path].getinfo(ref.member)
            fh = stack.enter_context(zips[ref.path].open(info))
            size = info.file_size
        if ref.npy:
            now = _parse_header(fh, ref.label, size)
            if now != (ref.dtype, ref.shape, ref.fortran, ref.offset):
                raise _msg(ref.label, "changed on disk since the data source was opened")
        elif size != math.prod(ref.shape) * ref.dtype.itemsize:
            raise _msg(ref.label, "changed on disk since the data source was opened")
        self.fh = fh
        if ref.fortran:  # column-major: samples are not contiguous, read the array once
            self.whole = _read_exact(fh, ref.dtype, ref.shape[::-1], ref.label).T

    def next(self) -> np.ndarray:
        i, self.i = self.i, self.i + 1
        if self.whole is not None:
            if len(self.sample_shape) < len(self.ref.shape):  # a stack along axis 0
                return np.ascontiguousarray(self.whole[i])
            b = self.sample_shape[0] if self.sample_shape else 1  # batch-split (or one sample: count 1)
            return np.ascontiguousarray(self.whole[i * b:(i + 1) * b] if self.count > 1 else self.whole)
        return _read_exact(self.fh, self.ref.dtype, self.sample_shape, self.ref.label)


class _FileChunk:
    """Samples read from files: one entry per input, all holding ``count`` samples."""

    def __init__(self, entries: dict[str, tuple[_ArrayRef, tuple[int, ...]]], count: int):
        self.entries, self.count = entries, count

    def samples(self) -> Iterator[dict[str, np.ndarray]]:
        label = next(iter(self.entries.values()))[0].label
        with contextlib.ExitStack() as stack:
            try:
                zips: dict[Path, zipfile.ZipFile] = {}
                readers = {}
                for name, (ref, sample_shape) in self.entries.items():
                    label = ref.label
                    readers[name] = _Reader(ref, sample_shape, self.count, stack, zips)
                for _ in range(self.count):
                    out = {}
                    for name, r in readers.items():
                        label = r.ref.label
                        out[name] = r.next()
                    yield out
            except OSError as e:
                raise _os_error(label, e) from None
            except (zipfile.BadZipFile, zlib.error, EOFError, KeyError) as e:
                raise _msg(label, f"corrupt or truncated .npz ({_one_line(e)})") from None


def _array_chunk(refs: dict[str, _ArrayRef], inputs: list[InputSpec], label: str) -> _FileChunk:
    """Check arrays against the inputs (dtype kind, shape) and pair them into one chunk."""
    entries: dict[str, tuple[_ArrayRef, tuple[int, ...]]] = {}
    count = None
    first = None
    for spec in inputs:
        ref = refs[spec.name]
        _check_dtype(spec, ref.dtype, ref.label)
        n, sample_shape = _plan(spec, ref.shape, ref.label)
        if count is None:
            count, first = n, spec.name
        elif n != count:
            raise _msg(label, f"input {spec.name!r} has {n} samples but input {first!r} has {count}")
        entries[spec.name] = (ref, sample_shape)
    return _FileChunk(entries, count or 0)


# --------------------------------------------------------------------------------------------------
# Images


def _pil(label: Any) -> Any:
    try:
        from PIL import Image, ImageOps
    except ImportError:
        raise _msg(label, "decoding images needs Pillow (pip install pillow)") from None
    return Image, ImageOps


#: Largest image decoded (width x height): a bigger one is refused from its header (decompression bombs). Images
#: are fed unresized, so this is far above any model input (4096 x 4096); decoding one costs about 0.4 GB with the
#: per-stage float64 conversions.
MAX_IMAGE_PIXELS = 4096 * 4096

# Pillow raises many exception types on bad files (OSError, SyntaxError, ValueError, struct.error,
# DecompressionBombError, EOFError, IndexError...): every one of them means "cannot decode".
_PIL_ERRORS = (Exception,)


def _check_image(path: Path) -> None:
    """Identify an image from its header (no pixel decoding); DataError when Pillow cannot."""
    Image, _ = _pil(path)
    try:
        with warnings.catch_warnings():  # Pillow's multi-line DecompressionBombWarning: our own cap below says it
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                mode = img.mode
                width, height = img.size
    except FileNotFoundError:
        raise _msg(path, "no such file") from None
    except _PIL_ERRORS as e:
        raise _msg(path, f"Pillow cannot decode this image ({_one_line(e)})") from None
    if width * height > MAX_IMAGE_PIXELS:
        raise _msg(path, f"image of {width}x{height} pixels is larger than {MAX_IMAGE_PIXELS} pixels; refusing to decode")
    if mode in ("I", "F") or mode.startswith("I;"):
        raise _msg(path, f"image mode {mode} (16-bit or float) cannot be decoded to uint8 RGB without loss")


class _ImageChunk:
    """One image file decoded to uint8 RGB ``[1,H,W,3]``."""

    count = 1

    def __init__(self, path: Path, name: str):
        self.path, self.name = path, name

    def samples(self) -> Iterator[dict[str, np.ndarray]]:
        Image, ImageOps = _pil(self.path)
        try:
            with Image.open(self.path) as img:
                img = ImageOps.exif_transpose(img)
                arr = np.array(img.convert("RGB"), dtype=np.uint8)
        except FileNotFoundError:
            raise _msg(self.path, "no such file") from None
        except _PIL_ERRORS as e:
            raise _msg(self.path, f"Pillow cannot decode this image ({_one_line(e)})") from None
        yield {self.name: arr[np.newaxis]}


# --------------------------------------------------------------------------------------------------
# The source


class DataSource:
    """An iterable of samples for a model, read lazily.

    Iterating yields one ``dict[str, numpy.ndarray]`` per sample: input name -> array with its
    batch dim (e.g. ``[1,3,224,224]``). Arrays keep the dtype they were stored with (native byte
    order); conversion to the model's dtype, layout and normalization is the caller's job. Only
    the sample being yielded is held in memory (exception: a Fortran-ordered stack is read whole).
    The source can be iterated several times.

    Attributes
    ----------
    kind : str
        ``"npy"``, ``"npz"``, ``"dir"`` (.npy/.npz files), ``"calibration_data"``, ``"raw"``,
        ``"images"`` or ``"random"``.
    path : pathlib.Path or None
        The file or directory given (``None`` for random data).
    domain : str
        ``"tensor"`` (arrays that already are model inputs) or ``"pixels"`` (decoded images,
        uint8 RGB ``[1,H,W,3]``).
    inputs : list of InputSpec
        The inputs the samples feed.
    files : list of pathlib.Path
        The data files, in iteration order (empty for random data).
    """

    def __init__(self, kind: str, path: Path | None, domain: str, inputs: list[InputSpec],
                 chunks: list[Any], files: list[Path] | None = None):
        self.kind, self.path, self.domain, self.inputs = kind, path, domain, inputs
        self.files = files or []
        self._chunks = chunks
        self._len = sum(c.count for c in chunks)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for chunk in self._chunks:
            yield from chunk.samples()

    def __repr__(self) -> str:
        return (f"DataSource(kind={self.kind!r}, path={str(self.path) if self.path else None!r}, "
                f"domain={self.domain!r}, samples={self._len})")


def _list_files(d: Path) -> list[Path]:
    """Regular, non-hidden files of a directory, naturally sorted."""
    try:
        entries = list(d.iterdir())
    except OSError as e:
        raise _msg(d, f"cannot list directory: {e.strerror or _one_line(e)}") from None
    files = [p for p in entries if not p.name.startswith(".") and p.is_file()]
    return sorted(files, key=lambda p: natural_key(p.name))


def _family(p: Path) -> str | None:
    ext = p.suffix.lower()
    if ext in NPY_EXTS:
        return "npy"
    if ext in RAW_EXTS:
        return "raw"
    if ext in IMAGE_EXTS:
        return "images"
    return None


def _single_input(inputs: list[InputSpec], label: Any, what: str) -> InputSpec:
    if len(inputs) != 1:
        names = ", ".join(repr(s.name) for s in inputs)
        raise _msg(label, f"{what} feeds one input, but the model has {len(inputs)} inputs ({names}): "
                          "use .npz files keyed by input name or a calibration_data/<input>/ directory")
    return inputs[0]


def _file_chunk(p: Path, family: str, inputs: list[InputSpec], raw_dtype: str | None,
                raw_shape: tuple | None) -> Any:
    """The chunk of one data file (headers checked, no array data read)."""
    if family == "images":
        spec = _single_input(inputs, p, "an image")
        _check_image(p)
        return _ImageChunk(p, spec.name)
    if p.suffix.lower() == ".npz":
        refs = _npz_refs(p)
        for spec in inputs:
            if spec.name not in refs:
                have = ", ".join(repr(k) for k in refs) or "none"
                raise _msg(p, f"no array for input {spec.name!r} (keys: {have})")
        return _array_chunk(refs, inputs, str(p))
    if family == "raw":
        spec = _single_input(inputs, p, "a raw file")
        return _array_chunk({spec.name: _raw_ref(p, raw_dtype, raw_shape)}, inputs, str(p))
    spec = _single_input(inputs, p, "a .npy file")
    return _array_chunk({spec.name: _npy_ref(p)}, inputs, str(p))


def _is_component(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and os.sep not in name and "\0" not in name


def _calibration(d: Path, inputs: list[InputSpec], raw_dtype: str | None, raw_shape: tuple | None) -> DataSource:
    """``d/<input name>/*.npy`` (or raw files), paired across inputs by naturally sorted position."""
    per_input: dict[str, list[Path]] = {}
    for spec in inputs:
        sub = d / spec.name
        files = [p for p in _list_files(sub) if p.suffix.lower() == ".npy" or p.suffix.lower() in RAW_EXTS]
        if not files:
            raise _msg(sub, f"calibration directory of input {spec.name!r} has no .npy or raw files")
        per_input[spec.name] = files
    counts = {name: len(files) for name, files in per_input.items()}
    if len(set(counts.values())) > 1:
        desc = ", ".join(f"{name}/ {n}" for name, n in counts.items())
        raise _msg(d, f"calibration subdirectories hold different file counts ({desc})")
    chunks = []
    for i in range(next(iter(counts.values()))):
        refs = {}
        for spec in inputs:
            p = per_input[spec.name][i]
            refs[spec.name] = _npy_ref(p) if p.suffix.lower() == ".npy" else _raw_ref(p, raw_dtype, raw_shape)
        if len(inputs) > 1:
            label = " + ".join(str(per_input[s.name][i]) for s in inputs)
        else:
            label = str(per_input[inputs[0].name][i])
        chunks.append(_array_chunk(refs, inputs, label))
    files = [p for i in range(len(chunks)) for p in (per_input[s.name][i] for s in inputs)]
    return DataSource("calibration_data", d, "tensor", inputs, chunks, files)


def open_data(path: str | os.PathLike, inputs: list[InputSpec], raw_dtype: str | None = None,
              raw_shape: tuple | None = None) -> DataSource:
    """Open model input data for streaming.

    Every file's header is checked up front (dtype kind, shape against the inputs' static dims,
    byte size, image identification); array data and pixels are read only while iterating, one
    sample at a time.

    Sources (file suffixes are case-insensitive; hidden files are ignored):

    * ``.npy``: a single-input model; one sample, or several (see below).
    * ``.npz``: keys are input names (extra keys are ignored); each key one sample or several,
      the same number for every input.
    * a directory of ``.npy``/``.npz`` files (not recursive), naturally sorted (``2.npy`` before
      ``10.npy``): kind ``"dir"``.
    * a Horizon calibration directory ``<path>/<input name>/N.npy``, recognised when every input
      has its subdirectory: files are paired across inputs by naturally sorted position and the
      counts must agree. Raw files are accepted there too (with ``raw_dtype``/``raw_shape``).
    * raw ``.bin``/``.rgb``/``.raw`` files, or a directory of them: ``raw_dtype`` and ``raw_shape``
      (the whole file: C order, native byte order) are required and the byte size must match.
    * images ``.png``/``.jpg``/``.jpeg``/``.bmp``, or a directory of them: decoded with Pillow
      (EXIF orientation applied, alpha dropped) to uint8 RGB ``[1,H,W,3]``, domain ``"pixels"``;
      their shape is not checked against the model (layout and normalization are adapted elsewhere).

    How an array becomes samples, for a model input of rank ``r``:

    * rank ``r + 1``: a stack along axis 0, one sample per row (``[16,1,3,224,224]`` -> 16 x ``[1,3,224,224]``);
    * rank ``r`` with a static batch ``B`` and a first dim ``k*B``, ``k > 1``: ``k`` samples of batch ``B``
      (``[16,3,224,224]`` for a ``[1,3,224,224]`` input -> 16 samples);
    * rank ``r`` otherwise: one sample; a dynamic batch dim keeps the array's batch
      (``[16,3,224,224]`` for ``[N,3,224,224]`` is one sample of batch 16).

    Real number kinds are interchangeable (integer data may feed a float input and vice versa);
    complex, bool and string inputs need data of their own kind. ``raw_dtype``/``raw_shape`` are
    ignored for non-raw files.

    Parameters
    ----------
    path : path-like
        File or directory.
    inputs : list of InputSpec
        The model's inputs (see :func:`input_specs`).
    raw_dtype : str, optional
        numpy dtype name of raw files.
    raw_shape : tuple of int, optional
        Shape of each raw file's content.

    Returns
    -------
    DataSource

    Raises
    ------
    DataError
        One line naming the file: missing path; unsupported file type; directory without usable
        files or mixing families (arrays, raw, images); pickled or object arrays (never unpickled);
        truncated or corrupt .npy/.npz; a dtype kind that cannot feed the input; a shape that does
        not match the input's rank or static dims (both shapes given); a .npz without an input's
        key; a single array (.npy, raw, image) for a multi-input model (the inputs are named);
        calibration subdirectories with different file counts; raw files without
        ``raw_dtype``/``raw_shape`` or of the wrong byte size; images Pillow cannot decode. While
        iterating: files removed, changed or found corrupt since opening.
    """
    p = Path(path)
    inputs = _check_specs(inputs, p)
    if not p.exists():
        raise _msg(p, "no such file or directory")
    if p.is_dir():
        names = [s.name for s in inputs]
        present = [n for n in names if _is_component(n) and (p / n).is_dir()]
        if present:
            missing = [n for n in names if n not in present]
            if missing:
                raise _msg(p, f"calibration directory has subdirectories for {', '.join(map(repr, present))} "
                              f"but none for input(s) {', '.join(map(repr, missing))}")
            return _calibration(p, inputs, raw_dtype, raw_shape)
        files = [(f, _family(f)) for f in _list_files(p)]
        files = [(f, fam) for f, fam in files if fam is not None]
        if not files:
            hint = " (for a Horizon working directory, pass its calibration_data/)" \
                if (p / "calibration_data").is_dir() else ""
            raise _msg(p, "no .npy, .npz, .bin/.rgb/.raw or .png/.jpg/.jpeg/.bmp files in directory" + hint)
        families = sorted({fam for _, fam in files})
        if len(families) > 1:
            names = {"npy": ".npy/.npz", "raw": "raw (.bin/.rgb/.raw)", "images": "image"}
            raise _msg(p, f"directory mixes {' and '.join(names[f] for f in families)} files; "
                          "keep one kind per directory")
        fam = families[0]
        chunks = [_file_chunk(f, fam, inputs, raw_dtype, raw_shape) for f, _ in files]
        kind = {"npy": "dir", "raw": "raw", "images": "images"}[fam]
        return DataSource(kind, p, "pixels" if fam == "images" else "tensor", inputs, chunks, [f for f, _ in files])
    if not p.is_file():
        raise _msg(p, "not a regular file or directory")
    fam = _family(p)
    if fam is None:
        raise _msg(p, f"unsupported file type {p.suffix or '(no suffix)'!r} "
                      "(expected .npy, .npz, .bin/.rgb/.raw or .png/.jpg/.jpeg/.bmp)")
    chunk = _file_chunk(p, fam, inputs, raw_dtype, raw_shape)
    kind = p.suffix.lower()[1:] if fam == "npy" else fam
    return DataSource(kind, p, "pixels" if fam == "images" else "tensor", inputs, [chunk], [p])


# --------------------------------------------------------------------------------------------------
# Random data


class _RandomChunk:
    def __init__(self, plans: list[tuple[str, np.dtype, tuple[int, ...], Any, Any]], n: int, seed: int):
        self.plans, self.count, self.seed = plans, n, seed

    def samples(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(self.count):
            rng = np.random.default_rng((self.seed, i))  # sample i does not depend on n
            out = {}
            for name, dt, shape, lo, hi in self.plans:
                k = _kind(dt)
                if k == "f":
                    a = (lo + (hi - lo) * rng.random(shape)).astype(dt)
                    wide = a.astype(np.float64)
                    bad = (wide >= hi) | (wide < lo)  # rounding to a narrow dtype can reach `high`
                    if bad.any():
                        a[bad] = np.asarray((lo + hi) / 2).astype(dt)
                elif k == "b":
                    a = rng.integers(0, 2, size=shape).astype(bool)
                else:
                    a = rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64 if dt.kind == "V" else dt)
                    a = a.astype(dt)
                out[name] = a
            yield out


def random_source(inputs: list[InputSpec], n: int, seed: int = 0, low: float | None = None,
                  high: float | None = None, dims: dict[str, int] | None = None) -> DataSource:
    """``n`` random samples for the inputs, deterministic for a seed (kind ``"random"``, domain ``"tensor"``).

    Sample ``i`` depends only on ``(seed, i)``: the first samples of ``n=10`` equal those of ``n=3``.

    Parameters
    ----------
    inputs : list of InputSpec
    n : int
        Number of samples (>= 1).
    seed : int
        Seed (>= 0).
    low, high : float, optional
        Value range ``[low, high)``. Float inputs: uniform, default ``[-1, 1)``. Integer inputs:
        uniform integers ``>= low`` and ``< high`` clipped to the dtype range; default the whole
        dtype range (``[0, 256)`` for uint8). Bool inputs: uniform ``False``/``True``.
    dims : dict of str to int, optional
        Values of symbolic dims by symbol name. A symbolic (or ``None``/non-positive) first dim
        without a value is the batch and becomes 1.

    Returns
    -------
    DataSource
        Arrays of the inputs' dtypes and shapes.

    Raises
    ------
    DataError
        ``n`` or ``seed`` invalid, ``low >= high``, an empty integer range, an input of unknown rank,
        a non-batch symbolic dim without a value in ``dims``, or a dtype random data cannot be made for
        (complex, string).
    """
    label = "--random"
    inputs = _check_specs(inputs, label)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise _msg(label, f"n must be a positive int, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise _msg(label, f"seed must be a non-negative int, got {seed!r}")
    if low is not None and high is not None and not low < high:
        raise _msg(label, f"low ({low}) must be below high ({high})")
    dims = dict(dims or {})
    plans = []
    for spec in inputs:
        dt = np.dtype(spec.dtype)
        where = f"{label}: input {spec.name!r}"
        if spec.shape is None:
            raise _msg(where, "unknown rank, cannot make random data")
        shape = []
        for i, d in enumerate(spec.shape):
            if _static(d):
                shape.append(int(d))
            elif isinstance(d, str) and d in dims:
                v = dims[d]
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                    raise _msg(where, f"dims[{d!r}] must be a positive int, got {v!r}")
                shape.append(int(v))
            elif i == 0:
                shape.append(1)
            else:
                raise _msg(where, f"symbolic dim {i} ({d!r}) of shape {_fmt_shape(spec.shape)} needs a value: "
                                  f"give the input's shape (command line: --input-shape {spec.name}=1x3x...)")
        k = _kind(dt)
        if k == "f":
            lo = -1.0 if low is None else float(low)
            hi = 1.0 if high is None else float(high)
            if not lo < hi:
                raise _msg(where, f"empty range [{lo}, {hi})")
        elif k in "iu":
            try:
                info = np.iinfo(dt)
            except ValueError:
                import ml_dtypes  # extension ints are registered by ml_dtypes
                info = ml_dtypes.iinfo(dt)
            lo = int(info.min) if low is None else max(math.ceil(low), int(info.min))
            hi = int(info.max) if high is None else min(math.ceil(high) - 1, int(info.max))
            if lo > hi:
                raise _msg(where, f"no {dt.name} value in [{low}, {high})")
        elif k == "b":
            lo = hi = None
        else:
            raise _msg(where, f"cannot make random data of dtype {dt.name}")
        plans.append((spec.name, dt, tuple(shape), lo, hi))
    return DataSource("random", None, "tensor", inputs, [_RandomChunk(plans, int(n), int(seed))])


# --------------------------------------------------------------------------------------------------
# From a stage


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
        An input without an element type, or of a type numpy cannot represent.
    """
    import onnx

    out = []
    for name in stage.inputs:
        t = stage.tensors[name]
        if not t.dtype:
            raise _msg(stage.path, f"input {name!r} has no element type")
        try:
            dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(onnx.TensorProto.DataType.Value(t.dtype)))
        except (ValueError, KeyError, TypeError):
            raise _msg(stage.path, f"input {name!r} has element type {t.dtype}, which numpy cannot represent") \
                from None
        out.append(InputSpec(name, dt.name, t.shape))
    return out
