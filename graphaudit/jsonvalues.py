"""Values for standard JSON: non-finite floats as the strings "nan", "inf", "-inf" (JSON has no NaN or Infinity)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["json_number", "json_safe"]


def json_number(x: float | None) -> float | str | None:
    """``x`` unchanged when finite (or None), else ``"nan"``, ``"inf"`` or ``"-inf"`` (the report schema's spelling,
    e.g. ``sqnr_db: "inf"`` for identical tensors)."""
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def json_safe(x: Any) -> Any:
    """``x`` (dicts, lists, tuples, scalars) with every non-finite float replaced as :func:`json_number` does."""
    if isinstance(x, float):
        return json_number(x)
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x
