"""The reduce step of a comparison: one sample's captured values added to the error of every aligned tensor pair."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import fastsum
from .fixedpoint import nhwc_as
from .metrics import SMALL_TENSOR, top1_agreement, update_many
from .schedule import for_each

#: A :class:`graphaudit.numeric.compare.TensorError` (not imported: compare imports this module).
TensorError = Any

__all__ = ["reduce_pairs", "reduce_pair"]


def _decoded(te: TensorError, ref: np.ndarray | None, got: np.ndarray | None):
    """``(ref, got)`` as reals of the reference's shape (integers of the fixed-point stage decoded with the pair's
    codec, its NHWC float tensors transposed), or None when the pair is not compared (missing, or other dtypes)."""
    if ref is None or got is None or ref.dtype.kind != "f":
        return None
    if te.codec is not None:
        if got.dtype.kind not in "iu":
            return None
        return ref, te.codec.decode(got, ref.shape)
    if got.dtype.kind != "f":
        return None
    return ref, nhwc_as(got, ref.shape)  # the fixed-point stage's float tensors (HzDequantize outputs) are NHWC


def _top1(te: TensorError, ref: np.ndarray, got: np.ndarray) -> None:
    if te.is_output and te.class_scores and ref.ndim == 2 and ref.shape[-1] > 1:
        agree, rows = top1_agreement(ref, got)
        te.top1[0] += agree
        te.top1[1] += rows


def reduce_pair(te: TensorError, ref: np.ndarray | None, got: np.ndarray | None) -> None:
    """Add one sample's reference and test values of a pair to its error (and top-1 agreement of class scores)."""
    pair = _decoded(te, ref, got)
    if pair is None:
        return
    ref, got = pair
    sc = te.scale
    te.stats.update(ref, got, np.asarray(sc[0]) if sc else None, sc[1] if sc else 1)
    _top1(te, ref, got)


def _step(te: TensorError) -> float | None | bool:
    """The pair's one quantization step, None without a scale, False when it needs the element-wise LSB path."""
    if te.scale is None:
        return None
    s = te.scale[0]
    return float(s[0]) if len(s) == 1 and np.isfinite(s[0]) and s[0] > 0 else False


def reduce_pairs(tensors: list[TensorError], va: dict, vb: dict) -> None:
    """Add one sample's captured values (``va`` of the reference stage, ``vb`` of the test stage, by tensor name)
    to the accumulated error of every pair: small tensors together (:func:`graphaudit.numeric.metrics.update_many`),
    the others one by one, on one thread per core when they are large (:func:`graphaudit.numeric.schedule.for_each`).
    """
    small, large = [], []
    for te in tensors:
        pair = _decoded(te, va.get(te.codec.a_value if te.codec else te.a_tensor), vb.get(te.b_tensor))
        if pair is None:
            continue
        ref, got = pair
        step = _step(te)
        if step is not False and ref.size == got.size and 0 < ref.size <= SMALL_TENSOR:
            small.append((te.stats, ref, got, step))
            _top1(te, ref, got)
        else:
            large.append((te, ref, got))
    update_many(small)
    if not fastsum.enabled() and sum(got.size for _te, _ref, got in large) >= fastsum.ENABLE_MIN_ELEMENTS:
        fastsum.enable()  # large tensors: the compiled pass repays its one-time cost within two samples

    def one(item) -> None:
        te, ref, got = item
        sc = te.scale
        te.stats.update(ref, got, np.asarray(sc[0]) if sc else None, sc[1] if sc else 1)
        _top1(te, ref, got)

    for_each(one, large, [got.nbytes for _te, _ref, got in large])
