"""hb_mapper 1.x's own config validation (``horizon_tc_ui/config/mapper_conf_parser.py``, ``MpConf``) as lint rules: the
types its ``schema.Schema`` demands (C303), the value checks of its ``_validate_*`` methods (C304) and the keys it
requires (C318, with hb_compile's balance_factor). Checked against hb_mapper itself by
``tests/horizon_runtime/test_lint_vs_hb_mapper.py``.
"""

from __future__ import annotations

from typing import Iterator

from ..config import schema as S
from ..config.parse import ConversionConfig, is_unset, split_per_input
from ..findings import Finding
from .base import AuditContext
from .config_common import finding, per_input_items

__all__ = ["hb_mapper_types", "hb_mapper_values", "required_keys", "type_pairs"]


def _item_path(cfg: ConversionConfig, section: str, key: str, i: int) -> tuple:
    return (section, key, i) if (section, key, i) in cfg.positions else (section, key)


def _is_int(v) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and v.strip().lstrip("-").isdigit())

_TYPE_WORDS = {"str": "a string", "bool": "true or false", "int": "an integer", "str|dict": "a string or a mapping",
               "float": "a number", "nonempty": "a non-empty string", "dict": "a mapping {input name: source}"}


def _type_ok(kind: str, v) -> bool:
    if kind == "text":
        return True
    if kind == "str":
        return isinstance(v, str)
    if kind == "nonempty":
        return isinstance(v, str) and len(v) > 0
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool)  # the schema library refuses a bool for int
    if kind == "str|dict":
        return isinstance(v, (str, dict))
    if kind == "dict":
        return isinstance(v, dict)
    if kind == "float":
        try:
            float(v)
            return True
        except (TypeError, ValueError):
            return False
    return True


def hb_mapper_types(cfg: ConversionConfig) -> Iterator[Finding]:
    """C303 (1.x): the types hb_mapper's own schema demands (mapper_conf_parser.conf_schema_dict); an empty value
    is None to PyYAML, which a str, int or bool key refuses too."""
    for (sec, key), kind in S.HB_MAPPER_TYPES.items():
        sect = cfg.section(sec)
        if kind == "text" and isinstance(sect.get(key), (list, dict)):
            v = sect[key]
            yield finding(cfg, "C303", (sec, key), f"{sec}.{key} is a YAML {type(v).__name__}; hb_mapper 1.x turns "
                          f"it into the text {str(v)!r} (brackets and quotes included), which matches no input, "
                          "type or number: write the items as one string, ';' between inputs, spaces between "
                          "channels", {"key": key, "expected": "str"})
            continue
        if key not in sect or _type_ok(kind, sect[key]):
            continue
        v = sect[key]
        got = "nothing (an empty value)" if v is None else f"{v!r} ({type(v).__name__})"
        yield finding(cfg, "C303", (sec, key), f"{sec}.{key} must be {_TYPE_WORDS[kind]}, got {got}: hb_mapper's "
                      "schema refuses the config" + ("; quote it" if kind in ("str", "nonempty") and v is not None
                                                      and not isinstance(v, (list, dict)) else ""),
                      {"key": key, "expected": kind})


