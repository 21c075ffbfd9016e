"""The float64 error sums of two float32 tensors in one compiled pass (numba, optional: ``pip install graphaudit[fast]``).

:meth:`graphaudit.numeric.metrics.ErrorStats.update` reads a tensor pair in numpy blocks (two float64 copies and
six passes per block, about 5-7 ns per element pair on the 2-core development machine). This kernel reads each
float32 pair once and keeps the sums in registers: on PP-OCRv4 det original -> optimized (328 aligned pairs, 225 M
element pairs per sample) the numeric step of 4 samples took 7.6 s instead of 8.9 s (``bench/bench_compare.py``'s
case, medians of 3 interleaved runs at load average 3.3-4.7; plain inference of both stages 5.9 s), and 5.0 s
instead of 9.0 s in another set of rounds at load 2.6-3.0 (floor 5.2 s). It is used only after
:func:`enable` succeeded (numba imports), which :func:`graphaudit.numeric.reduction.reduce_pairs` calls when one
sample's large tensors reach :data:`ENABLE_MIN_ELEMENTS`: importing numba and loading the compiled kernel cost
about 0.8 s once per process (the kernel is compiled on first use and cached by numba), repaid within two samples
of that size, while small models never pay it. ``GRAPHAUDIT_NUMPY_SUMS=1`` in the environment keeps the numpy
route.

Precision: the same float64 sums of the same float32 values (exact float64 products and differences), added in
another order: blocks of :data:`BLOCK` elements, each summed in a few partial sums the compiler keeps (``reassoc``),
then the block sums added in sequence. For sums of n non-negative terms the relative difference to any other order
is at most about (BLOCK + n / BLOCK) * 2^-53, 3e-11 at n = 1e9, below the 1e-9 relative the report's figures are held
to (tests/test_fastsum.py; measured: 6.7e-15 on the det pair's 328 pairs). Non-finite values are not handled here:
a non-finite sum sends the pair back to the numpy route, which counts them.
"""

from __future__ import annotations

import math
import os

import numpy as np

__all__ = ["BLOCK", "ENABLE_MIN_ELEMENTS", "MIN_ELEMENTS", "enable", "enabled", "error_sums"]

#: Elements summed into one set of partial sums before they are added to the totals (see the module's precision).
BLOCK = 4096

#: Smallest tensor (elements) worth a call of the kernel; smaller ones stay on the numpy route.
MIN_ELEMENTS = 1 << 16

#: One sample's large tensor pairs (elements in total) from which :func:`enable` is worth its one-time cost: about
#: 0.3 s of numpy work per sample on the development machine.
ENABLE_MIN_ELEMENTS = 64 << 20

_kernel = None
_tried = False


def _kernel_source(a, b):  # pragma: no cover - compiled by numba (:func:`_compile`); tested through error_sums
    """The kernel as numba compiles it: flat float32 ``a`` and ``b`` of one size -> the five float64 figures."""
    tot_aa = tot_bb = tot_ee = tot_abs = tot_max = 0.0
    for s in range(0, a.size, BLOCK):
        xa, xb = a[s:s + BLOCK], b[s:s + BLOCK]
        aa = bb = ee = sa = mx = 0.0
        for i in range(xa.size):
            x = np.float64(xa[i])
            y = np.float64(xb[i])
            e = y - x
            aa += x * x
            bb += y * y
            ee += e * e
            ae = abs(e)
            sa += ae
            mx = ae if ae > mx else mx
        tot_aa += aa
        tot_bb += bb
        tot_ee += ee
        tot_abs += sa
        tot_max = mx if mx > tot_max else tot_max
    return tot_aa, tot_bb, tot_ee, tot_abs, tot_max


def _compile():
    import numba

    # nogil: reduction threads run side by side; cache: compiled once per machine (numba's cache directory);
    # reassoc: the partial sums of a block may be kept in several lanes (vectorized), see the module's precision
    return numba.njit(nogil=True, cache=True, fastmath={"reassoc"})(_kernel_source)


def enable() -> bool:
    """Import numba and compile (or load) the kernel, once per process; True when the kernel is in use. False when
    numba is not installed, fails to import or compile, or ``GRAPHAUDIT_NUMPY_SUMS`` is set: the numpy route stays."""
    global _kernel, _tried
    if not _tried:
        _tried = True
        if not os.environ.get("GRAPHAUDIT_NUMPY_SUMS"):
            try:
                kernel = _compile()
                kernel(np.zeros(2, np.float32), np.zeros(2, np.float32))  # compile or load from numba's cache now
                _kernel = kernel
            except Exception:  # noqa: BLE001 - numba missing or broken: the numpy route is always there
                _kernel = None
    return _kernel is not None


def enabled() -> bool:
    """True once :func:`enable` has put the kernel in use."""
    return _kernel is not None


def error_sums(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float, float] | None:
    """``(sum a^2, sum b^2, sum (b-a)^2, sum |b-a|, max |b-a|)`` in float64 of two flat float32 arrays of one size,
    or None when the kernel does not apply: not enabled, other dtypes, not contiguous, fewer than
    :data:`MIN_ELEMENTS` elements, or a non-finite sum (the caller's numpy route then counts the NaN/inf values).
    Releases the GIL while it runs, so reduction threads run side by side."""
    if (_kernel is None or a.size < MIN_ELEMENTS or a.dtype != np.float32 or b.dtype != np.float32
            or a.size != b.size or not a.flags.c_contiguous or not b.flags.c_contiguous):
        return None
    sums = _kernel(a.reshape(-1), b.reshape(-1))
    if not all(math.isfinite(x) for x in sums):  # a finite sum of squares means every value is finite
        return None
    return tuple(float(x) for x in sums)
