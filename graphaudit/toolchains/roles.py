"""Stage roles of a quantization pipeline, in pipeline order, and the facts about transitions between them.

Horizon's stage names come from rdk_x3_doc ptq_process.md and the OE 3.x docs (docs/HORIZON.md section 1); the
onnxruntime names (original, optimized, quantized) are graphaudit's convention for onnxruntime pipelines. This
module imports nothing of graphaudit; discovery, sample listing and whoever sorts stages by role import it.
"""

from __future__ import annotations

__all__ = ["ROLES", "ROLE_ORDER", "NUMERICALLY_EQUAL_TRANSITIONS"]

#: Stage roles in pipeline order. ``source`` is the user's pre-toolchain model; ``custom`` a stage file whose name
#: follows no convention (it has no place in the order).
ROLES = ("source", "original", "optimized", "calibrated", "ptq", "quantized", "custom")

#: Role -> its position in the pipeline (every role of :data:`ROLES` but ``custom``); sort stages by it.
ROLE_ORDER: dict[str, int] = {role: i for i, role in enumerate(ROLES) if role != "custom"}

#: Stage transitions documented as numerically equal: the toolchain's float stages compute the source model's
#: values (Horizon: original_float and optimized_float, docs/HORIZON.md section 1; onnxruntime graph optimizations).
NUMERICALLY_EQUAL_TRANSITIONS = frozenset({("source", "original"), ("original", "optimized"), ("source", "optimized")})
