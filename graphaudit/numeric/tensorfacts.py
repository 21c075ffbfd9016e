"""Facts about one tensor of a stage that the numeric comparison records beside its figures, read from the graph
alone: the quantization grid a wrapper put it on, and whether it holds class scores."""

from __future__ import annotations

import numpy as np

from ..stage import StageGraph
from ..toolchains.ops import DEQUANTIZE_OPS

__all__ = ["quant_scale", "class_scores"]


def quant_scale(stage: StageGraph, al_view, tensor: str) -> tuple | None:
    """(scales, axis) of the wrapper that produced ``tensor`` (DequantizeLinear scale input or HzCalibration attr)."""
    via = al_view.via.get(tensor)
    if via is None:
        return None
    n = stage.nodes[via]
    if n.op_type in DEQUANTIZE_OPS and len(n.inputs) > 1:
        v = stage.tensors[n.inputs[1]].value() if n.inputs[1] in stage.tensors else None
        if v is not None:
            return (tuple(np.asarray(v, np.float64).ravel()), int(n.attributes.get("axis", 1)))
    if n.op_type == "HzCalibration":
        scales = n.attributes.get("scales")
        if isinstance(scales, list) and scales:
            return (tuple(float(x) for x in scales), int(n.attributes.get("axis", 1)) if isinstance(
                n.attributes.get("axis", 1), int) else 1)
    return None


#: Ops a class-score tensor passes through unchanged in value on its way from the Softmax to the graph output
#: (layout and dtype, identity, a Horizon fake quantization).
_SCORE_PASS_THROUGH = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Cast", "HzCalibration",
                       "QuantizeLinear", "DequantizeLinear"}
_SOFTMAX_OPS = {"Softmax", "LogSoftmax", "HzSoftmax"}


def class_scores(st: StageGraph, tensor: str, hops: int = 4) -> bool:
    """``tensor`` holds class scores: it is a Softmax/LogSoftmax output, directly or through ops that keep values
    (:data:`_SCORE_PASS_THROUGH`). Top-1 agreement is reported for such outputs only: argmax of a box regression
    or landmark output (MTCNN's ``dense_5`` [1, 4]) is no accuracy measure."""
    for _ in range(hops + 1):
        t = st.tensors.get(tensor)
        n = st.nodes.get(t.producer) if t is not None and t.producer else None
        if n is None:
            return False
        if n.op_type in _SOFTMAX_OPS:
            return True
        if n.op_type not in _SCORE_PASS_THROUGH or not n.inputs:
            return False
        tensor = n.inputs[0]
    return False
