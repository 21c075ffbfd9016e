"""Where two stages documented as numerically equal first part, telling a value that moved from a value that changed.

The first divergence is the earliest tensor pair, in the later stage's order, below the transition's thresholds.
Between stages documented as equal (original -> optimized) one kind of pair is below them without any change of
the math: a toolchain folds a per-channel scale and shift *forward* into the next weighted linear op, so the tensor
between them keeps its name and no longer holds the scaled value. hb_mapper 1.24.3 does this with a LayerNorm's
affine step on PP-OCRv4 rec (``p2o.Add.275`` of the original against ``p2o.Div.37`` of the optimized stage: cosine
0.82, while the Conv reading it, whose weights took the scale and shift, agrees to float rounding, and so does the
output, 98.5 dB). Such a pair *heals* at that linear op; a changed value does not: its error runs on through the
ops after it (a Conv's weights tripled on one channel, a BatchNormalization folded without epsilon), even when a
saturating output (a two-class Softmax) hides it at the end.
"""

from __future__ import annotations

import math
from typing import Any

from ..stage import StageGraph

__all__ = ["FLOAT_ROUNDING_SQNR_DB", "linear_readers", "set_divergence", "first_divergence"]

#: Two tensors this close (dB) hold the same math up to float32 rounding (rewrites measure above 100 dB on one op;
#: PP-OCRv4 rec's whole optimized stage kept 98.5 dB at its output). A diverged pair heals where a linear op reading
#: it writes a pair at least this close.
FLOAT_ROUNDING_SQNR_DB = 90.0

#: Ops a forward fold takes a per-channel scale and shift into (their weights absorb it).
LINEAR_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
#: Ops that move values without computing (a fold reaches the linear op through them).
MOVING_OPS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
#: How many data-movement ops a fold is followed through.
MAX_MOVES = 4

TransitionNumeric = Any  # graphaudit.numeric.compare.TransitionNumeric (compare imports this module)


def linear_readers(stage: StageGraph, tensor: str) -> tuple[str, ...]:
    """The outputs of the weighted linear ops (:data:`LINEAR_OPS`) of ``stage`` that read ``tensor``, directly or
    through at most :data:`MAX_MOVES` data-movement ops (:data:`MOVING_OPS`), in the order found."""
    out: list[str] = []
    frontier, seen = [tensor], {tensor}
    for _ in range(MAX_MOVES + 1):
        nxt = []
        for t in frontier:
            info = stage.tensors.get(t)
            for nid, _k in (info.consumers if info is not None else ()):
                n = stage.nodes[nid]
                o = n.outputs[0] if n.outputs else ""
                if not o or o in seen:
                    continue
                if n.op_type in LINEAR_OPS and n.domain in ("", "ai.onnx"):
                    out.append(o)
                    seen.add(o)
                elif n.op_type in MOVING_OPS and n.domain in ("", "ai.onnx"):
                    nxt.append(o)
                    seen.add(o)
        frontier = nxt
    return tuple(out)


def diverged(res: TransitionNumeric, te) -> bool:
    """Whether tensor pair ``te`` is below the transition's thresholds (or turned non-finite)."""
    return bool(te.stats.samples) and ((math.isnan(te.stats.cosine) and te.stats.diverged_nonfinite)
                                       or te.stats.cosine < res.threshold
                                       or (res.sqnr_threshold is not None and te.stats.sqnr_db < res.sqnr_threshold))


def first_divergence(res: TransitionNumeric):
    """The first tensor pair in b's order below the thresholds (None when there is none)."""
    return next((te for te in res.tensors if diverged(res, te)), None)


def set_divergence(res: TransitionNumeric) -> None:
    """Set ``res.first_divergence`` and ``res.inner_divergence``.

    Between stages documented as numerically equal (``res.sqnr_threshold`` set), a diverged pair *heals* when a
    linear op reading it (:attr:`TensorError.linear_readers`) writes a compared pair at least
    :data:`FLOAT_ROUNDING_SQNR_DB` close: a scale folded forward, the pair holds two different quantities. The
    healed pairs are listed in ``inner_divergence``; the first divergence is the first pair that does not heal
    (None when all do). Otherwise the first pair below the thresholds.
    """
    res.inner_divergence = []
    if res.sqnr_threshold is None:
        res.first_divergence = first_divergence(res)
        return
    by_b = {te.b_tensor: te for te in res.tensors}
    res.first_divergence = None
    for te in res.tensors:
        if not diverged(res, te):
            continue
        if any((r := by_b.get(x)) is not None and r.stats.samples and not diverged(res, r)
               and r.stats.sqnr_db >= FLOAT_ROUNDING_SQNR_DB for x in te.linear_readers):
            res.inner_divergence.append(te)
        elif res.first_divergence is None:
            res.first_divergence = te
