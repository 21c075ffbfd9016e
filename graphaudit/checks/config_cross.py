"""Cross-checks C320-C326: the config against the ONNX model, the toolchain's stage models and the calibration data.

Each rule is a function ``(AuditContext) -> Iterator[Finding]`` over ``ctx.config`` (nothing without one), listed in
:data:`graphaudit.checks.table.RULES`.
"""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path
from typing import Iterator

import numpy as np

from ..findings import Finding
from ..errors import DataError
from ..data.arrays import npy_header, npy_ref
from ..data.hbcal import is_raw_file
from ..data.source import IMAGE_EXTS, NPY_EXTS, open_data
from ..data.spec import InputSpec, natural_key
from ..toolchains.horizon import decode_hzpreprocess
from ..toolchains.valuedomain import PixelDomain, channel_ranges, judge_domain, undo_formula
from ..config.parse import ConfigInput, ConversionConfig, is_unset, split_per_input
from ..config.refs import config_path
from .base import AuditContext
from .config_common import (colour, effective_normalization, effective_shape, finding, fmt, is_image,
                            model_input, nontrivial, static_shape)
from .config_schema import each_input, n_inputs

__all__ = ["input_names", "input_layout", "input_shape", "node_names", "preprocess_mismatch", "cal_data_dtype",
           "cal_data_normalized", "cal_dirs", "cal_dir_candidates", "MAX_DTYPE_FILES", "MAX_VALUE_FILES",
           "VALUE_BLOCK", "MAX_VALUE_BLOCKS"]

#: Calibration files whose dtype is checked, and files whose values are read, per input (bounds time and memory).
MAX_DTYPE_FILES = 64
MAX_VALUE_FILES = 8
#: Elements per block, and blocks per file, read for value ranges (C326): at most 16 Mi elements of a file.
VALUE_BLOCK = 1 << 20
MAX_VALUE_BLOCKS = 16


def input_names(ctx: AuditContext) -> Iterator[Finding]:
    """C320: input_name entries that are not inputs of the ONNX model."""
    cfg, model = ctx.config, ctx.config_model
    if cfg is None or model is None:
        return
    for inp in cfg.inputs:
        if inp.name and inp.name not in model.inputs:
            close = difflib.get_close_matches(inp.name, model.inputs, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            path = ("input_parameters", "input_name", inp.index) if ("input_parameters", "input_name", inp.index) \
                in cfg.positions else ("input_parameters", "input_name")
            yield finding(cfg, "C320", path, f"input_name {inp.name!r} is not an input of {Path(model.path).name} "
                          f"(inputs: {', '.join(model.inputs)}){hint}", {"name": inp.name, "model_inputs": model.inputs})


def input_layout(ctx: AuditContext) -> Iterator[Finding]:
    """C321: input_layout_train contradicting the model input (channels of the image type sit at the other position)."""
    for cfg, model, n, inp in each_input(ctx):
        mi = model_input(model, inp, n)
        if mi is None or mi[1] is None or len(mi[1]) != 4 or not is_image(inp) or inp.layout_train not in ("NCHW", "NHWC"):
            continue
        want = 1 if inp.type_train == "gray" else 3
        shape = mi[1]
        here, there = (shape[1], shape[3]) if inp.layout_train == "NCHW" else (shape[3], shape[1])
        if isinstance(here, int) and here != want and there == want:
            other = "NHWC" if inp.layout_train == "NCHW" else "NCHW"
            yield finding(cfg, "C321", ("input_parameters", "input_layout_train"),
                          f"input {inp.index}: input_layout_train is {inp.layout_train} but model input {mi[0]!r} has "
                          f"shape {list(shape)}: {want} channel(s) at the {other} position",
                          {"input": mi[0], "model_shape": list(shape), "layout_train": inp.layout_train})


def input_shape(ctx: AuditContext) -> Iterator[Finding]:
    """C322: input_shape differing from the model input's static dims (symbolic dims are not compared)."""
    for cfg, model, n, inp in each_input(ctx):
        mi = model_input(model, inp, n)
        if inp.shape is None or mi is None or mi[1] is None:
            continue
        ms = mi[1]
        differ = len(ms) != len(inp.shape) or any(isinstance(m, int) and m > 0 and m != c for m, c in zip(ms, inp.shape))
        if differ:
            path = ("input_parameters", "input_shape", inp.index) if ("input_parameters", "input_shape", inp.index) \
                in cfg.positions else ("input_parameters", "input_shape")
            yield finding(cfg, "C322", path, f"input {inp.index}: input_shape {'x'.join(map(str, inp.shape))} differs "
                          f"from model input {mi[0]!r} {list(ms)}", {"input_shape": list(inp.shape),
                                                                      "model_shape": [d if isinstance(d, int) else str(d)
                                                                                      for d in ms]})


# ----------------------------------------------------------------------------------------------------------------
# Stage cross-checks


def _config_node_names(cfg: ConversionConfig) -> list[tuple[tuple, str, str]]:
    """(key path, field label, node name) for every node named in node_info, run_on_cpu/bpu and quant_config."""
    out = []
    ni = cfg.get("model_parameters", "node_info")
    if isinstance(ni, dict):
        out += [(("model_parameters", "node_info", k), "node_info", str(k)) for k in ni]
    elif isinstance(ni, str):
        out += [(("model_parameters", "node_info"), "node_info", it.split(":")[0].strip())
                for it in ni.split(";") if it.strip()]
    for key in ("run_on_cpu", "run_on_bpu"):
        for it in split_per_input(cfg.get("calibration_parameters", key)):
            if not is_unset(it):
                out.append((("calibration_parameters", key), key, str(it).strip()))
    qc = cfg.get("calibration_parameters", "quant_config")
    if isinstance(qc, str) and qc.strip().endswith(".json"):
        p = Path(qc.strip()) if Path(qc.strip()).is_absolute() else cfg.base_dir / qc.strip()
        try:
            if p.is_file() and p.stat().st_size < (8 << 20):
                qc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):  # unreadable, not JSON, nested past the parser's depth
            qc = None
    if isinstance(qc, dict) and isinstance(qc.get("node_config"), dict):
        out += [(("calibration_parameters", "quant_config"), "quant_config.node_config", str(k))
                for k in qc["node_config"]]
    return out


