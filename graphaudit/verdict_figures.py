"""How the verdict reads and writes the report's figures: a figure as a number, an SQNR or a cosine as text. One
definition for :mod:`graphaudit.verdict` and :mod:`graphaudit.verdict_toolchain`."""

from __future__ import annotations

import math

__all__ = ["number", "db_text", "cos_text"]


def number(x) -> float | None:
    """A figure of the report as a float (``"inf"``/``"nan"`` strings included), None when absent or not a number."""
    if x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def db_text(x) -> str:
    """An SQNR (dB) with one decimal, ``inf`` for an error of zero, ``n/a`` when absent."""
    v = number(x)
    return "n/a" if v is None else ("inf" if math.isinf(v) else f"{v:.1f}")


def cos_text(x) -> str:
    """A cosine similarity with six decimals, ``n/a`` when absent."""
    v = number(x)
    return "n/a" if v is None else f"{v:.6f}"
