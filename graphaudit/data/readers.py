"""Samples read from array files one at a time: .npy and raw files with numpy (memory-mapped stacks), .npz streamed."""

from __future__ import annotations

import contextlib
import math
import os
import zipfile
import zlib
from pathlib import Path
from typing import IO, Iterator

import numpy as np

from .arrays import ArrayRef, check_npy, npy_ref
from ..errors import DataError
from .spec import InputSpec, check_dtype, check_sample_size, data_error, one_line, os_error, split_samples

__all__ = ["FileChunk", "array_chunk"]

_CHANGED = "changed on disk since the data source was opened"


#: Files holding several samples are memory-mapped (np.load(mmap_mode="r")) and each sample is copied out of the map:
#: only the sample being yielded is in memory, and a column-major stack needs no whole read. A file holding one sample
#: is read whole with np.load / np.fromfile: mapping small files costs more than reading them (measured, warm page
#: cache, 2 busy cores: 2,000 files of [1,3,32,32] float32 1.05-1.22 s mapped and copied against 0.46-0.54 s read;
#: 500 files of [1,3,224,224] 0.41-0.44 s against 0.36-0.55 s; one [200,1,3,224,224] stack 0.055 s mapped).
_MAP_FROM_SAMPLES = 2


def _own(x: np.ndarray, copy: bool) -> np.ndarray:
    """``x`` as a C-ordered array in native byte order; ``copy`` when ``x`` views a memory map (never yield that)."""
    out = np.array(x, order="C") if copy else np.ascontiguousarray(x)
    return out if out.dtype.isnative else out.astype(out.dtype.newbyteorder("="))


def _read_exact(fh: IO[bytes], dtype: np.dtype, shape: tuple[int, ...], label: str) -> np.ndarray:
    """Read one C-ordered block of ``shape`` x ``dtype`` from ``fh`` into a fresh native-order array."""
    arr = np.empty(shape, dtype)
    buf = memoryview(arr.reshape(-1).view(np.uint8))
    got = 0
    while got < len(buf):
        k = fh.readinto(buf[got:])
        if not k:
            raise data_error(label, f"truncated: data ends after {got} of {len(buf)} bytes of a sample")
        got += k
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def _load_npy(ref: ArrayRef, mapped: bool) -> np.ndarray:
    """The array of a .npy file with ``np.load`` (memory-mapped when ``mapped``); DataError when the file no longer
    holds what its header said when the source was opened."""
    try:
        arr = np.load(ref.path, mmap_mode="r" if mapped else None, allow_pickle=False)
    except ValueError as e:  # now pickled, corrupt or truncated: the header check says which
        npy_ref(ref.path)
        raise data_error(ref.label, f"{_CHANGED} ({one_line(e)})") from None
    if not isinstance(arr, np.ndarray):  # now a .npz (np.load returns an NpzFile)
        arr.close()
        raise data_error(ref.label, _CHANGED)
    if mapped and arr.offset != ref.offset:
        raise data_error(ref.label, _CHANGED)
    same_layout = arr.flags.f_contiguous if ref.fortran else arr.flags.c_contiguous
    if (arr.dtype, arr.shape, same_layout) != (ref.dtype, ref.shape, True):
        raise data_error(ref.label, _CHANGED)
    return arr


def _load_raw(ref: ArrayRef, mapped: bool) -> np.ndarray:
    """The array of a raw file (memory-mapped when ``mapped``); DataError when its byte size changed since the source
    was opened."""
    if os.stat(ref.path).st_size != math.prod(ref.shape) * ref.dtype.itemsize:
        raise data_error(ref.label, _CHANGED)
    if mapped:
        return np.memmap(ref.path, dtype=ref.dtype, mode="r", shape=ref.shape)
    return np.fromfile(ref.path, dtype=ref.dtype).reshape(ref.shape)


