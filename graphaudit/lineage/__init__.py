"""Lineage alignment of stage models: which tensor and node of one stage is which in the next."""

from .align import Alignment, Region, WrapperDiff, align
from .chain import Lineage, align_chain
from .matching import TensorMatch
from .view import StageView

__all__ = ["Alignment", "Region", "WrapperDiff", "align", "Lineage", "align_chain", "TensorMatch", "StageView"]