def node_names(ctx: AuditContext) -> Iterator[Finding]:
    """C323 (docs/CASES.md case 12): node names in the config that the optimized_float stage does not have.

    When the name belongs to an earlier stage (the source model or original_float) and the lineage is known, the
    message gives the optimized node(s) it became.
    """
    cfg, chain = ctx.config, ctx.config_lineage  # the config's own model as stage 0 when the pipeline lacks it
    stages, lineage = (chain.stages, chain) if chain is not None else (ctx.stages, ctx.lineage)
    if cfg is None:
        return
    opt_idx = next((i for i, s in enumerate(stages) if s.role == "optimized"), None)
    if opt_idx is None:
        return
    opt = stages[opt_idx]
    opt_file = Path(opt.path).name
    opt_names = set(opt.nodes) | {n.name for n in opt.nodes.values() if n.name}
    for path, label, name in _config_node_names(cfg):
        if not name or name in opt_names:
            continue
        mapped, where = [], None
        for k in range(opt_idx):
            st = stages[k]
            ids = [nid for nid, n in st.nodes.items() if nid == name or n.name == name]
            if ids:
                where = Path(st.path).name
                if lineage is not None and len(lineage.alignments) >= opt_idx:
                    mapped = sorted({m for nid in ids for m in lineage.node_descendants(k, nid, opt_idx)})
                break
        if mapped:
            ops = ", ".join(f"{m} ({opt.nodes[m].op_type})" for m in mapped if m in opt.nodes)
            msg = (f"{label} names {name!r}, which is in {where} but not in {opt_file} (the toolchain matches "
                   f"nothing silently); it became {ops}: use that name")
        elif where:
            msg = f"{label} names {name!r}, which is in {where} but not in {opt_file}: it was removed or renamed"
        else:
            close = difflib.get_close_matches(name, sorted(opt_names), n=1, cutoff=0.7)
            msg = f"{label} names {name!r}, which is not a node of {opt_file}" + (
                f"; did you mean {close[0]!r}?" if close else "")
        yield finding(cfg, "C323", path, msg, {"name": name, "field": label, "found_in": where, "became": mapped})


