"""The reduce step of a comparison: one sample's captured values added to the error of every aligned tensor pair."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import fastsum
from .layout import as_layout_of
from .metrics import SMALL_TENSOR, ErrorStats, top1_agreement, update_many
from .scaledint import ScaledIntegers
from .schedule import PARALLEL_MIN_BYTES, cores, for_each

#: A :class:`graphaudit.numeric.compare.TensorError` (not imported: compare imports this module).
TensorError = Any

__all__ = ["Updates", "reduce_pairs", "reduce_pair"]


def _decoded(te: TensorError, ref: np.ndarray | None, got: np.ndarray | None):
    """``(ref, got)`` as reals of the reference's shape (integers of the fixed-point stage decoded with the pair's
    codec, block by block where it has one scale: :class:`ScaledIntegers`; float tensors whose axes a toolchain moved
    transposed back: :func:`graphaudit.numeric.layout.as_layout_of`),
    or None when the pair is not compared (missing, or other dtypes)."""
    if ref is None or got is None or ref.dtype.kind != "f":
        return None
    if te.codec is not None:
        if got.dtype.kind not in "iu":
            return None
        return ref, te.codec.lazy(got, ref.shape)
    if got.dtype.kind != "f":
        return None
    # the fixed-point stage's float tensors (HzDequantize outputs) are NHWC; an optimizer may transpose a tensor
    return ref, as_layout_of(got, ref.shape)


def _top1(te: TensorError, ref: np.ndarray, got: np.ndarray) -> None:
    if te.is_output and te.class_scores and ref.ndim == 2 and ref.shape[-1] > 1:
        agree, rows = top1_agreement(ref, got)
        te.top1[0] += agree
        te.top1[1] += rows


def reduce_pair(te: TensorError, ref: np.ndarray | None, got: np.ndarray | None) -> None:
    """Add one sample's reference and test values of a pair to its error (and top-1 agreement of class scores)."""
    u = Updates()
    u.pair(te, ref, got)
    u.apply()


def _step(scale: tuple | None) -> float | None | bool:
    """The one quantization step of a ``(scales, axis)`` scale, None without a scale, False when it needs the
    element-wise LSB path (per-channel scales, or a step that is not finite and positive)."""
    if scale is None:
        return None
    s = scale[0]
    if len(s) != 1:
        return False
    v = float(s[0])
    return v if math.isfinite(v) and v > 0 else False


