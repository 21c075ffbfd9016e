"""Input contracts: what each stage's graph inputs expect, and how to convert one sample between stages.

Facts (HORIZON.md section 2): hb_mapper 1.x stage models with an ``HzPreprocess`` take the
intermediate ``*_128`` type (pixel value minus 128, float32, in ``input_layout_train``) and normalize
inside the model with ``((x + 128) - mean) * scale``; the user's source float model takes the
normalized value itself; onnxruntime QDQ stages take what their float model takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..stage import StageGraph
from .horizon import decode_hzpreprocess

__all__ = ["InputContract", "stage_contracts", "pipeline_normalization", "convert_sample", "CONTRACT_DOMAINS"]

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
    for rank-4 inputs (from HzPreprocess ``data_format``, else from the position of a dim of size
    1, 3 or 4), ``""`` otherwise.
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

    @property
    def normalizes(self) -> bool:
        """True when the model itself normalizes this input (HzPreprocess, or leading Sub/Div/Mul/Add by constants)."""
        return self.domain == "x128" or any(s.split()[0] in ("Sub", "Div", "Mul", "Add") for s in self.in_model)

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


def _leading_ops(stage: StageGraph, name: str) -> list[str]:
    """Preprocessing a model performs right after a graph input: a chain of single consumers that are
    Cast, a layout Transpose, or Sub/Div/Mul/Add with a constant operand (values shown rounded)."""
    out: list[str] = []
    cur = name
    for _ in range(8):
        cons = stage.tensors[cur].consumers if cur in stage.tensors else []
        if len(cons) != 1:
            break
        n = stage.nodes[cons[0][0]]
        if n.op_type == "Cast":
            out.append(f"Cast from {stage.tensors[cur].dtype or '?'}")
        elif n.op_type == "Transpose":
            out.append(f"Transpose perm={n.attributes.get('perm')}")
        elif n.op_type in _ELEMENTWISE and len(n.inputs) == 2:
            other = n.inputs[1 - cons[0][1]]
            t = stage.tensors.get(other)
            if t is None or not t.is_param:
                break
            v = t.value()
            shown = ", ".join(f"{x:.4g}" for x in np.asarray(v, np.float64).ravel()[:4]) if v is not None else "?"
            out.append(f"{n.op_type} [{shown}]")
        elif n.op_type == "HzPreprocess":
            break
        else:
            break
        if not n.outputs or not n.outputs[0]:
            break
        cur = n.outputs[0]
    return out


def stage_contracts(stage: StageGraph) -> dict[str, InputContract]:
    """Contract of every graph input of a stage (graph input name -> :class:`InputContract`)."""
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
                                      info.scale, color, [f"HzPreprocess mean [{mean}] scale [{scale}]"])
        else:
            out[name] = InputContract(stage.name, name, t.dtype, t.shape, "float", _guess_layout(t.shape),
                                      in_model=_leading_ops(stage, name))
    return out


def pipeline_normalization(contracts: list[dict[str, InputContract]]) -> dict[str, InputContract]:
    """Per input name, the first contract in the pipeline that knows mean/scale (an HzPreprocess)."""
    out: dict[str, InputContract] = {}
    for c in contracts:
        for name, ic in c.items():
            if ic.mean is not None and name not in out:
                out[name] = ic
    return out


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
    pixels -> x128: p - 128 (HORIZON.md sections 2 and 3).
    """
    src_domain = src if isinstance(src, str) else src.domain
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
            raise ValueError(f"input {dst.name!r}: no HzPreprocess in the pipeline tells how to convert "
                             f"{src_domain} data to the {dst.domain} values that {dst.stage} takes")
        mean = _per_channel(norm.mean, v.ndim, axis)
        scale = _per_channel(norm.scale, v.ndim, axis)
        if src_domain == "x128" and dst.domain == "float":
            v = (v + 128.0 - mean) * scale
        elif src_domain == "float" and dst.domain == "x128":
            v = v / scale + mean - 128.0
    return v.astype(_NP.get(dst.dtype, np.float32))
