"""Where an array's bytes are in a file: .npy headers (numpy's own readers), .npz members, raw files. No data read."""

from __future__ import annotations

import inspect
import math
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from ..errors import DataError
from .spec import PICKLE, data_error, file_error, fmt_shape, one_line, os_error

__all__ = ["ArrayRef", "check_npy", "npy_header", "npy_ref", "npz_refs", "raw_ref", "read_npy_header"]

_MAX_HEADER = 10000  # numpy's own default limit for .npy headers
_MAGIC = b"\x93NUMPY"

#: numpy >= 1.24 bounds the header it parses (``max_header_size``); numpy 1.23, the Horizon toolchain's pin, has no
#: such argument and reads headers up to its own limit with ``ast.literal_eval`` (never unpickling) either way.
_HEADER_LIMIT = ({"max_header_size": _MAX_HEADER}
                 if "max_header_size" in inspect.signature(np.lib.format.read_array_header_1_0).parameters else {})
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


@dataclass
class ArrayRef:
    """Where an array's bytes are: a file (``member=None``) or a .npz member, from byte ``offset``.

    Attributes
    ----------
    path : pathlib.Path
        The file (.npy, .npz or raw).
    member : str or None
        The .npz member name (``"<key>.npy"``), None for a file of its own.
    label : str
        How errors name it (the path, and the key of a .npz member).
    dtype : numpy.dtype
        As stored (any byte order).
    shape : tuple of int
        As stored.
    fortran : bool
        Column-major data.
    offset : int
        Byte offset of the data in the file or member.
    npy : bool
        The bytes follow a .npy header (re-checked when read); False for raw files.
    """

    path: Path
    member: str | None
    label: str
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    offset: int
    npy: bool


def _bad_magic(fh: IO[bytes], label: str) -> DataError:
    """The DataError for a file whose first 8 bytes are not a .npy magic string (read again to say why)."""
    try:
        fh.seek(0)
        head = fh.read(8)
    except (OSError, ValueError):
        head = b""
    if head[:1] == b"\x80":
        return file_error(label, PICKLE)
    if len(head) < 8 and _MAGIC.startswith(head[:6]):
        return file_error(label, "truncated .npy (no complete header)")
    return file_error(label, "not a .npy array (bad magic)")


def read_npy_header(fh: IO[bytes], label: str) -> tuple[np.dtype, tuple[int, ...], bool]:
    """Read a .npy header from ``fh`` (at its start) with :mod:`numpy.lib.format`: ``(dtype, shape, fortran_order)``.

    Leaves ``fh`` at the first data byte. Never unpickles.

    Parameters
    ----------
    fh : binary file object
        Seekable (a file, or a member of a .npz opened with :mod:`zipfile`).
    label : str
        How errors name the file.

    Raises
    ------
    DataError
        One line naming ``label``: pickled data or an object dtype, bad magic, a truncated or corrupt header,
        a format version other than 1.0 and 2.0.
    """
    try:
        version = np.lib.format.read_magic(fh)
    except ValueError:
        raise _bad_magic(fh, label) from None
    reader = _HEADER_READERS.get(version)
    if reader is None:
        raise file_error(label, f"unsupported .npy format version {version[0]}.{version[1]}")
    try:
        shape, fortran, dtype = reader(fh, **_HEADER_LIMIT)
    except (ValueError, SyntaxError, TypeError, struct.error) as e:
        if "EOF" in str(e):
            raise file_error(label, "truncated .npy (incomplete header)") from None
        raise file_error(label, f"corrupt .npy header ({one_line(e)})") from None
    if dtype.hasobject:
        raise file_error(label, PICKLE)
    return dtype, tuple(int(d) for d in shape), bool(fortran)