def preprocess_mismatch(ctx: AuditContext) -> Iterator[Finding]:
    """C324: HzPreprocess mean/scale decoded from the stage models differ from what the YAML asks for, or its
    ``input_type`` (the colour order the stages take) from the YAML's ``input_type_train``.

    Decoding: docs/HORIZON.md section 3 (``scale = w``, ``mean = 128 - b / w``). The YAML side is the normalization the
    family applies (:func:`graphaudit.checks.config_common.effective_normalization`); an absent mean is 0, an absent scale 1.
    """
    cfg, stages = ctx.config, ctx.stages
    if cfg is None:
        return
    stage = next((s for s in stages if any(n.op_type == "HzPreprocess" for n in s.nodes.values())), None)
    if stage is None:
        return
    by_name = {inp.name: inp for inp in cfg.inputs if inp.name}
    for node in stage.nodes.values():
        if node.op_type != "HzPreprocess":
            continue
        pp = decode_hzpreprocess(stage, node)
        if pp is None:
            continue
        inp = by_name.get(pp.input) or (cfg.inputs[0] if len(cfg.inputs) == 1 else None)
        if inp is None or not is_image(inp):
            continue
        built, asked = colour(pp.input_type), colour(inp.type_train)
        if built and asked and built != asked:
            yield finding(cfg, "C324", ("input_parameters", "input_type_train"),
                          f"{stage.name} {pp.node} takes input {pp.input!r} as {pp.input_type} ({built}), but the "
                          f"config's input_type_train is {inp.type_train!r} ({asked}): the stage models were built "
                          "from another config, or the YAML was edited since; a harness written from the YAML feeds "
                          "the channels in the wrong order",
                          {"node": pp.node, "stage_input_type": pp.input_type, "config_input_type_train":
                           inp.type_train})
        mean, scale = effective_normalization(cfg, inp)
        c = len(pp.scale)
        want_mean = [0.0] * c if mean is None else (mean * c if len(mean) == 1 else mean)
        want_scale = [1.0] * c if scale is None else (scale * c if len(scale) == 1 else scale)
        if len(want_mean) != c or len(want_scale) != c:
            continue
        bad_mean = any(not math.isclose(a, b, rel_tol=1e-3, abs_tol=0.05) for a, b in zip(pp.mean, want_mean))
        bad_scale = any(not math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-7) for a, b in zip(pp.scale, want_scale))
        if bad_mean or bad_scale:
            key = "mean_value" if bad_mean else ("std_value" if inp.std is not None else "scale_value")
            yield finding(cfg, "C324", ("input_parameters", key),
                          f"{stage.name} {pp.node} normalizes input {pp.input!r} with mean {fmt(pp.mean)} and scale "
                          f"{fmt(pp.scale)}, but the config asks for mean {fmt(want_mean)} and scale {fmt(want_scale)}:"
                          " the stage models were built from another config, or the YAML was edited since",
                          {"node": pp.node, "stage_mean": pp.mean, "stage_scale": pp.scale, "config_mean": want_mean,
                           "config_scale": want_scale})


# ----------------------------------------------------------------------------------------------------------------
# Calibration data


def cal_dir_candidates(cfg: ConversionConfig, data: str | Path | None) -> list[tuple[ConfigInput, Path, str | None]]:
    """(input, directory, problem) of every input with a calibration directory; ``problem`` is None when the
    directory can be read, else one line saying why not ("not found", a pickled or truncated file, no data files...).

    ``data`` overrides ``cal_data_dir``: the directory itself for a single input, ``data/<input name>`` per input
    otherwise (Horizon's ``calibration_data/<input>/`` layout). Relative ``cal_data_dir`` resolve against the
    config's directory. Every .npy/.npz header is checked (never unpickled) with
    :func:`graphaudit.data.source.open_data`, which reads headers only; directories of raw files are not
    (their dtype and shape are what C325 checks).
    """
    out = []
    for inp in cfg.inputs:
        if data is not None:
            d = Path(data) if len(cfg.inputs) == 1 else Path(data) / (inp.name or "")
        elif inp.cal_data_dir:
            d = config_path(cfg, inp.cal_data_dir)
            if d is None:
                continue
        else:
            continue
        out.append((inp, d, _dir_problem(d, inp)))
    return out


def _dir_problem(d: Path, inp: ConfigInput) -> str | None:
    """Why calibration directory ``d`` cannot be read (one line), None when it can."""
    try:
        if not d.is_dir():
            return "not found" if not d.exists() else "is not a directory"
    except (OSError, ValueError) as e:
        return f"cannot be read ({getattr(e, 'strerror', None) or e})"
    files = _files(d)
    if files and all(is_raw_file(p) for p in files):  # hb_mapper reads any name as raw bytes (data.hbcal)
        return None
    try:
        src = open_data(d, [InputSpec(inp.name or "input", "float32", None)])
    except DataError as e:
        return str(e)
    if src.unreadable:  # lint reads every file it checks: one it cannot read is said (the others are not enough)
        return src.unreadable[0][1]
    return None


