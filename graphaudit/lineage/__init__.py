"""Lineage alignment of stage models: which tensor and node of one stage is which in the next."""

from .align import Alignment, Region, WrapperDiff, align
from .chain import Lineage, align_chain
from .match import TensorMatch, op_class
from .view import StageView, wrapper_kind

__all__ = ["Alignment", "Region", "WrapperDiff", "align", "Lineage", "align_chain", "TensorMatch",
           "op_class", "StageView", "wrapper_kind"]
