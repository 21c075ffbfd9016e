"""A test-stage tensor read in the reference tensor's layout, when a toolchain moved its axes.

Toolchains change the layout of intermediate tensors and keep their values: Horizon's fixed-point stage holds
activations in NHWC where the calibrated stage has NCHW, and hb_mapper's optimizer computes an elementwise op on a
transposed tensor (PP-OCRv4 rec: ``p2o.Sub.1`` [1, 40, 120] in the original float model is
``p2o.Sub.1_transpose`` [1, 120, 40] in the optimized one, hb_mapper 1.24.3). Compared element by element in file
order such a pair looks like noise (cosine 0.003 where the transposed values agree to 1e-12).
"""

from __future__ import annotations

import numpy as np

__all__ = ["as_layout_of", "axes_permutation"]

#: Most non-unit axes searched for a permutation (rank 6: 720 candidates, checked on shapes only).
MAX_PERMUTED_RANK = 6


def axes_permutation(shape: tuple, target: tuple) -> tuple[int, ...] | None:
    """The one permutation ``p`` of the axes of ``shape`` with ``tuple(shape[i] for i in p) == target``, both
    shapes taken without their axes of size 1; None when the non-unit dims are the same in the same order (a
    reshape keeps the values' order: no transpose), when no permutation or more than one fits (repeated dims:
    the shapes alone cannot tell which axes moved), or past :data:`MAX_PERMUTED_RANK` non-unit axes.

    The returned axes index the non-unit axes of ``shape`` (``squeezed = [d for d in shape if d != 1]``).
    """
    a = [d for d in shape if d != 1]
    b = [d for d in target if d != 1]
    if a == b or sorted(a) != sorted(b) or len(a) > MAX_PERMUTED_RANK or len(set(a)) != len(a):
        return None
    p = tuple(a.index(d) for d in b)  # distinct dims: the only candidate
    return p


def as_layout_of(v: np.ndarray, shape: tuple) -> np.ndarray:
    """``v`` with its axes moved to the layout of a reference tensor of shape ``shape``, when ``v``'s shape is a
    permutation of it; else ``v`` unchanged (the comparison then reads both in file order, reshaping where only
    unit axes differ).

    - Rank 4, ``v`` NHWC and the reference NCHW (``v.shape[0, 3, 1, 2] == shape``): transposed (0, 3, 1, 2),
      also when H == W (the fixed-point stage's layout, docs/HORIZON.md section 7).
    - Otherwise the one permutation of the non-unit axes (:func:`axes_permutation`); with repeated dims nothing
      is moved.

    Parameters
    ----------
    v : ndarray
        The test stage's value (any dtype).
    shape : tuple of int
        The reference value's shape.

    Returns
    -------
    ndarray
        A view (no copy) of ``v`` in ``shape`` when a permutation applies, else ``v``.
    """
    got = tuple(v.shape)
    shape = tuple(shape)
    if got == shape or v.size != int(np.prod(shape, dtype=np.int64)):
        return v
    if v.ndim == 4 and tuple(got[i] for i in (0, 3, 1, 2)) == shape:
        return np.transpose(v, (0, 3, 1, 2))
    p = axes_permutation(got, shape)
    if p is None:
        return v
    squeezed = v.reshape([d for d in got if d != 1])
    return np.transpose(squeezed, p).reshape(shape)