def cal_dirs(cfg: ConversionConfig, data: str | Path | None) -> list[tuple[ConfigInput, Path]]:
    """(input, directory) of every input whose calibration directory can be read (see :func:`cal_dir_candidates`)."""
    return [(inp, d) for inp, d, problem in cal_dir_candidates(cfg, data) if problem is None]


def _files(d: Path) -> list[Path]:
    try:
        files = [p for p in d.iterdir() if not p.name.startswith(".") and p.is_file()]
    except OSError:
        return []
    return sorted(files, key=lambda p: natural_key(p.name))


def _npy_header(p: Path) -> tuple[np.dtype, tuple] | None:
    """dtype and shape from a .npy header (no data read, never unpickles); None when not a readable .npy."""
    try:
        return npy_header(p)
    except DataError:
        return None


def _expected_cal_dtype(cfg: ConversionConfig, inp: ConfigInput, d: Path) -> tuple[str | None, str]:
    """1.x calibration dtype: explicit cal_data_type, else float32 when the directory ends ``_f32``, else uint8."""
    if cfg.family != "1.x":
        return None, ""
    if inp.cal_data_type and inp.cal_data_type.lower() in ("uint8", "float32"):
        return inp.cal_data_type.lower(), f"cal_data_type is {inp.cal_data_type}"
    if inp.cal_data_type and inp.cal_data_type.lower() in ("int8", "int16", "int32"):
        return None, ""  # hb_mapper accepts them (cal_data_type_list); a raw file's size cannot tell them apart
    name = (inp.cal_data_dir or d.name).rstrip("/\\")
    if name.endswith("_f32"):
        return "float32", f"cal_data_type is not given and {name!r} ends with _f32"
    return "uint8", f"cal_data_type is not given and {name!r} does not end with _f32"


def _file_dtype(p: Path, shape: tuple | None) -> str | None:
    """dtype name of a calibration file: from a .npy header, or a raw file's byte size / element count."""
    if p.suffix.lower() in NPY_EXTS:
        h = _npy_header(p) if p.suffix.lower() == ".npy" else None
        return h[0].name if h and h[0] is not None else None
    if p.suffix.lower() in IMAGE_EXTS or not shape:
        return None
    n = math.prod(shape)
    try:
        size = p.stat().st_size
    except OSError:
        return None
    return {4 * n: "float32", n: "uint8"}.get(size)


def cal_data_dtype(ctx: AuditContext) -> Iterator[Finding]:
    """C325 (1.x): calibration files whose dtype differs from cal_data_type (or the ``_f32`` suffix rule)."""
    cfg, model, data = ctx.config, ctx.config_model, ctx.config_data
    if cfg is None:
        return
    n = n_inputs(cfg, model)
    for inp, d in cal_dirs(cfg, data):
        want, why = _expected_cal_dtype(cfg, inp, d)
        if want is None:
            continue
        shape = static_shape(effective_shape(inp, model, n))
        counts: dict[str, int] = {}
        for p in _files(d)[:MAX_DTYPE_FILES]:
            dt = _file_dtype(p, shape)
            if dt is not None:
                counts[dt] = counts.get(dt, 0) + 1
        wrong = {k: v for k, v in counts.items() if k != want}
        if wrong:
            got = ", ".join(f"{v} {k}" for k, v in sorted(wrong.items()))
            key = ("calibration_parameters", "cal_data_type") if inp.cal_data_type else ("calibration_parameters",
                                                                                        "cal_data_dir")
            yield finding(cfg, "C325", key, f"input {inp.index}: {d} holds {got} file(s) (of {sum(counts.values())} "
                          f"checked) but hb_mapper reads them as {want} ({why})",
                          {"dir": str(d), "expected": want, "found": counts})


