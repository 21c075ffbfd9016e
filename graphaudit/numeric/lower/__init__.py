"""Lower Horizon ``horizon``-domain ops to standard ONNX so that stock onnxruntime can run a stage model."""

from .common import LOWERABLE_OPS, NAME_PREFIX, LoweringResult, needs_lowering

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from .core import lower_file, lower_model

__all__ = ["LoweringResult", "lower_model", "lower_file", "needs_lowering", "NAME_PREFIX", "LOWERABLE_OPS"]


def __getattr__(name: str):
    """``lower_model`` and ``lower_file``, imported from :mod:`.core` on first use (PEP 562): the structure checks
    read :data:`LOWERABLE_OPS` without importing the lowerings themselves."""
    if name in ("lower_model", "lower_file"):
        from . import core

        return getattr(core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
