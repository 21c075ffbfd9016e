"""Where a quantization change's error lands: a consumer that saturates inside the clip range removes the clipping.

A change measured alone (N402, N404, the verdict) is compared on its own tensor: an HzCalibration or a Q/DQ pair fed
the reference values, its output against the reference tensor. That figure counts every clipped value at its full
size. But the error that matters is the one the next node passes on, and a saturating consumer passes none of the
clipping on when it saturates inside the clip range: PP-OCR cls's squeeze-excitation Convs (``Conv@50``, ``Conv@45``
on bayes-e) are clipped at threshold 3 and read by a HardSigmoid (alpha 0.2, beta 0.5) that is 0 below -2.5 and 1
above 2.5, so a value of 20 clipped to 3 gives 1 either way. Measured alone they are at 7.3 dB, the worst of the
transition, in the KL build (output SQNR 15.7 dB) and in a max build (33.0 dB) alike; reverting them recovers little
(README "Which changes cost the drop").

:func:`landed_sqnr` bounds the change's error after such consumers, without running anything. The change computes
``q(x)``: ``x`` rounded to a grid of step ``s`` and clipped to ``[lo, hi]`` (``lo = (qmin - zp) * s``, ``hi = (qmax -
zp) * s``). A consumer ``g`` that is nondecreasing, ``L``-Lipschitz and bounded by ``g(-inf)`` and ``g(+inf)`` turns
the error of each element into ``|g(q(x)) - g(x)|``, which is at most

- ``L * s / 2`` where ``x`` lies in ``[lo, hi]`` (rounding only);
- ``g(+inf) - g(hi)`` above ``hi`` and ``g(lo) - g(-inf)`` below ``lo`` (clipping: both zero when ``g`` saturates
  inside ``[lo, hi]``, the HardSigmoid above).

With ``B`` the largest of the three, the error power after ``g`` is at most ``B**2`` and its SQNR is at least
``10 log10(P / B**2)``, ``P`` the mean square of ``g``'s output in the reference stage (measured by the numeric
comparison, which pairs that tensor). It is a bound, not an estimate: the error actually left is at most that. Only
changes all of whose readers are such consumers get one (one Conv among them and the clipped values reach it);
ops: HardSigmoid, Sigmoid, Tanh, Clip with both bounds (Relu6). Not Relu, nor a Clip open on one side: their
``g(+inf)`` is infinite, so the clipping above passes on in full (bounded only if nothing clips, which a bound
cannot know).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..stage import NodeInfo, StageGraph
from ..toolchains.ops import QUANTIZE_OPS

__all__ = ["Landing", "landed_sqnr"]


@dataclass(frozen=True)
class _Consumer:
    """A nondecreasing, ``lipschitz``-Lipschitz elementwise op with limits ``low = g(-inf)``, ``high = g(+inf)``."""

    g: Callable[[float], float]
    lipschitz: float
    low: float
    high: float


@dataclass(frozen=True)
class Landing:
    """A change's error after its saturating readers.

    Attributes
    ----------
    sqnr_db : float
        Lower bound of the SQNR (dB) of the change's error at the readers' outputs (the lowest over readers; inf when
        the bound is zero).
    consumers : list of str
        The readers' node names in the test stage.
    bound : float
        ``B``: the largest error per element at the readers' outputs (units of those outputs).
    clip : tuple of float
        ``(lo, hi)``: the clip range of the change's grid (the widest per-channel grid's own bounds are not used:
        ``lo`` is the highest per-channel lower bound, ``hi`` the lowest upper bound).
    """

    sqnr_db: float
    consumers: list[str]
    bound: float
    clip: tuple[float, float]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _scalar(stage: StageGraph, name: str) -> float | None:
    """A one-element initializer or constant's value, None when absent or not one finite number."""
    t = stage.tensors.get(name) if name else None
    v = t.value() if t is not None else None
    if v is None or np.asarray(v).size != 1:
        return None
    x = float(np.asarray(v, np.float64).ravel()[0])
    return x if math.isfinite(x) else None


def _consumer(stage: StageGraph, n: NodeInfo) -> _Consumer | None:
    """The saturation of a reader node, None when it is not one of the ops this module bounds."""
    if n.domain not in ("", "ai.onnx"):
        return None
    if n.op_type == "HardSigmoid":
        alpha, beta = float(n.attributes.get("alpha", 0.2)), float(n.attributes.get("beta", 0.5))
        if not alpha > 0:
            return None
        return _Consumer(lambda x: min(max(alpha * x + beta, 0.0), 1.0), alpha, 0.0, 1.0)
    if n.op_type == "Sigmoid":
        return _Consumer(_sigmoid, 0.25, 0.0, 1.0)
    if n.op_type == "Tanh":
        return _Consumer(math.tanh, 1.0, -1.0, 1.0)
    if n.op_type == "Clip":
        lo, hi = n.attributes.get("min"), n.attributes.get("max")  # opset < 11: attributes; else inputs 1 and 2
        if len(n.inputs) > 1:
            lo = _scalar(stage, n.inputs[1]) if n.inputs[1] else None
        if len(n.inputs) > 2:
            hi = _scalar(stage, n.inputs[2]) if n.inputs[2] else None
        lo = -math.inf if lo is None else float(lo)
        hi = math.inf if hi is None else float(hi)
        if not lo < hi:
            return None
        return _Consumer(lambda x: min(max(x, lo), hi), 1.0, lo, hi)
    return None