def _value_layout(p: Path, dtype: str | None, shape: tuple | None) -> tuple[int, np.dtype, int] | None:
    """(data offset, dtype, element count) of a calibration file's values, from a .npy header (never unpickled)
    or, for a raw file, ``dtype`` and ``shape`` when the byte size matches exactly; None otherwise (not a
    real-number array, truncated, an image...)."""
    try:
        size = p.stat().st_size
        if p.suffix.lower() == ".npy":  # numpy's own header reader, with the size checked (data.arrays)
            ref = npy_ref(p)
            offset, dt, hshape = ref.offset, ref.dtype, ref.shape
        elif p.suffix.lower() in NPY_EXTS or p.suffix.lower() in IMAGE_EXTS or dtype is None or not shape:
            return None
        else:
            offset, dt, hshape = 0, np.dtype(dtype), shape
    except (OSError, ValueError, SyntaxError, TypeError, DataError):
        return None
    n = math.prod(hshape)
    if dt.hasobject or dt.kind not in "fiu" or n == 0 or size != offset + n * dt.itemsize:
        return None
    return offset, dt, n


def _value_stats(p: Path, layout: tuple[int, np.dtype, int]) -> tuple[float, float, float, int] | None:
    """(min, max, sum, count) of a file's values read block by block; None when a value read is not finite or
    the file cannot be read.

    At most :data:`MAX_VALUE_BLOCKS` blocks of :data:`VALUE_BLOCK` elements are read: the whole array when it is
    that small, else blocks evenly spaced from its start to its end (a sample, enough to tell 0..255 pixels from
    0..1 or mean/std-normalized data). The order of the elements does not matter (C or Fortran). Memory: one
    block, as float64 (8 MiB).
    """
    offset, dt, n = layout
    if n <= VALUE_BLOCK * MAX_VALUE_BLOCKS:
        starts = list(range(0, n, VALUE_BLOCK))
    else:
        starts = [i * (n - VALUE_BLOCK) // (MAX_VALUE_BLOCKS - 1) for i in range(MAX_VALUE_BLOCKS)]
    lo, hi, total, count = math.inf, -math.inf, 0.0, 0
    try:
        with open(p, "rb") as fh:
            for s in starts:
                fh.seek(offset + s * dt.itemsize)
                blk = np.fromfile(fh, dtype=dt, count=min(VALUE_BLOCK, n - s)).astype(np.float64)
                if blk.size == 0:
                    continue
                if not np.isfinite(blk).all():
                    return None
                lo, hi = min(lo, float(blk.min())), max(hi, float(blk.max()))
                total, count = total + float(blk.sum()), count + blk.size
    except (OSError, ValueError):
        return None
    return (lo, hi, total, count) if count else None


def _channel_axis(inp: ConfigInput, shape: tuple | None, channels: int) -> int | None:
    """Channel axis of a calibration file's array (``input_layout_train``), when its size there is ``channels``."""
    if shape is None or len(shape) != 4:
        return None
    axis = {"NCHW": 1, "NHWC": 3}.get((inp.layout_train or "").upper())
    return axis if axis is not None and shape[axis] == channels else None


def _channel_stats(p: Path, layout: tuple[int, np.dtype, int], shape: tuple | None, axis: int | None
                   ) -> tuple[list[float], list[float], float, int] | None:
    """Per-channel (min, max), sum and count of a calibration file: per channel along ``axis`` when the whole file
    fits :data:`VALUE_BLOCK` x :data:`MAX_VALUE_BLOCKS` elements and has ``shape`` (read memory-mapped, never
    unpickled), else one range for every channel from :func:`_value_stats`. None when unreadable or not finite."""
    offset, dt, n = layout
    if axis is not None and shape is not None and math.prod(shape) == n and n <= VALUE_BLOCK * MAX_VALUE_BLOCKS:
        try:
            arr = np.memmap(p, dtype=dt, mode="r", offset=offset, shape=tuple(shape))
            v = np.moveaxis(np.asarray(arr, dtype=np.float64), axis, 0).reshape(shape[axis], -1)
        except (OSError, ValueError):
            return None
        if not np.isfinite(v).all():
            return None
        return [float(x) for x in v.min(axis=1)], [float(x) for x in v.max(axis=1)], float(v.sum()), v.size
    st = _value_stats(p, layout)
    return None if st is None else ([st[0]], [st[1]], st[2], st[3])


def _normalized_3x(cfg, inp, d, key, lo, hi, avg, used, mean, scale) -> Iterator[Finding]:
    """C326 for 3.x configs, whose calibration-file domain (pixels or pixel - 128) is not public: only data in
    [0, 1] (divided by 255) or small values around 0 with negatives (mean/std normalized: max |x| < 10, |mean| < 3)."""
    unit = lo >= 0.0 and 0.0 < hi <= 1.0
    standardized = lo < 0.0 and max(abs(lo), abs(hi)) < 10.0 and abs(avg) < 3.0
    if unit or standardized:
        what = "in [0, 1] (already divided by 255)" if unit else "already mean/std normalized"
        yield finding(cfg, "C326", ("input_parameters", key),
                      f"input {inp.index}: calibration data in {d} are {what} (range [{lo:.3g}, {hi:.3g}], mean "
                      f"{avg:.3g} over {used} file(s)) while the config normalizes again with mean {fmt(mean)} "
                      f"and scale {fmt(scale)}: duplicated normalization", {"dir": str(d), "min": lo, "max": hi,
                                                                           "mean": avg, "files": used})


def cal_data_normalized(ctx: AuditContext) -> Iterator[Finding]:
    """C326 (docs/CASES.md case 3 for the config): calibration data prepared with part of the normalization the
    toolchain applies again (mean, scale, both), divided by 255, or given the -128 offset.

    hb_mapper 1.x calibrates on pixels (0..255, training colour order and layout) and applies the config's
    mean/scale itself (docs/INPUT_CONTRACTS.md section 3). The per-channel value range of the first
    :data:`MAX_VALUE_FILES` files is judged by :func:`graphaudit.toolchains.valuedomain.judge_domain` against that
    pixel domain, which names the form of the mistake. 3.x configs get only the plain cases
    (:func:`_normalized_3x`).
    """
    cfg, model, data = ctx.config, ctx.config_model, ctx.config_data
    if cfg is None:
        return
    n = n_inputs(cfg, model)
    for inp, d in cal_dirs(cfg, data):
        mean, scale = effective_normalization(cfg, inp)
        normalizes = nontrivial(mean, 0.0) or nontrivial(scale, 1.0)
        if not is_image(inp) or not (normalizes or cfg.family == "1.x"):
            continue  # 1.x image inputs take pixels even with no_preprocess (the device feeds pixels)
        shape = static_shape(effective_shape(inp, model, n))
        want, _ = _expected_cal_dtype(cfg, inp, d)
        dom = PixelDomain(0.0, tuple(mean or [0.0]), tuple(scale or [1.0]), "pixels 0..255")
        axis = _channel_axis(inp, shape, dom.channels)
        lo = hi = None
        total, count, used = 0.0, 0, 0
        for p in _files(d)[:MAX_VALUE_FILES]:
            layout = _value_layout(p, _file_dtype(p, shape) or want, shape)
            st = _channel_stats(p, layout, shape, axis) if layout is not None else None
            if st is None:
                continue
            flo, fhi = channel_ranges(st[0], st[1], dom.channels)
            lo = flo if lo is None else np.minimum(lo, flo)
            hi = fhi if hi is None else np.maximum(hi, fhi)
            total, count, used = total + st[2], count + st[3], used + 1
        if not used:
            continue
        key = "scale_value" if nontrivial(scale, 1.0) and not nontrivial(mean, 0.0) else "mean_value"
        if cfg.family != "1.x":  # 3.x: the domain of calibration files is not public; only the plain cases
            yield from _normalized_3x(cfg, inp, d, key, float(np.min(lo)), float(np.max(hi)), total / count, used,
                                      mean, scale)
            continue
        v = judge_domain(list(lo), list(hi), dom)
        if v is None:
            continue
        if not normalizes:
            key = "norm_type"
        ranges = ", ".join(f"[{a:.4g}, {b:.4g}]" for a, b in zip(lo, hi))
        what = (f"{v.form.describe(dom)}" + (f" (the same data as: {', '.join(v.also)})" if v.also else "")
                if v.form is not None else f"outside the pixel range by {v.overflow:.4g} levels, no known form")
        f = finding(cfg, "C326", ("input_parameters", key),
                      f"input {inp.index}: calibration data in {d}: {what}. Per channel they span {ranges} (mean "
                      f"{total / count:.4g} over {used} file(s)); hb_mapper takes pixels 0..255 and " + (
                          f"normalizes them with mean {fmt(mean)} and scale {fmt(scale)} itself" if normalizes else
                          f"subtracts 128 itself (norm_type {inp.norm_type or 'no_preprocess'}: the device feeds "
                          "pixels)"),
                      {"dir": str(d), "min": float(np.min(lo)), "max": float(np.max(hi)), "mean": total / count,
                       "files": used, "channel_min": [float(x) for x in lo], "channel_max": [float(x) for x in hi],
                       **v.to_dict()})
        if v.form is not None:
            f.fix = v.form.advice(dom) + undo_formula(v, dom)
        yield f