"""Integer tensors read as reals block by block: the fixed-point stage's values without their float64 copy."""

from __future__ import annotations

import numpy as np

__all__ = ["ScaledIntegers"]


class ScaledIntegers:
    """The real values ``(q + offset) * scale`` of an integer tensor ``q`` (one scale), in float64, produced a block
    at a time into a caller's buffer (:meth:`block`) instead of as one float64 array.

    Horizon's fixed-point stage holds int8/int16 tensors; decoded whole (:meth:`array`), each is a float64 array
    eight times the integers' size, and one sample of PP-OCRv4 det's quantized stage (273 MB of integers) made 2.2 GB
    of them, held together until the sample was reduced: 7.6 GB peak RSS and two thirds of the comparison's time in
    fresh-memory page faults (hb_mapper 1.24.3 build, Horizon runtime, ``bench/bench_horizon_numeric.py``). The
    metrics read the values in cache-sized blocks anyway (:meth:`graphaudit.numeric.metrics.ErrorStats.update`);
    each block holds exactly the float64 values of :meth:`array` (the same float64 addition and multiplication per
    element), so the figures are the same to the bit.

    Parameters
    ----------
    q : ndarray of int8, int16, int32 or uint8
        The integers, in the reference tensor's layout (C-contiguous: copied if not).
    offset : int
        Added before scaling (128 for Horizon's uint8 activations stored as int8).
    scale : float
        The one quantization step (finite or not: non-finite values reach the metrics as they would in float64).

    Attributes
    ----------
    shape, size : the integers' shape and element count
    dtype : numpy.dtype
        float64, the dtype of the values (so that code choosing a path by dtype never takes this for float32).
    nbytes : int
        The bytes of the values as float64 (``8 * size``): what the reduction's scheduling weighs.
    """

    dtype = np.dtype(np.float64)

    def __init__(self, q: np.ndarray, offset: int, scale: float):
        self.q = np.ascontiguousarray(q)
        if self.q.dtype.kind not in "iu":
            raise TypeError(f"ScaledIntegers takes integers, not {self.q.dtype}")
        self.offset = offset
        self.scale = float(scale)
        self.shape, self.size, self.nbytes = self.q.shape, self.q.size, 8 * self.q.size
        self._flat = self.q.reshape(-1)

    def block(self, out: np.ndarray, start: int) -> np.ndarray:
        """Write the float64 values of elements ``start .. start + out.size - 1`` (flat, C order) into ``out``
        (float64, 1-D) and return it."""
        np.copyto(out, self._flat[start:start + out.size], casting="unsafe")
        out += self.offset
        out *= self.scale
        return out

    def array(self) -> np.ndarray:
        """All values as one float64 array of :attr:`shape` (what :meth:`block` writes, whole)."""
        v = self.q.astype(np.float64)
        v += self.offset
        v *= self.scale
        return v

    def reshape(self, *shape) -> "ScaledIntegers":
        """The same values in another shape of the same size (C order), as ``ndarray.reshape``."""
        return ScaledIntegers(self.q.reshape(*shape), self.offset, self.scale)
