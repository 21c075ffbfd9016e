"""Schema rules C301-C317: keys, types, allowed values and per-input consistency of a conversion config.

Each rule is a function ``(AuditContext) -> Iterator[Finding]`` over ``ctx.config`` (nothing without one), listed in
:data:`graphaudit.checks.table.RULES`.
"""

from __future__ import annotations

import difflib
import math
from typing import Iterator

from ..config import schema as S
from ..config.parse import ConversionConfig, is_unset, parse_channels, parse_shape, split_per_input
from ..findings import Finding
from ..stage import StageGraph
from .base import AuditContext
from .config_common import channel_count, effective_shape, finding, fmt, nontrivial, per_input_items
from .config_hbmapper import hb_mapper_types, hb_mapper_values, required_keys, type_pairs

__all__ = ["unknown_keys", "deprecated", "wrong_types", "invalid_values", "per_input_counts", "channel_counts",
           "separators", "scale_and_std", "norm_type_mismatch", "type_pairs", "type_shape", "featuremap_norm",
           "bt601_needs_nv12", "input_source_type", "balance_factor", "max_percentile", "unknown_items",
           "required_keys", "n_inputs"]

_NORM_KEYS = ("mean_value", "scale_value", "std_value")


def _item_path(cfg: ConversionConfig, section: str, key: str, i: int) -> tuple:
    """Key path of item ``i`` of a per-input key (the list item when it is a YAML list, else the key)."""
    return (section, key, i) if (section, key, i) in cfg.positions else (section, key)


def _dims(shape: tuple) -> str:
    return "x".join("?" if d is None else str(d) for d in shape)


def n_inputs(cfg: ConversionConfig, model: StageGraph | None = None) -> int:
    """Number of model inputs: the model's when known, else the ``input_name`` count, else the largest per-input count."""
    if model is not None and model.inputs:
        return len(model.inputs)
    return len(cfg.inputs)


def each_input(ctx: AuditContext) -> Iterator[tuple[ConversionConfig, StageGraph | None, int, object]]:
    """``(config, config model, number of inputs, input)`` for each input of the context's config (nothing without
    a config): the loop most C3xx rules run."""
    cfg, model = ctx.config, ctx.config_model
    if cfg is None:
        return
    n = n_inputs(cfg, model)
    for inp in cfg.inputs:
        yield cfg, model, n, inp


def _all_known(family: str) -> dict[str, str]:
    return {k: sec for sec, keys in S.KNOWN_KEYS[family].items() for k in keys}


def unknown_keys(ctx: AuditContext) -> Iterator[Finding]:
    """C301: keys the family does not know, with a did-you-mean (close key, other section, other family)."""
    if (cfg := ctx.config) is None:
        return
    fam = cfg.family
    known = _all_known(fam)
    other = "3.x" if fam == "1.x" else "1.x"
    other_known = _all_known(other)
    # hb_mapper 1.x validates against a schema.Schema that refuses any other key: an error there
    sev = "error" if fam == "1.x" else None
    refused = " (hb_mapper refuses the config: \"Wrong key\")" if fam == "1.x" else ""
    for top in cfg.data:
        if top not in S.SECTIONS:
            close = difflib.get_close_matches(str(top), S.SECTIONS, n=1, cutoff=0.7)
            hint = f"; did you mean {close[0]!r}?" if close else f"; sections are {', '.join(S.SECTIONS[:4])}"
            yield finding(cfg, "C301", (top,), f"unknown section {top!r}{hint}{refused}", {"key": str(top)}, sev)
    if fam == "1.x":
        for key in cfg.section("custom_op"):
            if key not in S.HB_MAPPER_CUSTOM_OP_KEYS:
                yield finding(cfg, "C301", ("custom_op", key), f"custom_op.{key} is not a {S.FAMILY_NAMES[fam]} key "
                              f"({', '.join(sorted(S.HB_MAPPER_CUSTOM_OP_KEYS))}){refused}", {"key": str(key),
                                                                                              "family": fam}, sev)
    for sec in S.SECTIONS[:4]:
        for key in cfg.section(sec):
            if key in S.KNOWN_KEYS[fam][sec]:
                continue
            k = str(key)
            if k in known:
                hint = f"; it belongs in {known[k]}"
            elif k in S.KNOWN_KEYS[other].get(sec, set()) or k in other_known:
                hint = f"; it is a {S.FAMILY_NAMES[other]} key, which {S.FAMILY_NAMES[fam]} does not read"
                if k == "std_value":
                    hint += ": give scale_value = 1/std instead, or the input is not normalized"
            else:
                close = difflib.get_close_matches(k, list(known), n=1, cutoff=0.75)
                hint = f"; did you mean {close[0]!r}?" if close else ""
            yield finding(cfg, "C301", (sec, key), f"{sec}.{k} is not a {S.FAMILY_NAMES[fam]} key{hint}{refused}",
                          {"key": k, "family": fam}, sev)


