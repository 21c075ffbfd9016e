"""Horizon / D-Robotics knowledge: decoding HzPreprocess and HzCalibration nodes (docs/HORIZON.md section 3)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ..stage import NodeInfo, StageGraph
from .ops import HORIZON_DOMAIN, trace_back

__all__ = ["HORIZON_DOMAIN", "PreprocessInfo", "CalibrationInfo", "decode_hzpreprocess", "decode_hzcalibration",
           "read_weight"]


def read_weight(stage: StageGraph, name: str) -> np.ndarray | None:
    """Value of a weight (initializer or Constant output) of a stage; ``None`` if not a weight or unreadable."""
    t = stage.tensors.get(name)
    return t.value() if t is not None and t.is_param else None


@dataclass
class PreprocessInfo:
    """A decoded ``HzPreprocess`` node.

    ``mean`` and ``scale`` are per channel in the 0..255 pixel domain: Horizon computes
    ``((x + 128) - mean) * scale`` on ``*_128`` input ``x`` as a 1x1 grouped convolution with
    ``w = scale`` and ``b = (128 - mean) * scale`` (docs/HORIZON.md section 3, from HMCT
    ``add_preprocess_node.py``), so ``scale = w`` and ``mean = 128 - b / w``.
    """

    node: str
    input: str
    mean: list[float]
    scale: list[float]
    input_type: str
    data_format: str


def decode_hzpreprocess(stage: StageGraph, node: NodeInfo) -> PreprocessInfo | None:
    """Decode mean and scale of an ``HzPreprocess`` node; ``None`` when its weights cannot be read.

    Weights and input are traced back through wrappers (a calibrated stage may fake-quantize the
    HzPreprocess weight with an HzCalibration); the mean/scale are those of the float weights.
    """
    if node.op_type != "HzPreprocess" or len(node.inputs) < 2:
        return None
    w = read_weight(stage, trace_back(stage, node.inputs[1]))
    b = read_weight(stage, trace_back(stage, node.inputs[2])) if len(node.inputs) > 2 and node.inputs[2] else None
    if w is None:
        return None
    try:
        w = w.astype(np.float64).reshape(-1)
        b = np.zeros_like(w) if b is None else b.astype(np.float64).reshape(-1)
    except (TypeError, ValueError):
        return None
    if w.size == 0 or b.size not in (1, w.size):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(w != 0, 128.0 - b / w, np.nan)
    return PreprocessInfo(node=node.id, input=trace_back(stage, node.inputs[0]), mean=[float(x) for x in mean],
                          scale=[float(x) for x in w], input_type=str(node.attributes.get("input_type", "")),
                          data_format=str(node.attributes.get("data_format", "NCHW")))


@dataclass
class CalibrationInfo:
    """A decoded ``HzCalibration`` node (attributes as in HMCT ``onnx_calibration_node.py``).

    ``is_weight`` is True when the calibrated value is a weight (initializer/Constant);
    ``per_channel`` when more than one scale (or threshold) is given; ``enabled`` is False for
    ``switch == "OFF"`` (pass-through).
    """

    node: str
    tensor: str
    is_weight: bool
    qtype: str
    thresholds: list[float]
    scales: list[float]
    axis: int
    enabled: bool

    @property
    def per_channel(self) -> bool:
        return max(len(self.scales), len(self.thresholds)) > 1 and not (
            len(self.thresholds) == 2 and len(self.scales) <= 1)


def _floats(v) -> list[float]:
    """An attribute as a list of floats; [] when absent or not numeric (a malformed file)."""
    if v is None:
        return []
    items = v if isinstance(v, list) else [v]
    try:
        return [float(x) for x in items]
    except (TypeError, ValueError):
        return []


def decode_hzcalibration(stage: StageGraph, node: NodeInfo, is_weight: bool) -> CalibrationInfo:
    """Read the attributes of an ``HzCalibration`` node; legacy ``bits`` maps to ``int<bits>``."""
    a = node.attributes
    qtype = a.get("qtype")
    if not qtype or not isinstance(qtype, str):
        qtype = f"int{a['bits']}" if isinstance(a.get("bits"), int) else "int8"
    thresholds = _floats(a.get("thresholds"))
    scales = _floats(a.get("scales"))
    return CalibrationInfo(node=node.id, tensor=node.inputs[0], is_weight=is_weight, qtype=str(qtype),
                           thresholds=thresholds, scales=scales, axis=a["axis"] if isinstance(a.get("axis"), int) else 1,
                           enabled=str(a.get("switch", "ON")).upper() != "OFF")
