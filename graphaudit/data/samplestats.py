"""Per-sample statistics of a data set: what tells real images from noise, constants and duplicates.

Used by rule P209 (calibration samples that are constant, near-duplicates or noise-like; docs/CASES.md
case 10). Everything is streamed: one sample at a time, a small thumbnail per sample kept for the
duplicate search.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["SampleSet", "spatial_correlation", "thumbnail", "THUMB_SIDE", "MAX_DUPLICATE_SEARCH",
           "NEAR_DUPLICATE_DISTANCE"]

#: Thumbnails are block means on a THUMB_SIDE x THUMB_SIDE grid per channel.
THUMB_SIDE = 16
#: Only the first this-many samples are searched for near-duplicates (the search is quadratic).
MAX_DUPLICATE_SEARCH = 2000
#: Two samples are near-duplicates when their thumbnails differ by less than this share of their contrast
#: (``||a - b|| / max(||a - mean(a)||, ||b - mean(b)||)``): a re-encoded JPEG of one photo stays below it,
#: two photos, or two pages of text on the same white paper, do not.
NEAR_DUPLICATE_DISTANCE = 0.01


def spatial_correlation(x: np.ndarray, channel_axis: int) -> float | None:
    """Mean lag-1 autocorrelation of one image-like sample along its two spatial axes.

    Parameters
    ----------
    x : ndarray, shape (1, C, H, W) or (1, H, W, C)
        One sample (batch 1); ``channel_axis`` is 1 (NCHW) or 3 (NHWC).

    Returns
    -------
    float or None
        ``rho = sum(d[i] * d[i+1]) / sum(d[i]^2)`` with ``d`` the sample minus its per-channel mean,
        averaged over the height and width directions: about 0.9 or more for photographs and rendered
        text, about 0 for independent noise. ``None`` when the sample is constant or smaller than 2x2.

    Notes
    -----
    The lag-1 autocorrelation estimator (Box, Jenkins & Reinsel, *Time Series Analysis*, eq. 2.1.12)
    applied to rows and columns; natural images are strongly correlated between neighbouring pixels.
    """
    a = np.moveaxis(np.asarray(x, dtype=np.float64), channel_axis, 1)
    a = a.reshape(-1, a.shape[1], a.shape[2], a.shape[3])
    if a.shape[2] < 2 or a.shape[3] < 2:
        return None
    d = a - a.mean(axis=(2, 3), keepdims=True)
    denom = float(np.einsum("nchw,nchw->", d, d))
    if denom <= 0.0:
        return None
    rho_h = float(np.einsum("nchw,nchw->", d[:, :, 1:, :], d[:, :, :-1, :])) / denom
    rho_w = float(np.einsum("nchw,nchw->", d[:, :, :, 1:], d[:, :, :, :-1])) / denom
    return (rho_h + rho_w) / 2.0


def thumbnail(x: np.ndarray, channel_axis: int | None) -> np.ndarray:
    """A float64 vector summarising one sample for the near-duplicate search.

    Image-like samples (``channel_axis`` 1 or 3, rank 4): block means on a :data:`THUMB_SIDE`
    grid per channel (the image is cropped to a multiple of the block size; images smaller than the
    grid are used whole). Other samples: 256 evenly spaced elements of the flattened sample.
    """
    a = np.asarray(x, dtype=np.float64)
    if channel_axis is None or a.ndim != 4:
        flat = a.ravel()
        if flat.size <= 256:
            return flat.copy()
        return flat[np.linspace(0, flat.size - 1, 256).astype(np.int64)]
    a = np.moveaxis(a, channel_axis, 1)
    n, c, h, w = a.shape
    bh, bw = max(1, h // THUMB_SIDE), max(1, w // THUMB_SIDE)
    gh, gw = h // bh, w // bw
    a = a[:, :, :gh * bh, :gw * bw].reshape(n, c, gh, bh, gw, bw)
    return a.mean(axis=(3, 5)).ravel()


def _finite_means(v: np.ndarray, fin: np.ndarray, channel_axis: int | None) -> list[float]:
    """Mean of the finite values of ``v`` (``fin``: where they are), per channel along ``channel_axis`` or one
    entry (None); NaN where there is none. Empty for an empty sample."""
    if not v.size:
        return []
    if channel_axis is None:
        vals, ok = v.reshape(1, -1), fin.reshape(1, -1)
    else:
        vals = np.moveaxis(v, channel_axis, 0).reshape(v.shape[channel_axis], -1)
        ok = np.moveaxis(fin, channel_axis, 0).reshape(v.shape[channel_axis], -1)
    n = ok.sum(axis=1)
    s = np.where(ok, vals, 0.0).sum(axis=1)
    return [float(a / k) if k else float("nan") for a, k in zip(s, n)]


@dataclass
class SampleSet:
    """Per-sample statistics of one input, accumulated with :meth:`add`.

    Attributes
    ----------
    channel_means : list of list of float
        Per sample, the mean of each channel (one entry when the data have no channel axis).
    correlations : list of float
        Per image-like sample, :func:`spatial_correlation` (constant samples are left out).
    constant : list of int
        Indices of samples whose values are all equal.
    constant_values : list of float
        Their values, in the same order.
    duplicates : list of tuple of int
        ``(i, j)``: sample ``j`` is a near-duplicate of the earlier sample ``i`` (first match only).
    searched : int
        How many samples took part in the duplicate search (at most :data:`MAX_DUPLICATE_SEARCH`).
    """

    channel_means: list[list[float]] = field(default_factory=list)
    correlations: list[float] = field(default_factory=list)
    constant: list[int] = field(default_factory=list)
    constant_values: list[float] = field(default_factory=list)
    duplicates: list[tuple[int, int]] = field(default_factory=list)
    searched: int = 0
    _thumbs: list[np.ndarray] = field(default_factory=list, repr=False)
    _norms: list[float] = field(default_factory=list, repr=False)
    _thumb_ids: list[int] = field(default_factory=list, repr=False)  # the sample index of each thumbnail

    def add(self, x: np.ndarray, channel_axis: int | None) -> None:
        """Account one sample (any shape; ``channel_axis`` as for :func:`thumbnail`). A sample holding NaN or
        infinite values (rule P209 counts them) adds the channel means of its finite values (NaN for a channel
        without any) and is left out of the constant, noise and near-duplicate checks, without numpy warnings."""
        i = len(self.channel_means)
        v = np.asarray(x, dtype=np.float64)
        fin = np.isfinite(v)
        if not fin.all():
            self.channel_means.append(_finite_means(v, fin, channel_axis))
            return
        if channel_axis is None:
            self.channel_means.append([float(v.mean())] if v.size else [])
        else:
            self.channel_means.append([float(m) for m in np.moveaxis(v, channel_axis, 0).reshape(v.shape[channel_axis],
                                                                                              -1).mean(axis=1)])
        if v.size and v.min() == v.max():
            self.constant.append(i)
            self.constant_values.append(float(v.flat[0]))
        elif channel_axis is not None and v.ndim == 4:
            rho = spatial_correlation(v, channel_axis)
            if rho is not None:
                self.correlations.append(rho)
        if self.searched < MAX_DUPLICATE_SEARCH and v.size:
            t = thumbnail(v, channel_axis)
            n = float(np.linalg.norm(t - t.mean())) if t.size else 0.0
            if self._thumbs and t.shape != self._thumbs[0].shape:
                return  # a sample of another shape is compared with none (P208 names the shape)
            if self._thumbs:
                m = np.stack(self._thumbs)
                dist = np.sqrt(np.einsum("kd,kd->k", m - t, m - t))
                scale = np.maximum(np.asarray(self._norms), n)
                close = np.nonzero((scale > 0) & (dist <= NEAR_DUPLICATE_DISTANCE * scale))[0]
                if close.size:
                    self.duplicates.append((self._thumb_ids[int(close[0])], i))
            self._thumbs.append(t)
            self._norms.append(n)
            self._thumb_ids.append(i)
            self.searched += 1

    @property
    def samples(self) -> int:
        """Number of samples accounted."""
        return len(self.channel_means)

    @property
    def median_correlation(self) -> float | None:
        """Median :func:`spatial_correlation` over the non-constant image-like samples (None without any)."""
        return float(np.median(self.correlations)) if self.correlations else None

    def channel_mean_spread(self) -> list[float]:
        """Per channel, the standard deviation across samples of the per-sample channel mean (data units); the
        samples without a finite value in that channel are left out (NaN when fewer than two remain)."""
        if len(self.channel_means) < 2 or not self.channel_means[0]:
            return []
        m = np.asarray(self.channel_means, dtype=np.float64)
        out = []
        for col in m.T:
            col = col[np.isfinite(col)]
            out.append(float(col.std()) if col.size >= 2 else float("nan"))
        return out

    def to_dict(self) -> dict:
        """JSON-ready summary (no thumbnails)."""
        return {"samples": self.samples, "median_spatial_correlation": self.median_correlation,
                "constant_samples": self.constant, "near_duplicates": [list(p) for p in self.duplicates],
                "duplicate_search_samples": self.searched, "channel_mean_spread": self.channel_mean_spread()}