def check_npy(fh: IO[bytes], label: str, size: int) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """:func:`read_npy_header`, plus the data offset, and DataError when ``size`` bytes cannot hold the data."""
    dtype, shape, fortran = read_npy_header(fh, label)
    offset = fh.tell()
    need = offset + math.prod(shape) * dtype.itemsize
    if size < need:
        raise file_error(label, f"truncated .npy: {size} bytes, {fmt_shape(shape)} {dtype.name} needs {need}")
    return dtype, shape, fortran, offset


def npy_header(path: str | os.PathLike) -> tuple[np.dtype, tuple[int, ...]]:
    """dtype and shape of a .npy file, from its header alone (no data read, never unpickles).

    Raises
    ------
    DataError
        As :func:`read_npy_header`, or the file cannot be read.
    """
    label = str(path)
    try:
        with open(path, "rb") as fh:
            dtype, shape, _fortran = read_npy_header(fh, label)
    except OSError as e:
        raise os_error(label, e) from None
    return dtype, shape


def npy_ref(path: Path) -> ArrayRef:
    """The array of a .npy file (header and byte size checked; DataError naming the file)."""
    label = str(path)
    try:
        with open(path, "rb") as fh:
            dtype, shape, fortran, offset = check_npy(fh, label, os.fstat(fh.fileno()).st_size)
    except OSError as e:
        raise os_error(label, e) from None
    return ArrayRef(path, None, label, dtype, shape, fortran, offset, True)


def npz_refs(path: Path) -> dict[str, ArrayRef]:
    """Header of every ``<key>.npy`` member of a .npz, keyed by ``<key>``. Each member is read through once (in
    1 MiB blocks, nothing kept) so that zip's CRC-32 and zlib's stream checks find a member corrupted mid-file
    here, as a :class:`~graphaudit.errors.DataFileError` the caller can leave out, not in the middle of a run."""
    out: dict[str, ArrayRef] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.is_dir() or not info.filename.endswith(".npy"):
                    continue
                key = info.filename[:-4]
                label = f"{path} (key {key!r})"
                with zf.open(info) as fh:
                    dtype, shape, fortran, offset = check_npy(fh, label, info.file_size)
                    while fh.read(1 << 20):  # the CRC-32 is checked when the member's end is reached
                        pass
                out[key] = ArrayRef(path, info.filename, label, dtype, shape, fortran, offset, True)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as e:
        raise file_error(path, f"corrupt or truncated .npz ({one_line(e)})") from None
    except OSError as e:
        raise os_error(str(path), e) from None
    return out


def raw_ref(path: Path, raw_dtype: str | None, raw_shape: tuple | None) -> ArrayRef:
    """A raw file of ``raw_shape`` x ``raw_dtype`` (C order, native byte order); its byte size must match."""
    label = str(path)
    if raw_dtype is None or raw_shape is None:
        raise data_error(label, "raw file: give --raw-dtype and --raw-shape to read it")
    try:
        dtype = np.dtype(raw_dtype)
    except TypeError:
        raise data_error(label, f"raw_dtype {raw_dtype!r} is not a numpy dtype") from None
    if dtype.hasobject or dtype.itemsize == 0:
        raise data_error(label, f"raw_dtype {raw_dtype!r} cannot describe raw bytes")
    try:
        shape = tuple(int(d) for d in raw_shape)
    except (TypeError, ValueError):
        raise data_error(label, f"raw_shape {raw_shape!r} must be a tuple of positive ints") from None
    if not shape or any(d <= 0 for d in shape) or any(isinstance(d, bool) for d in raw_shape):
        raise data_error(label, f"raw_shape {raw_shape!r} must be a tuple of positive ints")
    try:
        size = path.stat().st_size
    except OSError as e:
        raise os_error(label, e) from None
    need = math.prod(shape) * dtype.itemsize
    if size != need:
        raise file_error(label, f"{size} bytes, but raw_shape {fmt_shape(shape)} x {dtype.name} is {need} bytes")
    return ArrayRef(path, None, label, dtype, shape, False, 0, False)
