"""Per-toolchain knowledge: stage file naming, op semantics, decoding of inserted nodes."""

from .discovery import STAGE_SUFFIXES, StageFile, discover_stages
from .horizon import CalibrationInfo, PreprocessInfo, decode_hzcalibration, decode_hzpreprocess

__all__ = ["STAGE_SUFFIXES", "StageFile", "discover_stages", "CalibrationInfo", "PreprocessInfo",
           "decode_hzcalibration", "decode_hzpreprocess"]