class Updates:
    """One sample's updates of many accumulators, applied together by :meth:`apply`.

    Each update is what ``stats.update(a, b, scale, axis)`` does (:meth:`ErrorStats.update`); they are applied in
    fewer calls: where the compiled kernel is enabled (:mod:`graphaudit.numeric.fastsum`), every float32 pair in one
    kernel call (on one thread per core when the sample's pairs take :data:`PARALLEL_MIN_BYTES` or more), the
    figures then added per accumulator (:meth:`ErrorStats.add_sums`); the other pairs as before: small ones in
    groups (:func:`update_many`), the rest one by one. The figures equal those of the updates applied one by one
    up to the order of float64 additions. An accumulator updated more than once in one sample (a region with several
    outputs) gets its updates in the order given, so its first-sample figures are those of its first update.
    """

    def __init__(self):
        self.items: list[tuple[ErrorStats, np.ndarray, np.ndarray, tuple | None]] = []
        self.tops: list[tuple[TensorError, np.ndarray, np.ndarray]] = []

    def add(self, stats: ErrorStats, a: np.ndarray, b: np.ndarray, scale: tuple | None = None) -> None:
        """Queue ``stats.update(a, b, scale[0], scale[1])`` (``scale``: ``(scales, axis)`` or None). ``b`` may be a
        :class:`ScaledIntegers` (decoded block by block); a small one is decoded here, for the grouped update."""
        if isinstance(b, ScaledIntegers):
            if b.size <= SMALL_TENSOR:
                b = b.array()
        else:
            b = np.asarray(b)
        self.items.append((stats, np.asarray(a), b, scale))

    def pair(self, te: TensorError, ref: np.ndarray | None, got: np.ndarray | None) -> None:
        """Queue one sample of a tensor pair (decoded as :func:`_decoded`; nothing when the pair is not compared),
        with the top-1 agreement of class scores."""
        pair = _decoded(te, ref, got)
        if pair is None:
            return
        ref, got = pair
        self.add(te.stats, ref, got, te.scale)
        if te.is_output and te.class_scores:  # what _top1 measures
            self.tops.append((te, ref, got.array() if isinstance(got, ScaledIntegers) else got))

    def apply(self) -> None:
        """Apply every queued update (see the class)."""
        items = self.items
        self.items = []
        for te, ref, got in self.tops:
            _top1(te, ref, got)
        self.tops = []
        if not items:
            return
        if not fastsum.tried():
            big = sum(b.size for _s, _a, b, _c in items if b.size > SMALL_TENSOR)
            if big >= fastsum.CACHED_MIN_ELEMENTS:  # the machine's compiled object: no LLVM in this process
                # very large tensors: compiling here repays its one-time cost within the sample
                fastsum.enable(compile_here=big >= fastsum.ENABLE_MIN_ELEMENTS)
        seen: dict[int, int] = {}
        for st, _a, _b, _c in items:
            seen[id(st)] = seen.get(id(st), 0) + 1
        steps = [_step(scale) for _s, _a, _b, scale in items]
        sums = self._kernel_sums(items, steps) if fastsum.enabled() else {}
        small, large = [], []
        for k, (st, a, b, scale) in enumerate(items):
            step = steps[k]
            row = sums.get(k)
            if row is not None:
                st.add_sums(a.size, row, step)
            elif seen[id(st)] > 1:  # in order with the accumulator's other updates of this sample
                _update(st, a, b, scale)
            elif step is not False and a.size == b.size and 0 < a.size <= SMALL_TENSOR:
                small.append((st, a, b, step))
            else:
                large.append((st, a, b, scale))
        update_many(small)
        for_each(lambda it: _update(*it), large, [b.nbytes for _s, _a, b, _c in large])

    @staticmethod
    def _kernel_sums(items: list, steps: list) -> dict[int, list[float]]:
        """The kernel's figures of the items it takes (one scale or none) by item index, for the rows whose figures
        are finite (also divided by the item's quantization step); the others go the numpy way, which counts
        non-finite values."""
        idx = [k for k, (_s, a, b, _scale) in enumerate(items) if steps[k] is not False and fastsum.takes(a, b)]
        scaled = [k for k, (_s, a, b, _scale) in enumerate(items)
                  if steps[k] is not False and isinstance(b, ScaledIntegers) and fastsum.takes_scaled(a, b)]
        sums = Updates._scaled_sums(items, steps, scaled) if scaled else {}
        if not idx:
            return sums
        nbytes = [items[k][2].nbytes for k in idx]
        n = min(4, cores())
        if n < 2 or sum(nbytes) < PARALLEL_MIN_BYTES:
            rows = fastsum.error_sums_many([(items[k][1], items[k][2]) for k in idx])
        else:
            shares: list[list[int]] = [[] for _ in range(n)]
            loads = [0] * n
            for size, j in sorted(zip(nbytes, range(len(idx))), key=lambda x: -x[0]):  # largest first, to the least
                m = loads.index(min(loads))  # loaded share
                shares[m].append(j)
                loads[m] += size
            rows = np.empty((len(idx), 5))

            def one(share: list[int]) -> None:
                rows[share] = fastsum.error_sums_many([(items[idx[j]][1], items[idx[j]][2]) for j in share])

            for_each(one, [s for s in shares if s], [loads[m] for m, s in enumerate(shares) if s])
        return {**sums, **_finite_rows(idx, rows, steps)}

    @staticmethod
    def _scaled_sums(items: list, steps: list, idx: list[int]) -> dict[int, list[float]]:
        """The compiled figures of the fixed-point pairs ``idx`` (float32 reference, :class:`ScaledIntegers`), one
        kernel call each, on up to one thread per core (:func:`for_each`), kept where finite as in
        :meth:`_kernel_sums`."""
        rows = np.full((len(idx), 5), np.nan)

        def one(j: int) -> None:
            got = fastsum.error_sums_scaled(items[idx[j]][1], items[idx[j]][2])
            if got is not None:
                rows[j] = got

        for_each(one, list(range(len(idx))), [items[k][2].nbytes for k in idx])
        return _finite_rows(idx, rows, steps)


def _finite_rows(idx: list[int], rows: np.ndarray, steps: list) -> dict[int, list[float]]:
    """Item index -> its five kernel figures, for the rows whose figures are finite (also divided by the item's
    quantization step); the others go the numpy way, which counts non-finite values."""
    step = np.array([1.0 if steps[k] is None else steps[k] for k in idx])
    with np.errstate(all="ignore"):
        ok = np.isfinite(rows).all(axis=1) & np.isfinite(rows[:, 3] / step) & np.isfinite(rows[:, 4] / step)
    return {k: row for k, row, good in zip(idx, rows.tolist(), ok.tolist()) if good}


def _update(st: ErrorStats, a: np.ndarray, b: np.ndarray, scale: tuple | None) -> None:
    st.update(a, b, np.asarray(scale[0]) if scale else None, scale[1] if scale else 1)


def reduce_pairs(tensors: list[TensorError], va: dict, vb: dict) -> None:
    """Add one sample's captured values (``va`` of the reference stage, ``vb`` of the test stage, by tensor name)
    to the accumulated error of every pair (:class:`Updates`)."""
    u = Updates()
    for te in tensors:
        u.pair(te, va.get(te.codec.a_value if te.codec else te.a_tensor), vb.get(te.b_tensor))
    u.apply()