def _integer_range(qtype: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"(u?)int(\d+)", qtype.lower())
    if not m or not 2 <= int(m[2]) <= 32:
        return None
    bits = int(m[2])
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if not m[1] else (0, 2 ** bits - 1)


def _floats(v) -> list[float]:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return [float(v)]
    return [float(x) for x in v] if isinstance(v, (list, tuple)) else []


def _grid(stage: StageGraph, n: NodeInfo) -> tuple[np.ndarray, np.ndarray, int, int] | None:
    """(scales, zero points, qmin, qmax) of the quantization a change applies (an HzCalibration, or the
    QuantizeLinear of a Q/DQ pair), None when it is not an integer fake quantization of its input's value (float
    qtypes, ``switch: OFF``, HMCT's ``dequantize_scale`` rescaling, scales that are not read)."""
    if n.op_type == "HzCalibration":
        a = n.attributes
        if str(a.get("switch", "ON")).upper() == "OFF" or a.get("dequantize_scale") is not None:
            return None
        qtype = a.get("qtype") or (f"int{int(a['bits'])}" if a.get("bits") is not None else "int8")
        rng = _integer_range(str(qtype))
        if rng is None:
            return None
        zps = [int(z) for z in _floats(a.get("zero_point"))] or [0]
        scales = _floats(a.get("scales")) or ([t / rng[1] for t in _floats(a.get("thresholds"))] if not any(zps)
                                              and rng[0] < 0 else [])
    elif n.op_type in QUANTIZE_OPS and len(n.inputs) > 1:
        t = stage.tensors.get(n.inputs[1])
        s = t.value() if t is not None else None
        z = stage.tensors.get(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else None
        zv = z.value() if z is not None else None
        dtype = z.dtype if z is not None else "UINT8"  # QuantizeLinear's output without a zero point: uint8
        rng = _integer_range(dtype)
        if s is None or rng is None or (z is not None and zv is None):
            return None
        scales = [float(x) for x in np.asarray(s, np.float64).ravel()]
        zps = [int(x) for x in np.asarray(zv).ravel()] if zv is not None else [0]
    else:
        return None
    s, zp = np.asarray(scales, np.float64), np.asarray(zps, np.float64)
    if not s.size or not np.all(np.isfinite(s)) or np.any(s <= 0) or zp.size not in (1, s.size):
        return None
    return s, np.broadcast_to(zp, s.shape), rng[0], rng[1]


def _quantizer(stage: StageGraph, b_nodes: list[str]) -> NodeInfo | None:
    """The one quantizing node of a change (an HzCalibration, or the QuantizeLinear of a Q/DQ pair)."""
    found = [stage.nodes[i] for i in b_nodes if i in stage.nodes
             and (stage.nodes[i].op_type == "HzCalibration" or stage.nodes[i].op_type in QUANTIZE_OPS)]
    return found[0] if len(found) == 1 else None


def _bound(c: _Consumer, s: np.ndarray, zp: np.ndarray, qmin: int, qmax: int) -> tuple[float, float, float]:
    """``(B, lo, hi)``: the largest error per element after ``c`` of fake quantization on the grid (module doc)."""
    lo_c, hi_c = (qmin - zp) * s, (qmax - zp) * s
    top = max(c.high - c.g(float(h)) for h in hi_c) if math.isfinite(c.high) else math.inf
    bottom = max(c.g(float(x)) - c.low for x in lo_c) if math.isfinite(c.low) else math.inf
    return max(c.lipschitz * float(s.max()) / 2, top, bottom), float(lo_c.max()), float(hi_c.min())


def landed_sqnr(stage: StageGraph, b_nodes: list[str], b_tensor: str, tensors) -> Landing | None:
    """The bound of a quantization change's SQNR after its saturating readers (module doc), or None.

    Parameters
    ----------
    stage : StageGraph
        The transition's test stage (where the change's nodes are).
    b_nodes : list of str
        The change's node ids in ``stage``.
    b_tensor : str
        The change's output tensor in ``stage`` (the quantized value its readers read).
    tensors : list of graphaudit.numeric.compare.TensorError
        The transition's compared tensor pairs: the readers' outputs must be among them (their reference values'
        mean square, ``stats.sum_aa / stats.count``, is ``P``).

    Returns
    -------
    Landing or None
        None when the change is no integer fake quantization, a reader is not a bounded saturating op, or a reader's
        output was not compared.
    """
    q = _quantizer(stage, b_nodes)
    grid = _grid(stage, q) if q is not None else None
    t = stage.tensors.get(b_tensor)
    if grid is None or t is None or not t.consumers or t.is_graph_output:
        return None
    by_node = {te.b_node: te for te in tensors if te.b_node and te.stats.count}
    worst, names, bound, clip = math.inf, [], 0.0, (0.0, 0.0)
    for cid, k in t.consumers:
        n = stage.nodes[cid]
        c = _consumer(stage, n) if k == 0 else None  # the value read, not a Clip bound
        te = by_node.get(n.name or n.id)
        if c is None or te is None:
            return None
        b, lo, hi = _bound(c, *grid)
        power = te.stats.sum_aa / te.stats.count
        if not math.isfinite(b) or not power > 0:
            return None
        db = math.inf if b == 0 else 10 * math.log10(power / (b * b))
        worst, bound, clip = min(worst, db), max(bound, b), (lo, hi)
        names.append(n.name or n.id)
    return Landing(sqnr_db=worst, consumers=names, bound=bound, clip=clip)
