"""Input contracts: what each stage's graph inputs expect, and how to convert one sample between stages.

Facts (docs/INPUT_CONTRACTS.md section 1): hb_mapper 1.x stage models with an ``HzPreprocess`` take the
intermediate ``*_128`` type (pixel value minus 128, float32, in ``input_layout_train``) and normalize
inside the model with ``((x + 128) - mean) * scale``; the user's source float model takes the
normalized value itself; onnxruntime QDQ stages take what their float model takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..stage import StageGraph
from .horizon import decode_hzpreprocess
from .valuedomain import PixelDomain

__all__ = ["InputContract", "stage_contracts", "pipeline_normalization", "convert_sample", "pixel_domain",
           "CONTRACT_DOMAINS"]

#: ``x128``: Horizon *_128 values (pixel - 128) normalized inside the model by HzPreprocess;
#: ``float``: the model's own float values (already normalized by the caller);
#: ``pixels``: raw 0..255 image values (only as a data domain, never a stage's).
CONTRACT_DOMAINS = ("x128", "float", "pixels")

_NP = {"FLOAT": np.float32, "FLOAT16": np.float16, "DOUBLE": np.float64, "UINT8": np.uint8, "INT8": np.int8,
       "INT32": np.int32, "INT64": np.int64, "UINT16": np.uint16, "INT16": np.int16, "BOOL": np.bool_}


@dataclass
class InputContract:
    """What one graph input of one stage takes.

    ``mean``/``scale`` (per channel, 0..255 domain) and ``color`` ("RGB"/"BGR"/"") come from the
    stage's decoded HzPreprocess when ``domain == "x128"``; ``layout`` is ``"NCHW"`` or ``"NHWC"``
    for rank-4 inputs (from HzPreprocess ``data_format``; else from the ops that read the input: a
    channel-first op such as Conv, or a Transpose to NCHW; else declared by the conversion config's
    ``input_layout_train``; else from the position of a dim of size 1, 3 or 4), ``""`` otherwise.
    ``layout_source``/``color_source`` say where each came from; ``node`` is the HzPreprocess node id;
    ``in_model`` describes the preprocessing the model performs itself (one string per op).
    """

    stage: str
    name: str
    dtype: str
    shape: tuple | None
    domain: str
    layout: str = ""
    mean: list[float] | None = None
    scale: list[float] | None = None
    color: str = ""
    in_model: list[str] = field(default_factory=list)
    layout_source: str = ""
    color_source: str = ""
    node: str = ""
    ops: list[tuple[str, list[float] | None]] = field(default_factory=list)

    def normalization(self) -> tuple[list[float], list[float]] | None:
        """The model's own ``(mean, std)`` per channel, in the units of the input: from HzPreprocess
        (0..255 domain, std = 1/scale), or from the first leading Sub/Add and Div/Mul by constants
        (``(x - mean) / std``; Add by c is mean -c, Mul by c is std 1/c); ``None`` when it does neither."""
        if self.domain == "x128" and self.mean and self.scale:
            return list(self.mean), [1.0 / s if s else float("inf") for s in self.scale]
        mean = std = None
        for op, vals in self.ops:
            if vals is None or not op:
                continue
            if op in ("Sub", "Add") and mean is None and std is None:
                mean = vals if op == "Sub" else [-v for v in vals]
            elif op in ("Div", "Mul") and std is None:
                std = vals if op == "Div" else [1.0 / v if v else float("inf") for v in vals]
        if mean is None and std is None:
            return None
        return mean or [0.0], std or [1.0]

    @property
    def normalizes(self) -> bool:
        """True when the model itself normalizes this input (HzPreprocess, or leading Sub/Div/Mul/Add by constants)."""
        return self.domain == "x128" or any(s.split()[0] in ("Sub", "Div", "Mul", "Add") for s in self.in_model)

    @property
    def value_domain(self) -> str:
        """The values the input takes, in words: Horizon ``*_128`` (pixel - 128), raw integer pixels, values the
        model normalizes itself, normalized floats (the caller normalizes), or a featuremap (docs/INPUT_CONTRACTS.md section 1)."""
        if self.domain == "x128":
            return "*_128: pixel - 128 in [-128, 127] (HzPreprocess normalizes)"
        image = bool(self.layout) and self.shape is not None and len(self.shape) == 4
        if self.dtype in ("UINT8", "INT8"):
            kind = "raw uint8 pixels 0..255" if self.dtype == "UINT8" else "int8 values"
            return kind + (" (the model normalizes)" if self.normalizes else "")
        if image and self.normalizes:
            return "image values the model normalizes itself (" + "; ".join(self.in_model) + ")"
        if image:
            return "normalized float image (the caller normalizes)"
        return "featuremap"

    @property
    def channel_axis(self) -> int | None:
        return {"NCHW": 1, "NHWC": 3}.get(self.layout)


def _guess_layout(shape: tuple | None) -> str:
    if shape is None or len(shape) != 4:
        return ""
    if isinstance(shape[1], int) and shape[1] in (1, 3, 4) and not (isinstance(shape[3], int) and shape[3] in (1, 3, 4)):
        return "NCHW"
    if isinstance(shape[3], int) and shape[3] in (1, 3, 4) and not (isinstance(shape[1], int) and shape[1] in (1, 3, 4)):
        return "NHWC"
    return "NCHW" if isinstance(shape[1], int) and shape[1] in (1, 3, 4) else ""


_ELEMENTWISE = ("Sub", "Div", "Mul", "Add")


def _leading_ops(stage: StageGraph, name: str) -> list[tuple[str, str, list[float] | None]]:
    """Preprocessing a model performs right after a graph input: a chain of single consumers that are
    Cast, a layout Transpose, or Sub/Div/Mul/Add with a constant operand. A constant holding NaN or infinite values
    (an attention mask's -inf) ends the chain: no mean or std is infinite, so that op is no normalization.

    Returns ``(description, op_type, constant values or None)`` per op (descriptions show values rounded).
    """
    out: list[tuple[str, str, list[float] | None]] = []
    cur = name
    for _ in range(8):
        cons = stage.tensors[cur].consumers if cur in stage.tensors else []
        if len(cons) != 1:
            break
        n = stage.nodes[cons[0][0]]
        if n.op_type == "Cast":
            out.append((f"Cast from {stage.tensors[cur].dtype or '?'}", "Cast", None))
        elif n.op_type == "Transpose":
            out.append((f"Transpose perm={n.attributes.get('perm')}", "Transpose", None))
        elif n.op_type in _ELEMENTWISE and len(n.inputs) == 2:
            other = n.inputs[1 - cons[0][1]]
            t = stage.tensors.get(other)
            if t is None or not t.is_param:
                break
            v = t.value()
            if v is not None and not np.all(np.isfinite(np.asarray(v, np.float64))):
                break
            vals = [float(x) for x in np.asarray(v, np.float64).ravel()[:64]] if v is not None else None
            shown = ", ".join(f"{x:.4g}" for x in vals[:4]) if vals is not None else "?"
            # Sub/Div by a constant first operand (c - x, c / x) is not a normalization step
            first = cons[0][1] == 0
            out.append((f"{n.op_type} [{shown}]", n.op_type if first or n.op_type in ("Add", "Mul") else "", vals))
        elif n.op_type == "HzPreprocess":
            break
        else:
            break
        if not n.outputs or not n.outputs[0]:
            break
        cur = n.outputs[0]
    return out


#: Ops whose rank-4 data input is channel-first by the ONNX operator spec (X: N x C x H x W).
_CHANNEL_FIRST = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "BatchNormalization", "InstanceNormalization",
                  "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool",
                  "SpaceToDepth", "DepthToSpace"}
#: Ops looked through on the way from a graph input to the op that tells its layout.
_PASS_THROUGH = {"Cast", "Sub", "Div", "Mul", "Add", "Identity", "QuantizeLinear", "DequantizeLinear", "HzCalibration"}


def _consumer_layout(stage: StageGraph, name: str) -> tuple[str, str]:
    """Layout of a rank-4 graph input told by the ops that read it: ``("NCHW", "Conv consumer")`` when every
    path (through Cast, elementwise constants, Q/DQ and HzCalibration) reaches a channel-first op, ``("NHWC",
    ...)`` when it reaches a Transpose with perm [0, 3, 1, 2] (and NCHW for perm [0, 2, 3, 1]); ``("", "")``
    when the consumers do not say or disagree."""
    verdicts: set[tuple[str, str]] = set()
    frontier, seen = [name], {name}
    for _ in range(8):
        nxt = []
        for cur in frontier:
            for node_id, _slot in (stage.tensors[cur].consumers if cur in stage.tensors else []):
                n = stage.nodes[node_id]
                if n.op_type in _PASS_THROUGH and n.outputs and n.outputs[0] and n.outputs[0] not in seen:
                    seen.add(n.outputs[0])
                    nxt.append(n.outputs[0])
                elif n.op_type in _CHANNEL_FIRST:
                    verdicts.add(("NCHW", f"{n.op_type} consumer"))
                elif n.op_type == "Transpose" and list(n.attributes.get("perm") or []) in ([0, 3, 1, 2], [0, 2, 3, 1]):
                    perm = list(n.attributes["perm"])
                    verdicts.add(("NHWC" if perm == [0, 3, 1, 2] else "NCHW", f"Transpose perm={perm} consumer"))
                else:
                    verdicts.add(("", ""))
        frontier = nxt
        if not frontier:
            break
    layouts = {v[0] for v in verdicts}
    if len(layouts) == 1 and "" not in layouts:
        return sorted(verdicts)[0]
    return "", ""


def _config_inputs(stage: StageGraph, config) -> dict[str, object]:
    """Graph input name -> the conversion config's entry for it (by name; a single input matches a single one)."""
    if config is None or not getattr(config, "inputs", None):
        return {}
    by_name = {ci.name: ci for ci in config.inputs if ci.name}
    out = {n: by_name[n] for n in stage.inputs if n in by_name}
    if not out and len(config.inputs) == 1 and len(stage.inputs) == 1:
        out[stage.inputs[0]] = config.inputs[0]
    return out


def _declare(ic: InputContract, ci, role: str, config) -> None:
    """Apply what the conversion config declares (docs/INPUT_CONTRACTS.md section 1): the train layout holds for every ONNX
    stage but the 1.x quantized one (int8 NHWC); rgb/bgr train types give the colour order."""
    where = getattr(config, "path", "") or "config"
    layout = (getattr(ci, "layout_train", None) or "").upper()
    if layout in ("NCHW", "NHWC") and role != "quantized" and ic.layout_source in ("", "shape") \
            and ic.shape is not None and len(ic.shape) == 4:
        ic.layout, ic.layout_source = layout, f"input_layout_train {layout} in {where}"
    train = (getattr(ci, "type_train", None) or "").lower()
    if train in ("rgb", "bgr") and not ic.color:
        ic.color, ic.color_source = train.upper(), f"input_type_train {train} in {where}"


def _fixed_point_preprocess(stage: StageGraph, name: str):
    """``(node, layout, layout source)`` when graph input ``name`` feeds Horizon's HzSQuantizedPreprocess (the 1.x
    fixed-point stage), directly or through one layout Transpose; else None.

    The input then holds int8 ``pixel - 128`` (docs/INPUT_CONTRACTS.md section 1). Its layout is the tensor's own: the
    fixed-point ops compute in NHWC, so a direct consumer means NHWC and a Transpose perm [0, 2, 3, 1] in front
    of it means NCHW (bayes-e keeps the NCHW input and transposes inside)."""
    for node_id, _slot in stage.tensors[name].consumers if name in stage.tensors else []:
        n = stage.nodes[node_id]
        if n.op_type == "HzSQuantizedPreprocess":
            return n, "NHWC", "HzSQuantizedPreprocess reads it (the fixed-point ops compute in NHWC)"
        if n.op_type == "Transpose" and n.outputs and list(n.attributes.get("perm") or []) == [0, 2, 3, 1]:
            for c, _s in stage.tensors[n.outputs[0]].consumers if n.outputs[0] in stage.tensors else []:
                if stage.nodes[c].op_type == "HzSQuantizedPreprocess":
                    return stage.nodes[c], "NCHW", "Transpose perm=[0, 2, 3, 1] into HzSQuantizedPreprocess"
    return None


def stage_contracts(stage: StageGraph, config=None) -> dict[str, InputContract]:
    """Contract of every graph input of a stage (graph input name -> :class:`InputContract`).

    Parameters
    ----------
    stage : StageGraph
    config : graphaudit.config.ConversionConfig, optional
        The conversion YAML: its ``input_layout_train`` and ``input_type_train`` declare layout and
        colour order where the model itself (HzPreprocess) does not say.
    """
    pre = {}
    for n in stage.nodes.values():
        if n.op_type == "HzPreprocess":
            info = decode_hzpreprocess(stage, n)
            if info is not None:
                pre[info.input] = info
    out = {}
    for name in stage.inputs:
        t = stage.tensors[name]
        info = pre.get(name)
        if info is not None:
            color = "BGR" if info.input_type.upper().startswith("BGR") else ("RGB" if info.input_type else "")
            mean = ", ".join(f"{x:.4g}" for x in info.mean)
            scale = ", ".join(f"{x:.4g}" for x in info.scale)
            out[name] = InputContract(stage.name, name, t.dtype, t.shape, "x128", info.data_format.upper(), info.mean,
                                      info.scale, color, [f"HzPreprocess mean [{mean}] scale [{scale}]"],
                                      layout_source="HzPreprocess data_format",
                                      color_source=f"HzPreprocess input_type {info.input_type}" if color else "",
                                      node=info.node)
        elif (fixed := _fixed_point_preprocess(stage, name)) is not None:
            node, layout, source = fixed
            itype = str(node.attributes.get("input_type", ""))
            color = "BGR" if itype.upper().startswith("BGR") else ("RGB" if itype.upper().startswith("RGB") else "")
            out[name] = InputContract(stage.name, name, t.dtype, t.shape, "x128", layout, None, None, color,
                                      [f"HzSQuantizedPreprocess (fixed point, input_type {itype})"],
                                      layout_source=source,
                                      color_source=f"HzSQuantizedPreprocess input_type {itype}" if color else "",
                                      node=node.id)
        else:
            layout, source = _consumer_layout(stage, name) if t.shape is not None and len(t.shape) == 4 else ("", "")
            if not layout:
                layout = _guess_layout(t.shape)
                source = "shape" if layout else ""
            ops = _leading_ops(stage, name)
            out[name] = InputContract(stage.name, name, t.dtype, t.shape, "float", layout,
                                      in_model=[d for d, _, _ in ops], layout_source=source,
                                      ops=[(op, v) for _, op, v in ops])
    for name, ci in _config_inputs(stage, config).items():
        _declare(out[name], ci, stage.role, config)
    return out


def pipeline_normalization(contracts: list[dict[str, InputContract]]) -> dict[str, InputContract]:
    """Per input name, the first contract in the pipeline that knows mean/scale (an HzPreprocess)."""
    out: dict[str, InputContract] = {}
    for c in contracts:
        for name, ic in c.items():
            if ic.mean is not None and name not in out:
                out[name] = ic
    return out


def pixel_domain(ic: InputContract, norm: InputContract | None = None) -> PixelDomain | None:
    """The pixel domain of a Horizon ``*_128`` input (:class:`graphaudit.toolchains.valuedomain.PixelDomain`):
    ``pixel - 128``, normalized by the mean/scale of its own HzPreprocess, else of ``norm`` (the pipeline's
    HzPreprocess, for the fixed-point stage's HzSQuantizedPreprocess); None for any other input."""
    if ic.domain != "x128":
        return None
    src = ic if ic.mean and ic.scale else norm
    mean = tuple(src.mean) if src is not None and src.mean else (0.0,)
    scale = tuple(src.scale) if src is not None and src.scale else (1.0,)
    return PixelDomain(-128.0, mean, scale, "pixel - 128 in [-128, 127]")


def _per_channel(v: list[float], ndim: int, axis: int) -> np.ndarray:
    arr = np.asarray(v, dtype=np.float64)
    shape = [1] * ndim
    shape[axis] = arr.size
    return arr.reshape(shape)


def _to_layout(x: np.ndarray, src_layout: str, dst: InputContract) -> np.ndarray:
    if x.ndim != 4 or not dst.layout or not src_layout or src_layout == dst.layout:
        return x
    return np.transpose(x, (0, 2, 3, 1) if dst.layout == "NHWC" else (0, 3, 1, 2))


def convert_sample(x: np.ndarray, src: InputContract | str, dst: InputContract, norm: InputContract | None,
                   src_layout: str | None = None) -> np.ndarray:
    """Convert one input array from the source contract (or data domain) to the destination contract.

    Parameters
    ----------
    x : ndarray
        Data in ``src``'s domain and layout (``"pixels"``: uint8 RGB images, NHWC [N,H,W,3]).
    src : InputContract or "pixels"
    dst : InputContract
    norm : InputContract or None
        The contract carrying mean/scale (HzPreprocess) for this input, needed to cross between
        ``x128``/``pixels`` and ``float``.
    src_layout : str, optional
        Layout of ``x`` when ``src`` is a string domain.

    Returns
    -------
    ndarray of ``dst``'s dtype, layout and domain.

    Raises
    ------
    ValueError
        Crossing into or out of ``float`` with no known mean/scale.

    Formulas: x128 -> float: ((x + 128) - mean) * scale; float -> x128: x / scale + mean - 128;
    pixels -> x128: p - 128 (docs/INPUT_CONTRACTS.md sections 1 and 2).
    """
    src_domain = src if isinstance(src, str) else src.domain
    given = src_domain
    layout = (src_layout or "NHWC") if isinstance(src, str) else src.layout
    v = np.asarray(x, dtype=np.float64)
    if src_domain == "pixels":
        v = _to_layout(v, "NHWC", dst)
        layout = dst.layout or layout
        color = dst.color or (norm.color if norm else "")
        if color == "BGR" and dst.channel_axis is not None:
            v = np.flip(v, axis=dst.channel_axis)
        v = v - 128.0
        src_domain = "x128"
    else:
        v = _to_layout(v, layout, dst)
    axis = dst.channel_axis if dst.channel_axis is not None else 1
    if src_domain != dst.domain:
        if norm is None or norm.mean is None or norm.scale is None or v.ndim <= axis:
            if given == "pixels":
                raise ValueError(f"input {dst.name!r}: images are decoded to pixels, and no HzPreprocess in the "
                                 f"pipeline tells how to normalize them for {dst.stage}; give normalized tensors "
                                 "(.npy) instead")
            raise ValueError(f"input {dst.name!r}: no HzPreprocess in the pipeline tells how to convert "
                             f"{src_domain} data to the {dst.domain} values that {dst.stage} takes")
        mean = _per_channel(norm.mean, v.ndim, axis)
        scale = _per_channel(norm.scale, v.ndim, axis)
        if src_domain == "x128" and dst.domain == "float":
            v = (v + 128.0 - mean) * scale
        elif src_domain == "float" and dst.domain == "x128":
            v = v / scale + mean - 128.0
    return v.astype(_NP.get(dst.dtype, np.float32))
