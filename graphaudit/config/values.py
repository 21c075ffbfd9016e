"""Values of a conversion config: unset placeholders, per-input ';' lists, per-channel numbers, shapes."""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["is_unset", "split_per_input", "parse_channels", "parse_shape", "MAX_DIM"]

#: Largest dim accepted in a shape: ONNX dims are int64, but no tensor the toolchain builds has a dim of 2^31 or more.
MAX_DIM = 2**31 - 1

_SEP_SPLIT = re.compile(r"[\s,]+")


def is_unset(v: Any) -> bool:
    """True for the values Horizon configs use for "not given": absent/null, ``''``, ``'None'`` (per-input placeholder)."""
    return v is None or (isinstance(v, str) and v.strip() in ("", "None", "none"))


def split_per_input(v: Any) -> list[Any]:
    """Per-input items of a value: ``'a;b'`` -> ``['a', 'b']``, a YAML list as is, a scalar -> ``[scalar]``.

    ``None`` and ``''`` give ``[]``. Items are stripped strings (or the scalar / list item itself).
    Source: docs/HORIZON.md section 4 (';' separates inputs; 3.x recipes also use YAML lists).
    """
    if v is None or (isinstance(v, str) and not v.strip()):
        return []
    if isinstance(v, list):
        return list(v)
    if isinstance(v, str):
        return [s.strip() for s in v.split(";")]
    return [v]


def _finite(x: Any) -> float:
    """``float(x)``; ValueError naming ``x`` when it is not a number or not finite (nan, inf, 1e309)."""
    try:
        v = float(x)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{x!r} is not a number") from None
    if not math.isfinite(v):
        raise ValueError(f"{x!r} is not a finite number")
    return v


def parse_channels(item: Any) -> tuple[list[float] | None, str]:
    """Per-channel numbers of one input's mean/scale/std item, and the separator used.

    Returns ``(values, separator)`` with separator ``"single"``, ``"space"``, ``"comma"`` or ``"mixed"``;
    ``(None, "single")`` for an unset item.

    Raises
    ------
    ValueError
        A token is not a number, or not a finite one (nan, inf, 1e309); the message names it.
    """
    if is_unset(item):
        return None, "single"
    if isinstance(item, bool):
        raise ValueError(f"{item!r} is a boolean, not a number")
    if isinstance(item, (int, float)):
        return [_finite(item)], "single"
    if isinstance(item, list):
        vals = []
        for x in item:
            if isinstance(x, bool) or not isinstance(x, (int, float, str)):
                raise ValueError(f"{x!r} is not a number")
            try:
                vals.append(_finite(x))
            except (TypeError, OverflowError):
                raise ValueError(f"{x!r} is not a number") from None
        return vals, "list"
    if not isinstance(item, str):
        raise ValueError(f"{type(item).__name__} where numbers are expected")
    text = item.strip()
    has_comma, has_space = "," in text, bool(re.search(r"\d\s+[\d.+-]", text))
    tokens = [t for t in _SEP_SPLIT.split(text) if t]
    vals = []
    for t in tokens:
        vals.append(_finite(t))
    sep = "mixed" if has_comma and has_space else "comma" if has_comma else "space" if len(vals) > 1 else "single"
    return vals, sep


def parse_shape(item: Any) -> tuple[int, ...] | None:
    """``'1x3x224x224'`` -> ``(1, 3, 224, 224)``; an int -> ``(int,)``; unset -> ``None``.

    Raises
    ------
    ValueError
        Not dims separated by 'x', a dim <= 0, or a dim larger than :data:`MAX_DIM`.
    """
    if is_unset(item):
        return None
    if isinstance(item, bool):
        raise ValueError(f"{item!r} is not a shape")
    if isinstance(item, int):
        return (item,)
    if not isinstance(item, str):
        raise ValueError(f"{type(item).__name__} is not a shape like 1x3x224x224")
    try:
        dims = tuple(int(d) for d in item.lower().strip().split("x"))
    except ValueError:
        raise ValueError(f"{item!r} is not a shape like 1x3x224x224") from None
    if any(d <= 0 for d in dims):
        raise ValueError(f"{item!r} has a dim <= 0")
    if any(d > MAX_DIM for d in dims):
        raise ValueError(f"{item!r} has a dim larger than 2^31 - 1")
    return dims
