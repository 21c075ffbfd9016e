"""Read an hb_mapper 1.x calibration folder of raw files (``cal_data_dir``) as pixels.

hb_mapper 1.x calibrates on a folder of raw files, one per sample, each holding the bytes of one input of
``input_shape`` in the config's ``input_layout_train`` and ``input_type_train`` colour order, of dtype
``cal_data_type`` (uint8 or float32), before any normalization: the model's HzPreprocess subtracts 128 and
applies mean/scale itself (docs/INPUT_CONTRACTS.md section 3; the samples ``samples/build_horizon_sets.py``
writes are such files: ``calibration_data_bgr/00.bgr``). The files' names carry the colour order by
convention (``.rgb``, ``.bgr``, ``.gray``, or the run-time type: ``.nv12``, ``.yuv444``), but hb_mapper reads every
file in the folder, whatever its name, with ``np.fromfile(dtype).reshape(input_shape)`` and converts it to the
run-time type itself (``horizon_tc_ui/data/loader.py`` ``RawImagesDirLoader``, ``helper.get_raw_transformer``):
with a config, so does graphaudit (any file that is not .npy/.npz or an image).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from ..errors import DataError, DataUnreadableError
from .source import IMAGE_EXTS, NPY_EXTS, RAW_EXTS, DataSource, none_readable, open_data
from .spec import InputSpec, list_entries, list_files, os_error

__all__ = ["RAW_PIXEL_SUFFIXES", "is_raw_pixel_dir", "is_raw_file", "open_raw_pixels", "open_stage_data",
           "config_data_dir"]

#: Suffixes of raw pixel files hb_mapper's samples and users write (colour order or the run-time type by name;
#: the config decides how the bytes are read).
RAW_PIXEL_SUFFIXES = (".rgb", ".bgr", ".gray", ".rgbchw", ".bgrchw", ".rgbp", ".bgrp", ".bin", ".raw",
                      ".yuv444", ".yuv444_128", ".yuv", ".nv12", ".y")
#: Colour spaces the raw bytes cannot be read as pixels without a colour conversion graphaudit does not do.
_UNREAD = {"yuv444": "YUV444", "nv12": "NV12", "yuv444_128": "YUV444", "featuremap": "feature map"}


def is_raw_file(path: Path) -> bool:
    """True for a file hb_mapper would read as raw bytes: any name but .npy/.npz and images."""
    return path.suffix.lower() not in NPY_EXTS + IMAGE_EXTS


def is_raw_pixel_dir(path: str | os.PathLike, any_name: bool = False) -> bool:
    """True for a directory whose files all carry a raw pixel suffix (and at least one does); with
    ``any_name``, whose files are all :func:`is_raw_file` (hb_mapper's reading, given a config)."""
    p = Path(path)
    if not p.is_dir():
        return False
    try:
        files = list_files(p)
    except DataError:
        return False
    ok = is_raw_file if any_name else (lambda f: f.suffix.lower() in RAW_PIXEL_SUFFIXES)
    return bool(files) and all(ok(f) for f in files)


class _PixelChunk:
    """One raw file: ``[1,H,W,C]`` pixels in RGB order (float32 data keep their values)."""

    count = 1

    def __init__(self, path: Path, name: str, dtype: np.dtype, shape: tuple, layout: str, color: str):
        self.path, self.name, self.dtype, self.shape, self.layout, self.color = path, name, dtype, shape, layout, color

    def samples(self):
        x = np.fromfile(self.path, dtype=self.dtype).reshape(self.shape)
        if self.layout == "NCHW":
            x = np.transpose(x, (0, 2, 3, 1))
        if self.color == "bgr":
            x = x[..., ::-1]
        yield {self.name: np.ascontiguousarray(x)}


def open_raw_pixels(path: str | os.PathLike, spec: InputSpec, shape: tuple | None, dtype: str | None,
                    layout: str | None, color: str | None) -> DataSource:
    """Open a folder of raw pixel files (or one file) for streaming, domain ``"pixels"`` (RGB, NHWC).

    Parameters
    ----------
    path : path-like
        The ``cal_data_dir`` (every regular, non-hidden file, naturally sorted; entries with a raw pixel suffix that
        cannot be opened, such as a FIFO or a dangling symbolic link, are left out as unreadable) or one raw file.
    spec : InputSpec
        The model input the pixels feed.
    shape : tuple of int
        ``input_shape`` of the config (rank 4, batch 1), in ``layout``.
    dtype : str
        ``cal_data_type``: ``"uint8"`` or ``"float32"`` (default uint8, as hb_mapper 1.x).
    layout : {"NCHW", "NHWC"}
        ``input_layout_train``.
    color : str
        ``input_type_train`` (``rgb``, ``bgr``, ``gray``; ``yuv444``/``nv12`` refused).

    Raises
    ------
    DataUnreadableError
        No file whose size is ``prod(shape) * itemsize`` (one line naming the first); files of another size among
        others are left out (:attr:`DataSource.unreadable`).
    DataError
        No files, a shape that is not rank 4 with one colour axis, or a colour space that cannot be read as
        pixels.
    """
    p = Path(path)
    color = (color or "").lower()
    if color in _UNREAD:
        raise DataError(f"{p}: input_type_train {color!r}: {_UNREAD[color]} bytes are not read as pixels by graphaudit")
    lay = (layout or "NCHW").upper()
    if shape is None or len(shape) != 4 or shape[0] != 1 or lay not in ("NCHW", "NHWC"):
        raise DataError(f"{p}: raw pixel files need a config input_shape of rank 4 with batch 1 and a layout "
                        f"(got input_shape {shape}, layout {layout})")
    channels = shape[1] if lay == "NCHW" else shape[3]
    if channels not in (1, 3):
        raise DataError(f"{p}: input_shape {shape} in {lay} has {channels} channels; pixels have 1 or 3")
    try:
        dt = np.dtype(dtype or "uint8")
    except TypeError:
        raise DataError(f"{p}: cal_data_type {dtype!r} is not a numpy dtype") from None
    if p.is_dir():  # and entries named as raw pixel files that cannot be opened (FIFO, dangling link...): said
        files = [(f, why) for f, why in list_entries(p) if why is None or f.suffix.lower() in RAW_PIXEL_SUFFIXES]
    else:
        files = [(p, None)]
    if not files:
        raise DataError(f"{p}: no calibration files in directory")
    need = math.prod(shape) * dt.itemsize
    kept, unreadable = [], []
    for f, why in files:
        if why is not None:  # never opened
            unreadable.append((f, why))
            continue
        try:
            size = f.stat().st_size
        except OSError as e:
            unreadable.append((f, str(os_error(str(f), e))))
            continue
        if size != need:  # this file is left out, the others are read
            unreadable.append((f, f"{f}: {size} bytes, but input_shape {'x'.join(map(str, shape))} of {dt.name} "
                                  f"needs {need}"))
            continue
        kept.append(f)
    if not kept:
        if not p.is_dir():
            raise DataUnreadableError(unreadable[0][1], unreadable)
        raise none_readable(p, unreadable)
    chunks = [_PixelChunk(f, spec.name, dt, tuple(shape), lay, color) for f in kept]
    return DataSource("raw", p, "pixels", [spec], chunks, kept, unreadable)


def _config_input(config, spec: InputSpec):
    inputs = list(getattr(config, "inputs", None) or [])
    by_name = [ci for ci in inputs if ci.name == spec.name]
    if by_name:
        return by_name[0]
    return inputs[0] if len(inputs) == 1 else None


def config_data_dir(config) -> Path | None:
    """The ``cal_data_dir`` of a one-input config, resolved against the config file's directory (as hb_mapper
    resolves it, docs/INPUT_CONTRACTS.md section 3), or None when the config names none or it does not exist."""
    inputs = list(getattr(config, "inputs", None) or [])
    if len(inputs) != 1 or not inputs[0].cal_data_dir:
        return None
    d = Path(inputs[0].cal_data_dir)
    if not d.is_absolute():
        d = Path(getattr(config, "path", ".")).resolve().parent / d
    return d if d.is_dir() else None


def open_stage_data(path: str | os.PathLike, specs: list[InputSpec], raw_dtype: str | None = None,
                    raw_shape: tuple | None = None, config=None) -> DataSource:
    """Open user data for the stages: an hb_mapper raw pixel folder when the conversion config describes one
    (a single input, files with raw pixel suffixes, no explicit ``raw_dtype``/``raw_shape``), read with the
    config's ``input_shape``, ``cal_data_type``, ``input_layout_train`` and ``input_type_train``
    (:func:`open_raw_pixels`); anything else through :func:`graphaudit.data.source.open_data`.

    Raises
    ------
    DataError
    """
    ci = _config_input(config, specs[0]) if config is not None and len(specs) == 1 else None
    if ci is not None and raw_dtype is None and raw_shape is None and is_raw_pixel_dir(path, True) and ci.shape:
        dtype = ci.cal_data_type or ("float32" if str(ci.cal_data_dir or "").rstrip("/").endswith("_f32")
                                     else "uint8")
        return open_raw_pixels(path, specs[0], tuple(ci.shape), dtype, ci.layout_train, ci.type_train)
    if ci is None and raw_dtype is None and raw_shape is None and is_raw_pixel_dir(path):
        sufs = sorted({p.suffix.lower() for p in list_files(Path(path))})
        alt = ", or --raw-dtype and --raw-shape" if all(x in RAW_EXTS for x in sufs) else ""
        raise DataError(f"{path}: raw pixel files ({', '.join(sufs)}), as hb_mapper's cal_data_dir holds them: give "
                        "--config with the conversion YAML (its input_shape, cal_data_type, layout and colour order "
                        f"say how to read them){alt}")
    return open_data(path, specs, raw_dtype=raw_dtype, raw_shape=raw_shape)
