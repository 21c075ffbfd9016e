"""Defaults of the numeric comparison that argument parsing and :class:`graphaudit.measure.NumericOptions` read
(no numpy, no runner: ``graphaudit diff`` and ``lint`` import this module without the numeric machinery)."""

from __future__ import annotations

__all__ = ["DEFAULT_COSINE_THRESHOLD"]

#: First-divergence threshold on cosine similarity (configurable per call).
DEFAULT_COSINE_THRESHOLD = 0.999