def hb_mapper_values(cfg: ConversionConfig) -> Iterator[Finding]:
    """C304 (1.x): the value checks of hb_mapper's own ``_validate_*`` methods not covered by the allowed sets."""
    mp, cc = cfg.section("model_parameters"), cfg.section("compiler_parameters")
    dm = mp.get("debug_mode")
    if dm and (isinstance(dm, dict) or (isinstance(dm, str) and dm not in S.HB_MAPPER_DEBUG_MODE)):
        yield finding(cfg, "C304", ("model_parameters", "debug_mode"), f"model_parameters.debug_mode {dm!r} is not "
                      f"one of {', '.join(S.HB_MAPPER_DEBUG_MODE)} (hb_mapper refuses it)", {"value": str(dm)})
    for key, suffix in (("onnx_model", ".onnx"), ("caffe_model", ".caffemodel"), ("prototxt", ".prototxt")):
        v = mp.get(key)
        if isinstance(v, str) and v.strip() and not v.endswith(suffix):
            yield finding(cfg, "C304", ("model_parameters", key), f"model_parameters.{key} {v!r} does not end with "
                          f"{suffix}: hb_mapper refuses it", {"value": v})
    for key in ("set_node_data_type", "node_info"):
        yield from _node_info(cfg, key, mp.get(key))
    cn = cc.get("core_num")
    if isinstance(cn, int) and cn not in S.HB_MAPPER_CORE_NUM:
        yield finding(cfg, "C304", ("compiler_parameters", "core_num"), f"compiler_parameters.core_num {cn} is not "
                      f"one of {', '.join(map(str, S.HB_MAPPER_CORE_NUM))}", {"value": cn})
    mt = cc.get("max_time_per_fc")
    if isinstance(mt, int) and mt and not 1000 <= mt <= 4294967295:
        yield finding(cfg, "C304", ("compiler_parameters", "max_time_per_fc"), f"compiler_parameters.max_time_per_fc "
                      f"{mt} must be 0 or 1000..4294967295 (microseconds)", {"value": mt})
    adv = cc.get("advice")
    if adv and not str(adv).isdigit():
        yield finding(cfg, "C304", ("compiler_parameters", "advice"), f"compiler_parameters.advice {adv!r} must be "
                      "a non-negative integer", {"value": adv})
    items = per_input_items(cfg, "input_parameters", "input_batch")
    items = [x for x in items if not is_unset(x)] if items != [] else []
    if items:
        march = cfg.march
        path = ("input_parameters", "input_batch")
        if len(items) != 1:
            yield finding(cfg, "C304", path, f"input_parameters.input_batch gives {len(items)} values; hb_mapper "
                          "takes one (for every input)", {"count": len(items)})
        elif not _is_int(items[0]):
            yield finding(cfg, "C304", path, f"input_parameters.input_batch {items[0]!r} is not an integer",
                          {"value": str(items[0])})
        else:
            b, top = int(str(items[0]).strip()), S.HB_MAPPER_BATCH.get(march or "", 4096)
            if not 1 <= b <= top:
                yield finding(cfg, "C304", path, f"input_parameters.input_batch {b} is outside 1..{top} "
                              f"({march or 'this march'})", {"value": b})
            shapes = [inp.shape for inp in cfg.inputs if inp.shape]
            if any(sh[0] != 1 for sh in shapes):
                yield finding(cfg, "C304", path, "input_parameters.input_batch needs input shapes whose first "
                              f"dimension is 1; input_shape has {', '.join('x'.join(map(str, sh)) for sh in shapes)}",
                              {"value": b})


def _node_info(cfg: ConversionConfig, key: str, v) -> Iterator[Finding]:
    """node_info / set_node_data_type as hb_mapper 1.x parses them (``__get_node_dict_by_str`` / ``_by_dict``)."""
    path = ("model_parameters", key)
    if isinstance(v, str) and v:
        if v.count(":") != 1:
            yield finding(cfg, "C304", path, f"model_parameters.{key} {v!r}: hb_mapper 1.x reads the string form as "
                          "one 'node:type' (it splits the whole string at ':'), so several nodes are refused; give "
                          "them as a mapping {node: {OutputType: int16}}", {"value": v})
            return
        dtype = v.split(":")[1].strip().rstrip(";").strip()
        if dtype not in S.NODE_DATA_TYPES:
            yield finding(cfg, "C304", path, f"model_parameters.{key} type {dtype!r} is not one of "
                          f"{', '.join(S.NODE_DATA_TYPES)}", {"value": dtype})
    elif isinstance(v, dict):
        for node, spec in v.items():
            if not isinstance(spec, dict):
                yield finding(cfg, "C304", path + (node,), f"model_parameters.{key}[{node!r}] must be a mapping "
                              "{ON: BPU|CPU, InputType<n>: int8|int16, OutputType: int8|int16}", {"node": str(node)})
                continue
            for k, val in spec.items():
                if isinstance(k, bool):
                    continue  # C303 names the YAML 1.1 boolean key
                ks = str(k)
                if ks != "ON" and ks != "OutputType" and not (ks.startswith("InputType") and
                                                               (ks[9:] == "" or ks[9:].isdigit())):
                    yield finding(cfg, "C304", path + (node,), f"model_parameters.{key}[{node!r}] key {ks!r} is not "
                                  "ON, OutputType or InputType<n>", {"node": str(node), "key": ks})
                elif ks == "ON" and val not in S.NODE_INFO_ON:
                    yield finding(cfg, "C304", path + (node,), f"model_parameters.{key}[{node!r}] ON {val!r} is not "
                                  f"one of {', '.join(S.NODE_INFO_ON)} (upper case)", {"node": str(node), "ON": val})
                elif ks != "ON" and (not isinstance(val, str) or val.strip() not in S.NODE_DATA_TYPES):
                    yield finding(cfg, "C304", path + (node,), f"model_parameters.{key}[{node!r}] {ks} {val!r} is not "
                                  f"one of {', '.join(S.NODE_DATA_TYPES)}", {"node": str(node), ks: str(val)})