def deprecated(ctx: AuditContext) -> Iterator[Finding]:
    """C302: keys and values the family deprecates (ignored by the toolchain)."""
    if (cfg := ctx.config) is None:
        return
    for (sec, key), why in S.DEPRECATED_KEYS[cfg.family].items():
        v = cfg.get(sec, key)
        if key not in cfg.section(sec) or is_unset(v) or v == {}:
            continue
        msg = f"{sec}.{key} is deprecated in {S.FAMILY_NAMES[cfg.family]}: {why}"
        if key == "norm_type":
            for inp in cfg.inputs:
                nt = inp.norm_type or ""
                if (nt in ("no_preprocess", "data_scale") and nontrivial(inp.mean, 0.0)) or \
                        (nt in ("no_preprocess", "data_mean") and nontrivial(inp.scale, 1.0)):
                    msg += (f"; norm_type {nt!r} does not stop it: the mean/scale given for input {inp.index} "
                            "are applied")
                    break
        yield finding(cfg, "C302", (sec, key), msg, {"key": key, "family": cfg.family})
    for (fam, key), values in S.DEPRECATED_VALUES.items():
        if fam != cfg.family:
            continue
        for sec in S.SECTIONS[:4]:
            v = cfg.get(sec, key)
            if isinstance(v, str) and v.strip().lower() in values:
                yield finding(cfg, "C302", (sec, key), f"{sec}.{key}: {v.strip()!r} is {values[v.strip().lower()]}",
                              {"key": key, "value": v.strip(), "family": fam})


def _is_int(v) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and v.strip().lstrip("-").isdigit())


