"""Value heuristics C330-C332: normalization values from a [0, 1] pipeline, ImageNet channel order, names that contradict.

Each rule is a function ``(AuditContext) -> Iterator[Finding]`` over ``ctx.config`` (nothing without one), listed in
:data:`graphaudit.checks.table.RULES`.
"""

from __future__ import annotations

import re
from typing import Iterator

from ..config.parse import ConversionConfig
from ..findings import Finding
from .base import AuditContext
from .config_common import effective_normalization, finding, fmt, is_image, model_input, nontrivial
from .config_schema import n_inputs

__all__ = ["unit_range_normalization", "imagenet_channel_order", "name_tokens", "scale_only_range",
           "IMAGENET_MEAN_RGB", "IMAGENET_STD_RGB"]

#: ImageNet statistics in RGB order, 0..255 domain (torchvision: 255 * (0.485, 0.456, 0.406), 255 * (0.229, 0.224, 0.225)).
IMAGENET_MEAN_RGB = (123.675, 116.28, 103.53)
IMAGENET_STD_RGB = (58.395, 57.12, 57.375)


def _path(cfg: ConversionConfig, key: str, i: int) -> tuple:
    return ("input_parameters", key, i) if ("input_parameters", key, i) in cfg.positions else ("input_parameters", key)


def unit_range_normalization(ctx: AuditContext) -> Iterator[Finding]:
    """C330 (docs/CASES.md case 6): image input whose mean values are all below 1.0, or std below 1.0.

    The converter normalizes 0..255 pixels (docs/INPUT_CONTRACTS.md section 2: ``mean_yaml = 255 * mean``,
    ``scale_yaml = 1 / (255 * std)``); values of a [0, 1] training pipeline are off by a factor 255.
    """
    if (cfg := ctx.config) is None:
        return
    for inp in cfg.inputs:
        if not is_image(inp):
            continue
        mean_unit = inp.mean is not None and max(inp.mean) < 1.0 and max(inp.mean) > 0.0
        std_unit = inp.std is not None and min(inp.std) > 0.0 and max(inp.std) < 1.0  # a zero std: C3xx's own error
        scale_given = cfg.get("input_parameters", "scale_value") is not None and inp.std is None
        scale_unit = mean_unit and scale_given and inp.scale is not None and min(inp.scale) > 1.0
        if not (mean_unit or std_unit or scale_unit):
            continue
        std = inp.std if inp.std is not None else ([1.0 / s for s in inp.scale] if scale_unit else None)
        parts, fixes = [], []
        if mean_unit:
            parts.append(f"mean_value {fmt(inp.mean)} is below 1.0")
            fixes.append(f"mean_value {fmt([255.0 * m for m in inp.mean])}")
        if std_unit:
            parts.append(f"std_value {fmt(inp.std)} is below 1.0")
        if scale_unit:
            parts.append(f"scale_value {fmt(inp.scale)} is above 1.0 (std {fmt(std)})")
        if std is not None and (std_unit or scale_unit) and min(std) > 0.0:
            fixes.append(f"scale_value {fmt([1.0 / (255.0 * s) for s in std])}")
        key = "mean_value" if mean_unit else "std_value" if std_unit else "scale_value"
        yield finding(cfg, "C330", _path(cfg, key, inp.index),
                      f"input {inp.index} ({inp.type_train} -> {inp.type_rt}): " + " and ".join(parts) +
                      ": values of a [0, 1] training pipeline, while the converter works on 0..255 pixels; use " +
                      ", ".join(fixes), {"input": inp.index, "mean": inp.mean, "std": std})


def _close(a: list[float] | None, b: tuple[float, ...], tol: float) -> bool:
    return a is not None and len(a) == 3 and all(abs(x - y) <= tol * max(abs(y), 1e-9) for x, y in zip(a, b))


def imagenet_channel_order(ctx: AuditContext) -> Iterator[Finding]:
    """C331: ImageNet mean in RGB order with input_type_train bgr, or in BGR order with rgb (docs/HORIZON.md section 4)."""
    if (cfg := ctx.config) is None:
        return
    for inp in cfg.inputs:
        if inp.type_train not in ("rgb", "bgr") or inp.mean is None:
            continue
        for unit in (1.0, 1.0 / 255.0):
            rgb = tuple(v * unit for v in IMAGENET_MEAN_RGB)
            bgr = rgb[::-1]
            order = "RGB" if _close(inp.mean, rgb, 0.01) else "BGR" if _close(inp.mean, bgr, 0.01) else None
            if order and order.lower() != inp.type_train:
                yield finding(cfg, "C331", _path(cfg, "mean_value", inp.index),
                              f"input {inp.index}: mean_value {fmt(inp.mean)} is the ImageNet mean in {order} order "
                              f"but input_type_train is {inp.type_train!r}: the red and blue means are swapped "
                              "(unless the model was trained with this mismatch)",
                              {"input": inp.index, "mean_order": order, "type_train": inp.type_train})
                break


_TYPE_TOKENS = ("nv12", "rgb", "bgr", "yuv444", "gray", "featuremap")
_LAYOUT_TOKENS = ("nchw", "nhwc")


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", text.lower()) if t]


