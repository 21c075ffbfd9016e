"""Random samples for a model's inputs, deterministic for a seed (when the user gives no data)."""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np

from .source import DataSource
from .spec import InputSpec, check_specs, data_error, dtype_kind, fmt_shape, is_static

__all__ = ["random_source"]

_LABEL = "--random"

#: Most elements one random sample may hold, all inputs together: 2**26 = 67,108,864 (256 MiB of float32). Every stage
#: runs the sample and keeps its compared tensors, so a larger input cannot be compared within a few GB; the largest
#: real model inputs (1x3x4096x4096 = 50,331,648) stay below it. Dims of 2**31 x 2**31 or 2**62 are refused here,
#: in one line, instead of failing inside numpy.
MAX_SAMPLE_ELEMENTS = 2 ** 26


class _RandomChunk:
    """``count`` samples; sample ``i`` drawn from the generator seeded with ``(seed, i)``."""

    def __init__(self, plans: list[tuple[str, np.dtype, tuple[int, ...], Any, Any]], n: int, seed: int):
        self.plans, self.count, self.seed = plans, n, seed

    def samples(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(self.count):
            rng = np.random.default_rng((self.seed, i))  # sample i does not depend on n
            yield {name: _draw(rng, dt, shape, lo, hi) for name, dt, shape, lo, hi in self.plans}


def _draw(rng: np.random.Generator, dt: np.dtype, shape: tuple[int, ...], lo: Any, hi: Any) -> np.ndarray:
    """Uniform values of ``dt``: floats in ``[lo, hi)``, integers in ``[lo, hi]``, bools False/True."""
    k = dtype_kind(dt)
    if k == "f":
        a = (lo + (hi - lo) * rng.random(shape)).astype(dt)
        wide = a.astype(np.float64)
        bad = (wide >= hi) | (wide < lo)  # rounding to a narrow dtype can reach `high`
        if bad.any():
            a[bad] = np.asarray((lo + hi) / 2).astype(dt)
        return a
    if k == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    a = rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64 if dt.kind == "V" else dt)
    return a.astype(dt)


def _check_args(n: Any, seed: Any, low: float | None, high: float | None) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise data_error(_LABEL, f"n must be a positive int, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise data_error(_LABEL, f"seed must be a non-negative int, got {seed!r}")
    if low is not None and high is not None and not low < high:
        raise data_error(_LABEL, f"low ({low}) must be below high ({high})")


def _shape(spec: InputSpec, dims: dict[str, int], where: str) -> tuple[int, ...]:
    """The concrete shape of ``spec``: symbolic dims from ``dims``, a free first dim (the batch) 1."""
    if spec.shape is None:
        raise data_error(where, "unknown rank, cannot make random data")
    shape = []
    for i, d in enumerate(spec.shape):
        if is_static(d):
            shape.append(int(d))
        elif isinstance(d, str) and d in dims:
            v = dims[d]
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise data_error(where, f"dims[{d!r}] must be a positive int, got {v!r}")
            shape.append(int(v))
        elif i == 0:
            shape.append(1)
        else:
            raise data_error(where, f"symbolic dim {i} ({d!r}) of shape {fmt_shape(spec.shape)} needs a value: "
                                    f"give the input's shape (command line: --input-shape {spec.name}=1x3x...)")
    return tuple(shape)


def _value_range(dt: np.dtype, low: float | None, high: float | None, where: str) -> tuple[Any, Any]:
    """``(lo, hi)`` for :func:`_draw`: floats ``[lo, hi)``, integers ``[lo, hi]`` within the dtype, bools None."""
    k = dtype_kind(dt)
    if k == "f":
        lo = -1.0 if low is None else float(low)
        hi = 1.0 if high is None else float(high)
        if not lo < hi:
            raise data_error(where, f"empty range [{lo}, {hi})")
        return lo, hi
    if k in "iu":
        try:
            info = np.iinfo(dt)
        except ValueError:
            import ml_dtypes  # extension ints are registered by ml_dtypes
            info = ml_dtypes.iinfo(dt)
        lo = int(info.min) if low is None else max(math.ceil(low), int(info.min))
        hi = int(info.max) if high is None else min(math.ceil(high) - 1, int(info.max))
        if lo > hi:
            raise data_error(where, f"no {dt.name} value in [{low}, {high})")
        return lo, hi
    if k == "b":
        return None, None
    raise data_error(where, f"cannot make random data of dtype {dt.name}")


def random_source(inputs: list[InputSpec], n: int, seed: int = 0, low: float | None = None,
                  high: float | None = None, dims: dict[str, int] | None = None) -> DataSource:
    """``n`` random samples for the inputs, deterministic for a seed (kind ``"random"``, domain ``"tensor"``).

    Sample ``i`` depends only on ``(seed, i)``: the first samples of ``n=10`` equal those of ``n=3``.

    Parameters
    ----------
    inputs : list of InputSpec
    n : int
        Number of samples (>= 1).
    seed : int
        Seed (>= 0).
    low, high : float, optional
        Value range ``[low, high)``. Float inputs: uniform, default ``[-1, 1)``. Integer inputs:
        uniform integers ``>= low`` and ``< high`` clipped to the dtype range; default the whole
        dtype range (``[0, 256)`` for uint8). Bool inputs: uniform ``False``/``True``.
    dims : dict of str to int, optional
        Values of symbolic dims by symbol name. A symbolic (or ``None``/non-positive) first dim
        without a value is the batch and becomes 1.

    Returns
    -------
    DataSource
        Arrays of the inputs' dtypes and shapes.

    Raises
    ------
    DataError
        ``n`` or ``seed`` invalid, ``low >= high``, an empty integer range, an input of unknown rank,
        a non-batch symbolic dim without a value in ``dims``, a dtype random data cannot be made for
        (complex, string), or a sample of more than :data:`MAX_SAMPLE_ELEMENTS` elements.
    """
    inputs = check_specs(inputs, _LABEL)
    _check_args(n, seed, low, high)
    dims = dict(dims or {})
    plans = []
    for spec in inputs:
        dt = np.dtype(spec.dtype)
        where = f"{_LABEL}: input {spec.name!r}"
        shape = _shape(spec, dims, where)
        lo, hi = _value_range(dt, low, high, where)
        plans.append((spec.name, dt, shape, lo, hi))
    total = sum(math.prod(p[2]) for p in plans)
    if total > MAX_SAMPLE_ELEMENTS:
        big = max(plans, key=lambda p: math.prod(p[2]))
        raise data_error(_LABEL, f"input {big[0]!r} of shape {fmt_shape(big[2])}: one sample would hold {total:,} "
                                 f"elements, more than the {MAX_SAMPLE_ELEMENTS:,} random samples are made for "
                                 "(give --data, or --input-shape NAME=1x3x... for a smaller shape)")
    return DataSource("random", None, "tensor", inputs, [_RandomChunk(plans, int(n), int(seed))])
