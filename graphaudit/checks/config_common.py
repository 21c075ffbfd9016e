"""Helpers shared by the config rules: findings located at a config key, the model input an entry means, shapes."""

from __future__ import annotations

from typing import Any, Iterator

from ..config.parse import ConfigInput, ConversionConfig, is_unset, split_per_input
from ..config.schema import IMAGE_TYPES
from ..findings import Finding
from ..stage import StageGraph
from .base import make_finding

__all__ = ["finding", "model_input", "effective_shape", "static_shape", "channel_count", "per_input_items", "fmt",
           "is_image", "effective_normalization", "iter_inputs", "nontrivial", "unset", "COLOURS", "colour"]


def finding(cfg: ConversionConfig, code: str, key_path: tuple, message: str, evidence: dict | None = None,
            severity: str | None = None) -> Finding:
    """A :class:`Finding` of rule ``code`` located at ``key_path`` of the config (file, 1-based line/col, dotted key);
    ``severity`` overrides the rule's (a rule's example states it)."""
    line, col = cfg.position(key_path)
    key = ".".join(str(k) for k in key_path)
    return make_finding(code, message, location={"file": cfg.path, "line": line, "col": col, "key": key},
                        evidence=evidence or {}, severity=severity)


def fmt(values: list[float] | None) -> str:
    """``[0.485, 0.456]`` -> ``"0.485 0.456"`` (``"-"`` for None)."""
    return "-" if values is None else " ".join(f"{v:.6g}" for v in values)


def is_image(inp: ConfigInput) -> bool:
    """True when the input carries pixels (a Horizon image type, not featuremap) in training."""
    return inp.type_train in IMAGE_TYPES


def per_input_items(cfg: ConversionConfig, section: str, key: str) -> list[Any]:
    """The ';'-separated (or YAML list) items of a per-input key."""
    return split_per_input(cfg.get(section, key))


def model_input(model: StageGraph | None, inp: ConfigInput, n_inputs: int) -> tuple[str, tuple | None] | None:
    """(name, shape) of the model input that config input ``inp`` describes, or None.

    By ``input_name`` when given, else by position when the model has exactly ``n_inputs`` inputs.
    Shapes as :class:`graphaudit.stage.TensorInfo` gives them (ints, symbols, None).
    """
    if model is None:
        return None
    if inp.name:
        if inp.name not in model.inputs:
            return None
        name = inp.name
    elif len(model.inputs) == n_inputs and inp.index < len(model.inputs):
        name = model.inputs[inp.index]
    else:
        return None
    t = model.tensors.get(name)
    return name, (tuple(t.shape) if t is not None and t.shape is not None else None)


def effective_shape(inp: ConfigInput, model: StageGraph | None, n_inputs: int) -> tuple[int | None, ...] | None:
    """``input_shape`` when given, else the model input's shape (symbolic or unknown dims as ``None``)."""
    if inp.shape is not None:
        return inp.shape
    mi = model_input(model, inp, n_inputs)
    if mi is None or mi[1] is None:
        return None
    return tuple(d if isinstance(d, int) and d > 0 else None for d in mi[1])


def static_shape(shape: tuple | None) -> tuple[int, ...] | None:
    """``shape`` when every dim is a known int, else None."""
    return shape if shape is not None and all(isinstance(d, int) and d > 0 for d in shape) else None


def channel_count(inp: ConfigInput, shape: tuple | None) -> int | None:
    """C of a 4-D shape under ``input_layout_train`` (NCHW: dim 1, NHWC: dim 3); None when it cannot be told."""
    if shape is None or len(shape) != 4:
        return None
    if inp.layout_train == "NCHW":
        c = shape[1]
    elif inp.layout_train == "NHWC":
        c = shape[3]
    else:
        return None
    return c if isinstance(c, int) and c > 0 else None


def effective_normalization(cfg: ConversionConfig, inp: ConfigInput) -> tuple[list[float] | None, list[float] | None]:
    """(mean, scale) the toolchain applies to this input, in the 0..255 pixel domain.

    1.x applies ``mean_value`` only when ``norm_type`` is data_mean or data_mean_and_scale and ``scale_value``
    only for data_scale or data_mean_and_scale (docs/INPUT_CONTRACTS.md section 2, docs/CASES.md case 1); 3.x applies whatever
    is present (``scale = 1/std`` for ``std_value``). None = not applied.
    """
    mean, scale = inp.mean, inp.scale
    if cfg.family == "1.x":
        nt = inp.norm_type or ""
        mean = mean if nt in ("data_mean", "data_mean_and_scale") else None
        scale = scale if nt in ("data_scale", "data_mean_and_scale") else None
        if inp.std is not None and cfg.get("input_parameters", "scale_value") is None:
            scale = None  # 1.x has no std_value
    return mean, scale


def iter_inputs(cfg: ConversionConfig) -> Iterator[ConfigInput]:
    """The config's inputs (at least one)."""
    return iter(cfg.inputs)


def nontrivial(values: list[float] | None, neutral: float) -> bool:
    """True when values are given and not all equal to the neutral element (0 for mean, 1 for scale)."""
    return values is not None and any(abs(v - neutral) > 1e-12 for v in values)


def unset(v: Any) -> bool:
    """Re-export of :func:`graphaudit.config.parse.is_unset`."""
    return is_unset(v)


#: Colour orders an HzPreprocess ``input_type`` (``RGB_128``, ``BGR_128``, ``GRAY_128``, ``YUV444_128``: what the
#: float stages take, the training type) and a config's ``input_type_train`` (rgb, bgr, gray, yuv444) name alike.
COLOURS = ("RGB", "BGR", "GRAY", "YUV444")


def colour(text: str | None) -> str | None:
    """The colour order ``text`` names (one of :data:`COLOURS`), or None (featuremap, nv12, absent)."""
    t = (text or "").upper()
    t = t[:-4] if t.endswith("_128") else t
    return t if t in COLOURS else None
