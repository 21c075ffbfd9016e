"""Lower Horizon ``horizon``-domain ops to standard ONNX so that stock onnxruntime can run a stage model."""

from .common import LOWERABLE_OPS, NAME_PREFIX, LoweringResult, needs_lowering
from .core import lower_file, lower_model

__all__ = ["LoweringResult", "lower_model", "lower_file", "needs_lowering", "NAME_PREFIX", "LOWERABLE_OPS"]