class _Reader:
    """Sequential reader of the samples of one array.

    A file of its own (.npy, raw) is loaded with numpy, memory-mapped when it holds several samples. A .npz member
    cannot be mapped (it may be compressed): its samples are read in turn from the member's stream, or the whole
    array at once when it is column-major (its samples are not contiguous).
    """

    def __init__(self, ref: ArrayRef, sample_shape: tuple[int, ...], count: int, stack: contextlib.ExitStack,
                 zips: dict[Path, zipfile.ZipFile]):
        self.ref, self.sample_shape, self.count, self.i = ref, sample_shape, count, 0
        self.whole: np.ndarray | None = None
        self.fh: IO[bytes] | None = None
        self.mapped = ref.member is None and count >= _MAP_FROM_SAMPLES
        if ref.member is None:
            self.whole = (_load_npy if ref.npy else _load_raw)(ref, self.mapped)
            return
        if ref.path not in zips:
            zips[ref.path] = stack.enter_context(zipfile.ZipFile(ref.path))
        info = zips[ref.path].getinfo(ref.member)
        self.fh = stack.enter_context(zips[ref.path].open(info))
        if check_npy(self.fh, ref.label, info.file_size) != (ref.dtype, ref.shape, ref.fortran, ref.offset):
            raise data_error(ref.label, _CHANGED)
        if ref.fortran:  # column-major: samples are not contiguous, read the array once
            self.whole = _read_exact(self.fh, ref.dtype, ref.shape[::-1], ref.label).T

    def next(self) -> np.ndarray:
        """The next sample (an array of its own, native byte order, C order)."""
        i, self.i = self.i, self.i + 1
        if self.whole is None:
            return _read_exact(self.fh, self.ref.dtype, self.sample_shape, self.ref.label)
        if len(self.sample_shape) < len(self.ref.shape):  # a stack along axis 0
            return _own(self.whole[i], self.mapped)
        if self.count == 1:  # one sample: the whole array
            return _own(self.whole, self.mapped)
        b = self.sample_shape[0]  # batch-split
        return _own(self.whole[i * b:(i + 1) * b], self.mapped)


class FileChunk:
    """Samples read from files: one entry per input, all holding ``count`` samples.

    Attributes
    ----------
    entries : dict of str to (ArrayRef, tuple of int)
        Per input name, its array and the shape of one sample.
    count : int
        Number of samples.
    """

    def __init__(self, entries: dict[str, tuple[ArrayRef, tuple[int, ...]]], count: int):
        self.entries, self.count = entries, count

    def samples(self) -> Iterator[dict[str, np.ndarray]]:
        """Yield the samples in order, input name -> array (DataError naming the file on read errors)."""
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
                raise os_error(label, e) from None
            except (zipfile.BadZipFile, zlib.error, EOFError, KeyError) as e:
                raise data_error(label, f"corrupt or truncated .npz ({one_line(e)})") from None


def array_chunk(refs: dict[str, ArrayRef], inputs: list[InputSpec], label: str) -> FileChunk:
    """Check arrays against the inputs (dtype kind, shape) and pair them into one chunk.

    Raises
    ------
    DataFileError
        A dtype kind that cannot feed its input, an array without elements (no samples), or samples of more than
        :data:`graphaudit.data.spec.MAX_STATS_ELEMENTS` elements (from the header: no data read), naming the file.
    DataError
        A shape that does not fit its input, or inputs with different sample counts (naming ``label``).
    """
    entries: dict[str, tuple[ArrayRef, tuple[int, ...]]] = {}
    count = None
    first = None
    for spec in inputs:
        ref = refs[spec.name]
        check_dtype(spec, ref.dtype, ref.label)
        # the per-sample cap holds for samples fed to a model input (its rank known); an input of unknown rank is
        # the lint's view of a calibration folder, whose value ranges are read in blocks, whatever the file's size
        capped = spec.shape is not None
        try:
            n, sample_shape = split_samples(spec, ref.shape, ref.label, ref.path)
        except DataError:  # read as it is when the shapes do not fit (the input checks say why): one sample
            if capped:
                check_sample_size(ref.label, ref.shape, spec.name, ref.path)
            raise
        if capped:
            check_sample_size(ref.label, sample_shape, spec.name, ref.path)
        if count is None:
            count, first = n, spec.name
        elif n != count:
            raise data_error(label, f"input {spec.name!r} has {n} samples but input {first!r} has {count}")
        entries[spec.name] = (ref, sample_shape)
    return FileChunk(entries, count or 0)