def required_keys(ctx: AuditContext) -> Iterator[Finding]:
    """C318: keys the toolchain requires that the config lacks (hb_mapper 1.x's ``_validate_*`` methods; for both
    families, balance_factor with compile_mode balance)."""
    cfg, model = ctx.config, ctx.config_model
    if cfg is None:
        return

    def missing(path: tuple, why: str, ev: dict | None = None) -> Finding:
        return finding(cfg, "C318", path, why, {"key": path[-1], **(ev or {})})

    cc = cfg.section("compiler_parameters")
    if str(cc.get("compile_mode") or "").strip() == "balance" and cc.get("balance_factor") is None:
        yield missing(("compiler_parameters", "balance_factor"), "compile_mode is balance but balance_factor is not "
                      "given: the toolchain refuses the config (give balance_factor 0..100)")
    if cfg.family != "1.x":
        return
    for sec in S.HB_MAPPER_REQUIRED_SECTIONS:
        if sec not in cfg.data:
            yield missing((sec,), f"section {sec} is missing: hb_mapper's schema requires it")
    mp, ip, cp = (cfg.data.get(s) for s in ("model_parameters", "input_parameters", "calibration_parameters"))
    if isinstance(mp, dict):
        if "march" not in mp:
            yield missing(("model_parameters", "march"), "model_parameters.march is missing: hb_mapper requires it "
                          f"({', '.join(S.MARCH['1.x'])})")
        if not mp.get("onnx_model") and not mp.get("caffe_model"):
            yield missing(("model_parameters", "onnx_model"), "model_parameters.onnx_model (or caffe_model and prototxt) is "
                          "missing: hb_mapper has no model to convert")
    if isinstance(ip, dict):
        for key in ("input_type_rt", "input_type_train", "input_layout_train"):
            if is_unset(ip.get(key)):
                yield missing(("input_parameters", key), f"input_parameters.{key} is missing: hb_mapper requires it "
                              "for every input")
        rts = [str(x).strip() for x in split_per_input(ip.get("input_type_rt")) if not is_unset(x)]
        if is_unset(ip.get("input_layout_rt")) and any(rt != "nv12" for rt in rts):
            yield missing(("input_parameters", "input_layout_rt"), "input_parameters.input_layout_rt is missing: "
                          f"hb_mapper requires it for input_type_rt {', '.join(rt for rt in rts if rt != 'nv12')} "
                          "(only nv12 takes none)")
        if model is not None and len(model.inputs) > 1 and is_unset(ip.get("input_name")):
            yield missing(("input_parameters", "input_name"), f"input_parameters.input_name is missing but the model has "
                          f"{len(model.inputs)} inputs: hb_mapper requires the names to order the other keys")
        if model is not None and is_unset(ip.get("input_shape")):
            for name in model.inputs:
                t = model.tensors.get(name)
                dims = tuple(t.shape) if t is not None and t.shape is not None else ()
                if any(not isinstance(d, int) or d <= 0 for d in dims):
                    yield missing(("input_parameters", "input_shape"), f"input_parameters.input_shape is missing and model input "
                                  f"{name!r} has dynamic dims {list(dims)}: hb_mapper requires input_shape then",
                                  {"input": name})
                    break
    cal = cp if isinstance(cp, dict) else {}
    ctype = cal.get("calibration_type", "default")
    if ctype not in ("load", "skip") and is_unset(cal.get("cal_data_dir")) and "cal_data_dir" not in cal:
        yield missing(("calibration_parameters", "cal_data_dir"),
                      "calibration_parameters.cal_data_dir is missing: hb_mapper requires one directory per input "
                      f"with calibration_type {ctype!r} (only load and skip take none)")
    co = cfg.data.get("custom_op")
    if isinstance(co, dict) and co and co.get("custom_op_method") is None:
        yield missing(("custom_op", "custom_op_method"), "custom_op.custom_op_method is missing: hb_mapper requires it (register)")


