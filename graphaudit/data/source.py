"""Open model input data for streaming: .npy/.npz files, Horizon calibration_data, raw files, images."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..errors import DataFileError, DataUnreadableError
from .arrays import npy_ref, npz_refs, raw_ref
from .images import ImageChunk, check_image
from .readers import array_chunk
from .spec import InputSpec, check_specs, data_error, list_entries

__all__ = ["DataSource", "open_data", "NPY_EXTS", "RAW_EXTS", "IMAGE_EXTS"]

#: File name suffixes (lower case) recognised for each source family.
NPY_EXTS = (".npy", ".npz")
RAW_EXTS = (".bin", ".rgb", ".raw")
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp")


class DataSource:
    """An iterable of samples for a model, read lazily.

    Iterating yields one ``dict[str, numpy.ndarray]`` per sample: input name -> array with its
    batch dim (e.g. ``[1,3,224,224]``). Arrays keep the dtype they were stored with (native byte
    order); conversion to the model's dtype, layout and normalization is the caller's job. Only
    the sample being yielded is held in memory: .npy and raw files holding several samples are
    memory-mapped and each sample copied out, .npz members are streamed (exception: a
    Fortran-ordered .npz member is read whole).
    The source can be iterated several times.

    Parameters
    ----------
    kind, path, domain, inputs, files
        As the attributes.
    chunks : list
        Where the samples come from, in order: objects with ``count`` (number of samples) and
        ``samples()`` (a generator of sample dicts).

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
        The data files read, in iteration order (empty for random data).
    paired_inputs : list of str
        The inputs of a Horizon calibration directory of several inputs (``<input>/N.npy``), whose files pair up
        into one sample: a file left out leaves out that sample for every one of them. Empty otherwise.
    unreadable : list of (pathlib.Path, str)
        Files of a directory left out because they cannot be opened (a directory, FIFO, device, dangling symbolic
        link or link loop named as a data file: never opened) or their content cannot be read (truncated, corrupt,
        pickled, undecodable, the wrong byte size: :class:`graphaudit.errors.DataFileError`), with the one-line reason
        naming the file; their samples are not among the samples. Empty for a file given alone (it is the
        :class:`graphaudit.errors.DataUnreadableError` instead).
    """

    def __init__(self, kind: str, path: Path | None, domain: str, inputs: list[InputSpec],
                 chunks: list[Any], files: list[Path] | None = None,
                 unreadable: list[tuple[Path, str]] | None = None):
        self.kind, self.path, self.domain, self.inputs = kind, path, domain, inputs
        self.files = files or []
        self.unreadable = unreadable or []
        self.paired_inputs: list[str] = []
        self._chunks = chunks
        self._len = sum(c.count for c in chunks)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for chunk in self._chunks:
            yield from chunk.samples()

    def window(self, start: int, stop: int) -> Iterator[dict[str, np.ndarray]]:
        """Samples ``start .. stop - 1`` (0-based, in iteration order), as iterating would yield them; the chunks
        before ``start`` are not read (within a chunk, the samples before ``start`` are read and dropped)."""
        first = 0
        for chunk in self._chunks:
            end = first + chunk.count
            if end > start and first < stop:
                yield from itertools.islice(chunk.samples(), max(0, start - first), min(chunk.count, stop - first))
            first = end
            if first >= stop:
                return

    def __repr__(self) -> str:
        return (f"DataSource(kind={self.kind!r}, path={str(self.path) if self.path else None!r}, "
                f"domain={self.domain!r}, samples={self._len})")


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
        raise data_error(label, f"{what} feeds one input, but the model has {len(inputs)} inputs ({names}): "
                                "use .npz files keyed by input name or a calibration_data/<input>/ directory")
    return inputs[0]


#: Keys of an .npz named in the one-line error when none names the input (an archive may hold thousands).
SHOWN_KEYS = 5


def _some_keys(keys: list[str]) -> str:
    """The first :data:`SHOWN_KEYS` keys (each cut to 60 characters), then "... and N more"; "none" for none."""
    shown = ", ".join(repr(k if len(k) <= 60 else k[:57] + "...") for k in keys[:SHOWN_KEYS]) or "none"
    return shown + (f", ... and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else "")


def _file_chunk(p: Path, family: str, inputs: list[InputSpec], raw_dtype: str | None,
                raw_shape: tuple | None) -> Any:
    """The chunk of one data file (headers checked, no array data read)."""
    if family == "images":
        spec = _single_input(inputs, p, "an image")
        check_image(p)
        return ImageChunk(p, spec.name)
    if p.suffix.lower() == ".npz":
        refs = npz_refs(p)
        for spec in inputs:
            if spec.name not in refs:
                raise data_error(p, f"no array for input {spec.name!r} (keys: {_some_keys(list(refs))})")
        return array_chunk(refs, inputs, str(p))
    if family == "raw":
        spec = _single_input(inputs, p, "a raw file")
        return array_chunk({spec.name: raw_ref(p, raw_dtype, raw_shape)}, inputs, str(p))
    spec = _single_input(inputs, p, "a .npy file")
    return array_chunk({spec.name: npy_ref(p)}, inputs, str(p))


def _is_component(name: str) -> bool:
    """``name`` can be one directory entry: not empty, no separator or NUL, at most 255 bytes (NAME_MAX)."""
    return (bool(name) and name not in (".", "..") and "/" not in name and os.sep not in name and "\0" not in name
            and len(name.encode("utf-8", "surrogateescape")) <= 255)


def _calibration(d: Path, inputs: list[InputSpec], raw_dtype: str | None, raw_shape: tuple | None) -> DataSource:
    """``d/<input name>/*.npy`` (or raw files), paired across inputs by naturally sorted position."""
    per_input: dict[str, list[Path]] = {}
    problems: dict[Path, str] = {}  # entries that cannot be opened (a directory, FIFO, dangling link...): left out
    for spec in inputs:
        sub = d / spec.name
        entries = [(p, why) for p, why in list_entries(sub)
                   if p.suffix.lower() == ".npy" or p.suffix.lower() in RAW_EXTS]
        problems.update((p, why) for p, why in entries if why is not None)
        files = [p for p, _why in entries]
        if not files:
            raise data_error(sub, f"calibration directory of input {spec.name!r} has no .npy or raw files")
        per_input[spec.name] = files
    counts = {name: len(files) for name, files in per_input.items()}
    if len(set(counts.values())) > 1:
        desc = ", ".join(f"{name}/ {n}" for name, n in counts.items())
        raise data_error(d, f"calibration subdirectories hold different file counts ({desc})")
    chunks, kept, unreadable = [], [], []
    for i in range(next(iter(counts.values()))):
        refs = {}
        if len(inputs) > 1:
            label = " + ".join(str(per_input[s.name][i]) for s in inputs)
        else:
            label = str(per_input[inputs[0].name][i])
        try:  # a sample whose file (for any input) cannot be read is left out, for every input
            for spec in inputs:
                p = per_input[spec.name][i]
                if p in problems:
                    raise DataFileError(problems[p], p)
                refs[spec.name] = npy_ref(p) if p.suffix.lower() == ".npy" else raw_ref(p, raw_dtype, raw_shape)
            chunks.append(array_chunk(refs, inputs, label))
        except DataFileError as e:
            unreadable.append((e.path if isinstance(e.path, Path) else p, str(e)))
            continue
        kept.append(i)
    paired = [s.name for s in inputs] if len(inputs) > 1 else []
    if not chunks:
        e = none_readable(d, unreadable)
        e.paired_inputs = paired
        raise e
    files = [p for i in kept for p in (per_input[s.name][i] for s in inputs)]
    src = DataSource("calibration_data", d, "tensor", inputs, chunks, files, unreadable)
    src.paired_inputs = paired
    return src


def none_readable(d: Path, unreadable: list[tuple[Path, str]]) -> DataUnreadableError:
    """The error of a directory none of whose data files could be read (naming the first and its problem)."""
    more = f" (and {len(unreadable) - 1} more)" if len(unreadable) > 1 else ""
    return DataUnreadableError(f"{d}: none of its {len(unreadable)} data file(s) could be read: {unreadable[0][1]}"
                               f"{more}", unreadable)


def open_data(path: str | os.PathLike, inputs: list[InputSpec], raw_dtype: str | None = None,
              raw_shape: tuple | None = None) -> DataSource:
    """Open model input data for streaming.

    Every file's header is checked up front (dtype kind, shape against the inputs' static dims,
    byte size, image identification; .npz members read through once for their CRC-32, PNG chunk CRCs
    checked, BMP files decoded once, so that a file corrupted mid-way is left out here); array data and
    pixels are kept only while iterating, one sample at a time (headers with :mod:`numpy.lib.format`, .npy files with ``numpy.load``,
    memory-mapped when they hold several samples).

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
        The model's inputs (see :func:`graphaudit.data.spec.input_specs`).
    raw_dtype : str, optional
        numpy dtype name of raw files.
    raw_shape : tuple of int, optional
        Shape of each raw file's content.

    Returns
    -------
    DataSource

    Raises
    ------
    DataUnreadableError
        The file given, or every data file of the directory given, cannot be read (pickled or object arrays,
        never unpickled; truncated or corrupt .npy/.npz; raw files of the wrong byte size; images Pillow
        cannot decode): one line naming the (first) file. In a directory where some files can be read, the
        others are left out and listed in :attr:`DataSource.unreadable`.
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
    inputs = check_specs(inputs, p)
    _must_exist(p)
    if p.is_dir():
        return _open_dir(p, inputs, raw_dtype, raw_shape)
    return _open_file(p, inputs, raw_dtype, raw_shape)


def _open_file(p: Path, inputs: list[InputSpec], raw_dtype: str | None, raw_shape: tuple | None) -> DataSource:
    """One data file given alone (DataUnreadableError when its content cannot be read)."""
    if not p.is_file():
        raise data_error(p, "not a regular file or directory")
    fam = _family(p)
    if fam is None:
        raise data_error(p, f"unsupported file type {p.suffix or '(no suffix)'!r} "
                            "(expected .npy, .npz, .bin/.rgb/.raw or .png/.jpg/.jpeg/.bmp)")
    try:
        chunk = _file_chunk(p, fam, inputs, raw_dtype, raw_shape)
    except DataFileError as e:
        raise DataUnreadableError(str(e), [(p, str(e))]) from None
    kind = p.suffix.lower()[1:] if fam == "npy" else fam
    return DataSource(kind, p, "pixels" if fam == "images" else "tensor", inputs, [chunk], [p])


def _must_exist(p: Path) -> None:
    """DataError naming ``p`` when it cannot be stat'ed (missing, a name too long, a loop, no permission)."""
    try:
        p.stat()
    except FileNotFoundError:
        raise data_error(p, "no such file or directory") from None
    except OSError as e:
        raise data_error(p, e.strerror or type(e).__name__) from None


def _open_dir(p: Path, inputs: list[InputSpec], raw_dtype: str | None, raw_shape: tuple | None) -> DataSource:
    """A calibration directory (a subdirectory per input) or a directory of files of one family."""
    names = [s.name for s in inputs]
    present = [n for n in names if _is_component(n) and (p / n).is_dir()]
    if present:
        missing = [n for n in names if n not in present]
        if missing:
            raise data_error(p, f"calibration directory has subdirectories for {', '.join(map(repr, present))} "
                                f"but none for input(s) {', '.join(map(repr, missing))}")
        return _calibration(p, inputs, raw_dtype, raw_shape)
    entries = [(f, _family(f), why) for f, why in list_entries(p)]
    entries = [e for e in entries if e[1] is not None]
    files = [(f, fam) for f, fam, why in entries if why is None]
    if not files and entries:  # only entries named as data that cannot be opened: said, each one (P212)
        raise none_readable(p, [(f, why) for f, _fam, why in entries])
    if not files:
        hint = " (for a Horizon working directory, pass its calibration_data/)" \
            if (p / "calibration_data").is_dir() else ""
        raise data_error(p, "no .npy, .npz, .bin/.rgb/.raw or .png/.jpg/.jpeg/.bmp files in directory" + hint)
    families = sorted({fam for _, fam in files})
    if len(families) > 1:
        kinds = {"npy": ".npy/.npz", "raw": "raw (.bin/.rgb/.raw)", "images": "image"}
        raise data_error(p, f"directory mixes {' and '.join(kinds[f] for f in families)} files; "
                            "keep one kind per directory")
    fam = families[0]
    chunks, kept, unreadable = [], [], []
    for f, _fam, why in entries:
        if why is not None:  # a directory, FIFO, device, dangling link or link loop named as data: never opened
            unreadable.append((f, why))
            continue
        try:
            chunks.append(_file_chunk(f, fam, inputs, raw_dtype, raw_shape))
        except DataFileError as e:  # this file's content: left out, the others are read
            unreadable.append((f, str(e)))
            continue
        kept.append(f)
    if not chunks:
        raise none_readable(p, unreadable)
    kind = {"npy": "dir", "raw": "raw", "images": "images"}[fam]
    return DataSource(kind, p, "pixels" if fam == "images" else "tensor", inputs, chunks, kept, unreadable)