def name_tokens(ctx: AuditContext) -> Iterator[Finding]:
    """C332 (docs/CASES.md case 2): a token of output_model_file_prefix / working_dir contradicting input types or layout.

    Type tokens (nv12, rgb, bgr, yuv444, gray, featuremap) must name an input's input_type_rt or input_type_train;
    rgb/bgr/gray/yuv444 are also accepted for featuremap inputs (image tensors fed as featuremap). Layout tokens
    (nchw, nhwc) must name an input's input_layout_rt or input_layout_train.
    """
    if (cfg := ctx.config) is None:
        return
    types = {t for inp in cfg.inputs for t in (inp.type_rt, inp.type_train) if t}
    if any("featuremap" in (inp.type_rt, inp.type_train) for inp in cfg.inputs):
        types |= {"rgb", "bgr", "gray", "yuv444"}
    layouts = {x.lower() for inp in cfg.inputs for x in (inp.layout_rt, inp.layout_train) if x}
    for key in ("output_model_file_prefix", "working_dir"):
        v = cfg.get("model_parameters", key)
        if not isinstance(v, str) or not v.strip():
            continue
        toks = _tokens(v.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] if key == "working_dir" else v)
        bad = [t for t in toks if (t in _TYPE_TOKENS and types and t not in types)
               or (t in _LAYOUT_TOKENS and layouts and t not in layouts)]
        if bad:
            rt = "/".join(sorted({inp.type_rt for inp in cfg.inputs if inp.type_rt})) or "-"
            lay = "/".join(sorted(layouts)).upper() or "-"
            yield finding(cfg, "C332", ("model_parameters", key),
                          f"{key} {v!r} says {', '.join(bad)} but input_type_rt is {rt}"
                          + (f" (layout {lay})" if lay != "-" else "") + ": copied from "
                          "another build? artifacts get mislabelled and can overwrite that build's files",
                          {"key": key, "tokens": bad, "type_rt": rt, "layout": lay})


#: A scale-only normalization whose result stays within [0, UNIT_TOLERANCE] is a [0, 1] pipeline (scale 1/255).
UNIT_TOLERANCE = 1.05


def _model_centres(model, name: str | None) -> bool:
    """True when the model's input feeds an Add or Sub first (possibly through a Transpose): the model centres its
    input itself (MTCNN's ``input_norm`` graphs add -1 after a scale of 1/127.5)."""
    if model is None or name is None:
        return False
    frontier = {name}
    for _ in range(2):
        users = [n for n in model.nodes.values() if frontier & set(n.inputs)]
        if any(n.op_type in ("Add", "Sub") for n in users):
            return True
        frontier = {o for n in users if n.op_type in ("Transpose", "Cast", "Reshape") for o in n.outputs}
        if not frontier:
            return False
    return False


def scale_only_range(ctx: AuditContext) -> Iterator[Finding]:
    """C333: an image input normalized by a scale alone (no mean) into a range that is neither [0, 1] nor centred.

    The device feeds pixels 0..255; with ``data_scale`` (1.x) or a scale/std without a mean (3.x) the model sees
    ``[0, 255 * scale]``. Scale 1/255 gives [0, 1]; scale 1/128 gives [0, 1.99]: the value range of a [-1, 1]
    model shifted by +1 (its mean 128 was dropped), unless the model subtracts it itself (checked with the model).
    """
    if (cfg := ctx.config) is None:
        return
    model = ctx.config_model
    n = n_inputs(cfg, model)
    for inp in cfg.inputs:
        if not is_image(inp):
            continue
        mean, scale = effective_normalization(cfg, inp)
        if nontrivial(mean, 0.0) or scale is None or not scale or min(scale) <= 0:
            continue
        top = [255.0 * s for s in scale]
        if max(top) <= UNIT_TOLERANCE:
            continue
        mi = model_input(model, inp, n)
        if _model_centres(model, mi[0] if mi else None):
            continue
        lo_hi = ", ".join(f"[0, {t:.4g}]" for t in top) if len(set(round(t, 6) for t in top)) > 1 else f"[0, {top[0]:.4g}]"
        centred = 127.5  # (p - m) * s spans [-m s, (255 - m) s]: centred on 0 for m = 255 / 2, whatever s
        key = "std_value" if inp.std is not None and cfg.get("input_parameters", "scale_value") is None else \
            "scale_value"
        hint = (f"; a model trained on [-1, 1] needs mean_value {centred:.6g} (or 128) as well"
                + (" (norm_type data_mean_and_scale)" if cfg.family == "1.x" else "")
                if 1.5 <= max(top) <= 2.6 else "; a mean_value is missing, or the model was trained on this range")
        yield finding(cfg, "C333", _path(cfg, key, inp.index),
                      f"input {inp.index} ({inp.type_train}): scale {fmt(scale)} without a mean maps pixels 0..255 "
                      f"to {lo_hi}, a range that is neither [0, 1] nor centred on 0{hint}",
                      {"input": inp.index, "scale": scale, "range": [0.0, max(top)], "centring_mean": centred})