def type_pairs(ctx: AuditContext) -> Iterator[Finding]:
    """C310: input_type_train -> input_type_rt pairs the toolchain cannot convert."""
    if (cfg := ctx.config) is None:
        return
    hb = cfg.family == "1.x"
    spaces = per_input_items(cfg, "input_parameters", "input_space_and_range")
    for inp in cfg.inputs:
        tr, rt = inp.type_train, inp.type_rt
        if hb:  # hb_mapper compares as written, after nv12 + bt601_video became yuv420sp_bt601_video
            raw_tr, raw_rt = (_raw(cfg, "input_type_train", inp.index), _raw(cfg, "input_type_rt", inp.index))
            if raw_tr not in S.HB_MAPPER_INPUT_TYPE_TRAIN or raw_rt not in S.HB_MAPPER_INPUT_TYPE_RT:
                continue
            sp = spaces[inp.index] if inp.index < len(spaces) else (spaces[0] if len(spaces) == 1 else None)
            tr, rt = raw_tr, ("yuv420sp_bt601_video" if raw_rt == "nv12" and str(sp).strip() == "bt601_video"
                              else raw_rt)
            lay = _raw(cfg, "input_layout_rt", inp.index)
            if rt in ("yuv444", "yuv444_128") and lay == "NCHW" and cfg.march == "bernoulli2":
                yield finding(cfg, "C310", _item_path(cfg, "input_parameters", "input_layout_rt", inp.index),
                              f"input {inp.index}: input_type_rt {rt} with input_layout_rt NCHW is not supported on "
                              "bernoulli2 (hb_mapper refuses it); use NHWC", {"rt": rt, "layout_rt": lay})
            if tr != rt and rt not in S.LEGAL_TYPE_PAIRS.get(tr, ()):
                legal = ", ".join((tr,) + S.LEGAL_TYPE_PAIRS.get(tr, ()))
                yield finding(cfg, "C310", _item_path(cfg, "input_parameters", "input_type_rt", inp.index),
                              f"input {inp.index}: input_type_train {tr!r} cannot run as input_type_rt {rt!r}; "
                              f"legal runtime types for {tr}: {legal}", {"train": tr, "rt": rt})
            continue
        if tr not in S.LEGAL_TYPE_PAIRS or rt not in S.INPUT_TYPE_RT or tr == rt:
            continue
        if rt not in S.LEGAL_TYPE_PAIRS[tr]:
            legal = ", ".join((tr,) + S.LEGAL_TYPE_PAIRS[tr])
            yield finding(cfg, "C310", _item_path(cfg, "input_parameters", "input_type_rt", inp.index),
                          f"input {inp.index}: input_type_train {tr!r} cannot run as input_type_rt {rt!r}; "
                          f"legal runtime types for {tr}: {legal}", {"train": tr, "rt": rt})


def _raw(cfg: ConversionConfig, key: str, i: int) -> str | None:
    """Per-input item ``i`` of an input_parameters key as written (stripped), the single value for every input."""
    items = per_input_items(cfg, "input_parameters", key)
    v = items[i] if i < len(items) else (items[0] if len(items) == 1 else None)
    return None if is_unset(v) or isinstance(v, (dict, list)) else str(v).strip()
