"""Streaming statistics of the user's input data, per input and channel (for the input-contract rules)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from .samplestats import SampleSet
from .spec import MAX_STATS_ELEMENTS, data_error

__all__ = ["InputStats", "data_stats", "guess_layout", "stats_dict", "MAX_SAMPLE_RANGES", "MAX_STATS_ELEMENTS"]

#: Samples whose per-channel value range is kept (for the per-sample value-domain judgement).
MAX_SAMPLE_RANGES = 10_000


def guess_layout(shape: tuple) -> str:
    """``"NCHW"``/``"NHWC"`` for rank-4 image-like data from the position of a dim of size 1, 3 or 4, else ``""``."""
    if len(shape) != 4:
        return ""
    c1, c3 = shape[1] in (1, 3, 4), shape[3] in (1, 3, 4)
    if c1 and not c3:
        return "NCHW"
    if c3 and not c1:
        return "NHWC"
    return ""


@dataclass
class InputStats:
    """Statistics of one input over all samples.

    ``channel_*`` (mean, std, min, max) are per channel along the guessed channel axis (rank-4 data), else one entry.
    ``per_sample`` holds per-image statistics (a batched sample counts once per image): constant images,
    spatial correlation, near-duplicates (:mod:`graphaudit.data.samplestats`).
    """

    name: str
    dtype: str
    shape: tuple
    layout: str
    samples: int = 0
    minimum: float = float("inf")
    maximum: float = float("-inf")
    channel_mean: list[float] = field(default_factory=list)
    channel_std: list[float] = field(default_factory=list)
    channel_min: list[float] = field(default_factory=list)
    channel_max: list[float] = field(default_factory=list)
    per_sample: SampleSet = field(default_factory=SampleSet)
    shapes: list[tuple] = field(default_factory=list)  # distinct sample shapes seen (the first 20)
    nonfinite: int = 0  # NaN/inf values seen (the statistics are of the finite values)
    integral: bool = True  # every finite value is a whole number (data from integer pixels)
    sample_ranges: list = field(default_factory=list)  # per sample: (channel min, channel max), the first 10,000
    _n: np.ndarray | None = None
    _s: np.ndarray | None = None
    _ss: np.ndarray | None = None
    _lo: np.ndarray | None = None
    _hi: np.ndarray | None = None

    @property
    def constant_samples(self) -> int:
        """Number of images whose values are all equal."""
        return len(self.per_sample.constant)

    @property
    def mean(self) -> float:
        return float(np.mean(self.channel_mean)) if self.channel_mean else float("nan")


def data_stats(samples: Iterable[dict[str, np.ndarray]], max_samples: int | None = None,
               label: object = "data") -> dict[str, InputStats]:
    """Per-input statistics of streamed samples (one sample in memory at a time; sums in float64).

    Returns input name -> :class:`InputStats`. Raises DataError (naming ``label``) for a sample of more than
    :data:`MAX_STATS_ELEMENTS` elements.
    """
    out: dict[str, InputStats] = {}
    for k, sample in enumerate(samples):
        if max_samples is not None and k >= max_samples:
            break
        for name, arr in sample.items():
            a = np.asarray(arr)
            if a.size > MAX_STATS_ELEMENTS:
                raise data_error(label, f"sample {k} for input {name!r} has shape {list(a.shape)} ({a.size:,} "
                                        f"elements), more than the {MAX_STATS_ELEMENTS:,} graphaudit reads per sample")
            st = out.get(name)
            if st is None:
                st = out[name] = InputStats(name, a.dtype.name, tuple(a.shape), guess_layout(tuple(a.shape)))
            axis = {"NCHW": 1, "NHWC": 3}.get(st.layout)
            v = a.astype(np.float64)
            if axis is None:
                flat = v.reshape(1, -1)
            else:
                flat = np.moveaxis(v, axis, 0).reshape(v.shape[axis], -1)
            fin = np.isfinite(flat)
            n_fin = fin.sum(axis=1)
            if not fin.all():  # statistics of the finite values; the others are counted
                st.nonfinite += int(flat.size - n_fin.sum())
                flat = np.where(fin, flat, np.nan)
            if st._s is None or st._s.shape[0] != flat.shape[0]:
                st._s, st._ss, st._n = np.zeros(flat.shape[0]), np.zeros(flat.shape[0]), np.zeros(flat.shape[0])
                st._lo, st._hi = np.full(flat.shape[0], np.inf), np.full(flat.shape[0], -np.inf)
            if n_fin.all():
                lo, hi = np.nanmin(flat, axis=1), np.nanmax(flat, axis=1)
                st._lo, st._hi = np.minimum(st._lo, lo), np.maximum(st._hi, hi)
                if len(st.sample_ranges) < MAX_SAMPLE_RANGES:
                    st.sample_ranges.append(([float(x) for x in lo], [float(x) for x in hi]))
                st.minimum = min(st.minimum, float(lo.min()))
                st.maximum = max(st.maximum, float(hi.max()))
            elif n_fin.any():
                with np.errstate(all="ignore"):
                    st._lo = np.fmin(st._lo, np.nanmin(np.where(fin, flat, np.inf), axis=1))
                    st._hi = np.fmax(st._hi, np.nanmax(np.where(fin, flat, -np.inf), axis=1))
                st.minimum, st.maximum = min(st.minimum, float(st._lo.min())), max(st.maximum, float(st._hi.max()))
            if st.integral and n_fin.any():
                vals = flat[fin]
                st.integral = bool(np.all(vals == np.round(vals)))
            st._s += np.nansum(flat, axis=1)
            st._ss += np.nansum(flat * flat, axis=1)
            st._n += n_fin
            st.samples += 1
            if tuple(a.shape) not in st.shapes and len(st.shapes) < 20:
                st.shapes.append(tuple(a.shape))
            for image in (v if v.ndim == 4 and axis is not None else [None]):  # per image of a batch
                st.per_sample.add(v if image is None else image[None], axis)
    for st in out.values():
        if st._n is not None and np.all(st._n > 0):
            m = st._s / st._n
            st.channel_mean = [float(x) for x in m]
            st.channel_std = [float(x) for x in np.sqrt(np.maximum(st._ss / st._n - m * m, 0.0))]
            st.channel_min = [float(x) for x in st._lo]
            st.channel_max = [float(x) for x in st._hi]
    return out


def stats_dict(st: InputStats) -> dict:
    """JSON-ready statistics of one input."""
    return {"dtype": st.dtype, "shape": list(st.shape), "layout": st.layout, "samples": st.samples,
            "min": st.minimum, "max": st.maximum, "channel_mean": st.channel_mean, "channel_std": st.channel_std,
            "channel_min": st.channel_min, "channel_max": st.channel_max,
            "constant_samples": st.constant_samples, "nonfinite": st.nonfinite, "integral": st.integral, "shapes": [list(x) for x in st.shapes],
            "per_sample": st.per_sample.to_dict()}