def _is_number(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


def wrong_types(ctx: AuditContext) -> Iterator[Finding]:
    """C303: a value of the wrong type (section not a mapping, list where a scalar goes, non-numbers, bad shapes)."""
    if (cfg := ctx.config) is None:
        return
    hb = cfg.family == "1.x"
    for sec in S.SECTIONS:
        if sec in cfg.data and (cfg.data[sec] is not None or hb) and not isinstance(cfg.data[sec], dict):
            what = "empty" if cfg.data[sec] is None else f"a {type(cfg.data[sec]).__name__}"
            yield finding(cfg, "C303", (sec,), f"{sec} must be a mapping of keys, not {what}"
                          + (" (hb_mapper's schema refuses it)" if hb else ""))
    if hb:
        yield from hb_mapper_types(cfg)
    for sec, key in sorted(S.SCALAR_KEYS):
        v = cfg.get(sec, key)
        if isinstance(v, (dict, list)) and not (hb and (sec, key) in S.HB_MAPPER_TYPES):
            yield finding(cfg, "C303", (sec, key), f"{sec}.{key} must be a single value, not a {type(v).__name__}")
    for sec, key in sorted(S.INT_KEYS):
        v = cfg.get(sec, key)
        if not is_unset(v) and not _is_int(v) and not (hb and (sec, key) in S.HB_MAPPER_TYPES):
            yield finding(cfg, "C303", (sec, key), f"{sec}.{key} must be an integer, got {v!r}")
    for sec, key in sorted(S.FLOAT_KEYS):
        v = cfg.get(sec, key)
        if not is_unset(v) and not _is_number(v) and not (hb and (sec, key) in S.HB_MAPPER_TYPES):
            yield finding(cfg, "C303", (sec, key), f"{sec}.{key} must be a number, got {v!r}")
    for sec, key in sorted(S.MAPPING_KEYS):
        v = cfg.get(sec, key)
        if not is_unset(v) and not isinstance(v, dict) and not (hb and (sec, key) in S.HB_MAPPER_TYPES):
            yield finding(cfg, "C303", (sec, key), f"{sec}.{key} must be a mapping {{input name: value}}, got {v!r}")
    for key in _NORM_KEYS:
        for i, item in enumerate(per_input_items(cfg, "input_parameters", key)):
            try:
                vals, _sep = parse_channels(item)
            except ValueError as e:
                yield finding(cfg, "C303", _item_path(cfg, "input_parameters", key, i),
                              f"input_parameters.{key} (input {i}): {e}; expected numbers per channel")
                continue
            if key == "mean_value" or not vals:
                continue
            if any(v == 0 for v in vals):
                what = "every pixel becomes 0" if key == "scale_value" else "1/std is a division by zero"
                yield finding(cfg, "C303", _item_path(cfg, "input_parameters", key, i),
                              f"input_parameters.{key} (input {i}): a {key[:-6]} of 0 ({what})", {"values": vals})
            elif key == "std_value" and any(not math.isfinite(1.0 / v) for v in vals):
                yield finding(cfg, "C303", _item_path(cfg, "input_parameters", key, i),
                              f"input_parameters.{key} (input {i}): 1/std overflows to infinity", {"values": vals})
    for i, item in enumerate(per_input_items(cfg, "input_parameters", "input_shape")):
        try:
            parse_shape(item)
        except ValueError as e:
            yield finding(cfg, "C303", _item_path(cfg, "input_parameters", "input_shape", i),
                          f"input_parameters.input_shape (input {i}): {e}")
    ni = cfg.get("model_parameters", "node_info")
    if isinstance(ni, dict):
        for node, spec in ni.items():
            if isinstance(spec, dict) and any(isinstance(k, bool) for k in spec):
                yield finding(cfg, "C303", ("model_parameters", "node_info", node),
                              f"node_info[{node!r}] has a boolean key: an unquoted ON/OFF/yes/no is read as true/false "
                              "by YAML 1.1 (PyYAML), so the toolchain never sees 'ON'; quote it: 'ON': 'BPU'")
    elif not is_unset(ni) and not isinstance(ni, str):
        yield finding(cfg, "C303", ("model_parameters", "node_info"),
                      "node_info must be a mapping {node: {ON, InputType, OutputType}} or a string 'node:type;...'")


def _check_value(cfg, sec, key, allowed, path=None, v=None, label=None) -> Iterator[Finding]:
    """C304 when ``v`` (default: the key's value) is not in ``allowed``; hb_mapper 1.x compares exactly (no case
    folding; ``NV12``, ``nchw``, ``Bayes-E`` are refused), 3.x case-insensitively."""
    v = cfg.get(sec, key) if v is None else v
    exact = cfg.family == "1.x"
    if (v is None if exact and path is None else is_unset(v)) or isinstance(v, (dict, list)) or \
            (isinstance(v, bool) and not exact):
        return
    s = str(v).strip()  # hb_mapper's Use(str) turns a YAML true into 'True', which no list holds
    if (s not in allowed) if exact else (s.lower() not in {a.lower() for a in allowed}):
        close = difflib.get_close_matches(s.lower(), [a.lower() for a in allowed], n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        yield finding(cfg, "C304", path or (sec, key),
                      f"{label or sec + '.' + key} {s!r} is not one of {', '.join(allowed)} "
                      f"({S.FAMILY_NAMES[cfg.family]}){hint}", {"key": key, "value": s, "allowed": list(allowed)})


def invalid_values(ctx: AuditContext) -> Iterator[Finding]:
    """C304: values outside the allowed sets of the family (march, input types, layouts, norm_type, ...)."""
    if (cfg := ctx.config) is None:
        return
    fam = cfg.family
    hb = fam == "1.x"
    yield from _check_value(cfg, "model_parameters", "march", S.MARCH[fam])
    singles = (("calibration_parameters", "calibration_type", S.CALIBRATION_TYPE[fam]),
               ("compiler_parameters", "compile_mode", S.COMPILE_MODE),
               ("compiler_parameters", "optimize_level", S.OPTIMIZE_LEVEL[fam]))
    for sec, key, allowed in singles:
        yield from _check_value(cfg, sec, key, allowed)
    per = (("input_type_train", S.HB_MAPPER_INPUT_TYPE_TRAIN if hb else S.INPUT_TYPE_TRAIN),
           ("input_type_rt", S.HB_MAPPER_INPUT_TYPE_RT if hb else S.INPUT_TYPE_RT),
           ("input_layout_train", S.LAYOUTS), ("input_layout_rt", S.LAYOUTS),
           ("norm_type", S.HB_MAPPER_NORM_TYPES if hb else S.NORM_TYPES),
           ("input_space_and_range", S.INPUT_SPACE_AND_RANGE))
    per = [("input_parameters", k, a) for k, a in per] + [("calibration_parameters", "cal_data_type", S.CAL_DATA_TYPE)]
    for sec, key, allowed in per:
        for i, item in enumerate(per_input_items(cfg, sec, key)):
            yield from _check_value(cfg, sec, key, allowed, _item_path(cfg, sec, key, i), item,
                                    f"{sec}.{key} (input {i})")
    src = cfg.get("compiler_parameters", "input_source")
    if isinstance(src, dict):
        for name, v in src.items():
            yield from _check_value(cfg, "compiler_parameters", "input_source", S.INPUT_SOURCE,
                                    ("compiler_parameters", "input_source", name), v, f"input_source[{name!r}]")
    bf = cfg.get("compiler_parameters", "balance_factor")
    balance = str(cfg.get("compiler_parameters", "compile_mode") or "").strip() == "balance"
    if _is_int(bf) and not isinstance(bf, bool) and balance and not 0 <= int(bf) <= 100:
        yield finding(cfg, "C304", ("compiler_parameters", "balance_factor"),
                      f"compiler_parameters.balance_factor {bf} is outside 0..100", {"value": int(bf)})
    if hb:
        yield from hb_mapper_values(cfg)


def per_input_counts(ctx: AuditContext) -> Iterator[Finding]:
    """C305: ';'-separated per-input values whose count differs from the number of inputs."""
    cfg, model = ctx.config, ctx.config_model
    if cfg is None:
        return
    n = n_inputs(cfg, model)
    basis = f"the model has {n} input(s)" if model is not None else f"{n} input(s) in the config"
    from ..config.parse import PER_INPUT_KEYS
    for sec, key in PER_INPUT_KEYS:
        items = split_per_input(cfg.get(sec, key))
        if cfg.family == "1.x" and isinstance(cfg.get(sec, key), str) and len(items) > 1 and items[-1] == "" \
                and not all(is_unset(x) for x in items[:-1]):
            items = items[:-1]  # hb_mapper drops one trailing ';' (tool_utils.get_list_from_txt)
        if not items or (len(items) == 1 and is_unset(items[0])):
            continue
        if len(items) != n:
            yield finding(cfg, "C305", (sec, key), f"{sec}.{key} gives {len(items)} value(s) separated by ';' but "
                          f"{basis}", {"key": key, "count": len(items), "inputs": n})


def channel_counts(ctx: AuditContext) -> Iterator[Finding]:
    """C306: mean/scale/std with a per-channel count other than 1 or C (C from input_shape or the model)."""
    for cfg, model, n, inp in each_input(ctx):
        c = channel_count(inp, effective_shape(inp, model, n))
        if c is None:
            continue
        for key, vals in (("mean_value", inp.mean), ("scale_value", None), ("std_value", inp.std)):
            if key == "scale_value":
                vals = inp.scale if cfg.get("input_parameters", "scale_value") is not None else None
            if vals is not None and len(vals) not in (1, c):
                yield finding(cfg, "C306", _item_path(cfg, "input_parameters", key, inp.index),
                              f"input_parameters.{key} (input {inp.index}) has {len(vals)} values ({fmt(vals)}); "
                              f"the input has C = {c} channels: give 1 value or {c}",
                              {"key": key, "count": len(vals), "channels": c})


def separators(ctx: AuditContext) -> Iterator[Finding]:
    """C307: per-channel values separated by commas in 1.x (spaces are required there) or mixing both."""
    if (cfg := ctx.config) is None:
        return
    for key in _NORM_KEYS:
        for i, item in enumerate(per_input_items(cfg, "input_parameters", key)):
            try:
                _, sep = parse_channels(item)
            except ValueError:
                continue
            if sep == "mixed" or (sep == "comma" and cfg.family == "1.x"):
                want = "spaces" if cfg.family == "1.x" else "commas"
                yield finding(cfg, "C307", _item_path(cfg, "input_parameters", key, i),
                              f"input_parameters.{key} (input {i}) {item!r} separates channels with "
                              f"{'commas and spaces' if sep == 'mixed' else 'commas'}; {S.FAMILY_NAMES[cfg.family]} "
                              f"documents {want}" + (" (hb_mapper 1.24.3 reads a comma as a space; its template and "
                                                     "older versions want spaces)" if cfg.family == "1.x" else ""),
                              {"key": key, "separator": sep})


def scale_and_std(ctx: AuditContext) -> Iterator[Finding]:
    """C308 (3.x): scale_value and std_value both given for one input (they are exclusive)."""
    if (cfg := ctx.config) is None:
        return
    if cfg.family != "3.x":
        return
    scales = per_input_items(cfg, "input_parameters", "scale_value")
    stds = per_input_items(cfg, "input_parameters", "std_value")
    for i in range(max(len(scales), len(stds))):
        sc = scales[i] if i < len(scales) else (scales[0] if len(scales) == 1 else None)
        sd = stds[i] if i < len(stds) else (stds[0] if len(stds) == 1 else None)
        if not is_unset(sc) and not is_unset(sd):
            yield finding(cfg, "C308", _item_path(cfg, "input_parameters", "std_value", i),
                          f"input {i} gives both scale_value ({sc}) and std_value ({sd}); hb_compile takes one: "
                          "scale = 1/std", {"input": i})


def norm_type_mismatch(ctx: AuditContext) -> Iterator[Finding]:
    """C309 (1.x): norm_type missing or not selecting the mean/scale given, or selecting values not given."""
    if (cfg := ctx.config) is None:
        return
    if cfg.family != "1.x":
        return
    for inp in cfg.inputs:
        nt = inp.norm_type
        has_mean = nontrivial(inp.mean, 0.0)
        has_scale = cfg.get("input_parameters", "scale_value") is not None and nontrivial(inp.scale, 1.0)
        path = _item_path(cfg, "input_parameters", "norm_type", inp.index) if nt else ("input_parameters", "mean_value"
                                                                                      if has_mean else "scale_value")
        problems = []
        if nt is None and (has_mean or has_scale):
            given = " and ".join(k for k, h in (("mean_value", has_mean), ("scale_value", has_scale)) if h)
            want = "data_mean_and_scale" if has_mean and has_scale else "data_mean" if has_mean else "data_scale"
            problems.append(f"{given} given but norm_type is missing: hb_mapper applies neither (norm_type "
                            f"{want!r} would)")
        elif nt in S.NORM_TYPES:
            uses_mean = nt in ("data_mean", "data_mean_and_scale")
            uses_scale = nt in ("data_scale", "data_mean_and_scale")
            if has_mean and not uses_mean:
                problems.append(f"mean_value {fmt(inp.mean)} is given but norm_type {nt!r} does not subtract it")
            if has_scale and not uses_scale:
                problems.append(f"scale_value {fmt(inp.scale)} is given but norm_type {nt!r} does not apply it")
            if uses_mean and inp.mean is None:
                problems.append(f"norm_type {nt!r} subtracts a mean but mean_value is not given")
            if uses_scale and (inp.scale is None or cfg.get("input_parameters", "scale_value") is None):
                problems.append(f"norm_type {nt!r} applies a scale but scale_value is not given")
        if problems:
            yield finding(cfg, "C309", path, f"input {inp.index}: " + "; ".join(problems),
                          {"input": inp.index, "norm_type": nt, "mean": inp.mean, "scale": inp.scale})


def type_shape(ctx: AuditContext) -> Iterator[Finding]:
    """C311: shapes the input types cannot take (nv12 odd H/W, gray C != 1, rgb/bgr/yuv444 C != 3, image not 4-D)."""
    for cfg, model, n, inp in each_input(ctx):
        shape = effective_shape(inp, model, n)
        if shape is None or inp.type_train in (None, "featuremap") or inp.type_train not in S.INPUT_TYPE_TRAIN:
            continue
        src = "input_shape" if inp.shape is not None else "the model's input shape"
        path = _item_path(cfg, "input_parameters", "input_shape" if inp.shape is not None else "input_type_train",
                          inp.index)
        if len(shape) != 4:
            yield finding(cfg, "C311", path, f"input {inp.index}: image type {inp.type_train!r} needs a 4-D input, "
                          f"{src} is {_dims(shape)}", {"shape": list(shape)})
            continue
        c = channel_count(inp, shape)
        want = 1 if inp.type_train == "gray" else 3
        if c is not None and c != want:
            yield finding(cfg, "C311", path, f"input {inp.index}: input_type_train {inp.type_train!r} needs C = {want}, "
                          f"{src} {_dims(shape)} has C = {c} under {inp.layout_train}",
                          {"shape": list(shape), "channels": c, "expected": want})
        if inp.type_rt == "nv12" and inp.layout_train in ("NCHW", "NHWC"):
            h, w = (shape[2], shape[3]) if inp.layout_train == "NCHW" else (shape[1], shape[2])
            if isinstance(h, int) and isinstance(w, int) and (h % 2 or w % 2):
                yield finding(cfg, "C311", path, f"input {inp.index}: nv12 needs even height and width, {src} gives "
                              f"H = {h}, W = {w}", {"height": h, "width": w})


def featuremap_norm(ctx: AuditContext) -> Iterator[Finding]:
    """C312: mean/scale/std given for a featuremap input (no HzPreprocess is inserted for it)."""
    if (cfg := ctx.config) is None:
        return
    for inp in cfg.inputs:
        if "featuremap" not in (inp.type_train, inp.type_rt):
            continue
        for key, vals in (("mean_value", inp.mean), ("scale_value", inp.scale if inp.std is None else None),
                          ("std_value", inp.std)):
            if vals is not None:
                yield finding(cfg, "C312", _item_path(cfg, "input_parameters", key, inp.index),
                              f"input {inp.index} is a featuremap but {key} {fmt(vals)} is given: featuremap inputs "
                              "are not normalized by the toolchain", {"input": inp.index, "key": key})


def bt601_needs_nv12(ctx: AuditContext) -> Iterator[Finding]:
    """C313: input_space_and_range bt601_video with an input_type_rt other than nv12."""
    if (cfg := ctx.config) is None:
        return
    items = per_input_items(cfg, "input_parameters", "input_space_and_range")
    for inp in cfg.inputs:
        v = items[inp.index] if inp.index < len(items) else (items[0] if len(items) == 1 else None)
        if isinstance(v, str) and v.strip().lower() == "bt601_video" and inp.type_rt != "nv12":
            yield finding(cfg, "C313", _item_path(cfg, "input_parameters", "input_space_and_range", inp.index),
                          f"input {inp.index}: bt601_video is only for nv12 input, input_type_rt is {inp.type_rt!r}",
                          {"input": inp.index, "type_rt": inp.type_rt})


def input_source_type(ctx: AuditContext) -> Iterator[Finding]:
    """C314: input_source pyramid/resizer for an input whose input_type_rt is not nv12 or gray."""
    if (cfg := ctx.config) is None:
        return
    src = cfg.get("compiler_parameters", "input_source")
    if not isinstance(src, dict):
        return
    by_name = {inp.name: inp for inp in cfg.inputs if inp.name}
    model = ctx.config_model
    names = set(by_name) | (set(model.inputs) if model is not None and len(cfg.inputs) == 1 and not by_name
                            else set())
    for name, v in src.items():
        inp = by_name.get(str(name)) or (cfg.inputs[0] if len(cfg.inputs) == 1 else None)
        if names and str(name) not in names:
            yield finding(cfg, "C314", ("compiler_parameters", "input_source", name),
                          f"input_source names {str(name)!r}, which is not an input ({', '.join(sorted(names))}): "
                          "the toolchain refuses it", {"input": str(name)})
            continue
        if inp is None or not isinstance(v, str) or v.strip().lower() not in S.INPUT_SOURCE_TYPES:
            continue
        src_v = v.strip().lower()
        if inp.type_rt is not None and inp.type_rt not in S.INPUT_SOURCE_TYPES[src_v]:
            what = ("pyramid and resizer feed nv12/gray images only; use 'ddr'" if src_v != "ddr" else
                    "ddr feeds rgb, bgr, yuv444, gray and featuremap inputs; nv12 comes from 'pyramid' or 'resizer'")
            yield finding(cfg, "C314", ("compiler_parameters", "input_source", name),
                          f"input_source[{name!r}] is {v.strip()!r} but input_type_rt is {inp.type_rt!r}: {what}",
                          {"input": str(name), "type_rt": inp.type_rt})


def balance_factor(ctx: AuditContext) -> Iterator[Finding]:
    """C315: a non-zero balance_factor while compile_mode is not balance (it is then ignored)."""
    if (cfg := ctx.config) is None:
        return
    bf = cfg.get("compiler_parameters", "balance_factor")
    mode = cfg.get("compiler_parameters", "compile_mode")
    if _is_int(bf) and int(bf) != 0 and str(mode or "latency").strip().lower() != "balance":
        yield finding(cfg, "C315", ("compiler_parameters", "balance_factor"),
                      f"balance_factor {bf} has no effect: compile_mode is {str(mode or 'latency (default)')!r}, "
                      "not 'balance'", {"balance_factor": int(bf), "compile_mode": mode})


def max_percentile(ctx: AuditContext) -> Iterator[Finding]:
    """C316: max_percentile outside (0, 1]."""
    if (cfg := ctx.config) is None:
        return
    v = cfg.get("calibration_parameters", "max_percentile")
    if _is_number(v) and not 0.0 < float(v) <= 1.0:
        yield finding(cfg, "C316", ("calibration_parameters", "max_percentile"),
                      f"max_percentile {v} is outside (0, 1] (a fraction such as 0.99999, not a percentage)",
                      {"value": float(v)})


def unknown_items(ctx: AuditContext) -> Iterator[Finding]:
    """C317: items of optimization (comma list) and remove_node_type (';' list) outside the documented sets."""
    if (cfg := ctx.config) is None:
        return
    lists = (("calibration_parameters", "optimization", ",", S.OPTIMIZATION),
             ("model_parameters", "remove_node_type", ";", S.REMOVE_NODE_TYPE))
    for sec, key, sep, allowed in lists:
        v = cfg.get(sec, key)
        if is_unset(v) or not isinstance(v, str):
            continue
        for item in (x.strip() for x in v.split(sep)):
            if item and item not in allowed:
                close = difflib.get_close_matches(item, allowed, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                yield finding(cfg, "C317", (sec, key), f"{sec}.{key} item {item!r} is not a documented value "
                              f"({', '.join(allowed)}){hint}", {"key": key, "item": item})
