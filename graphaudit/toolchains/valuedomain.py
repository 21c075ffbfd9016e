"""Value domains of image inputs, and the ways a harness gets them wrong (normalization applied twice in any form).

An image input that normalizes itself takes an affine function of the pixel value ``p`` (0..255, per channel):

* Horizon 1.x stage models with an ``HzPreprocess`` (and the fixed-point stage's ``HzSQuantizedPreprocess``) take
  ``p - 128`` (the ``*_128`` type) and compute ``((x + 128) - mean) * scale`` themselves (docs/INPUT_CONTRACTS.md
  section 1, measured in Horizon's runtime);
* hb_mapper 1.x calibration files (``cal_data_dir``) hold the pixels themselves, ``p``: the toolchain subtracts 128
  and applies the config's ``mean_value``/``scale_value`` (docs/INPUT_CONTRACTS.md section 3).

A harness that prepares the data for the float model and feeds them to such an input applies part of the
normalization twice. Every such mistake is again affine in ``p`` (:data:`FORMS`), so each is recognised from the
per-channel value range of the data alone: under a hypothesis ``d = a * p + b`` the data imply pixels
``(d - b) / a``, and the right hypothesis is the one whose implied pixels fill 0..255.

Decision rule (:func:`judge_domain`), per input over all samples, per channel ``c``:

1. under the contract, the implied pixel range ``[lo_c, hi_c]`` must lie within ``[-TOL, 255 + TOL]`` (``TOL`` =
   :data:`TOLERANCE` pixel levels: a mean of 127.5 against the 128 offset, rounding) and span, in its widest channel,
   at least :data:`MIN_SPAN` levels (a quarter of the pixel range);
2. when it does, there is no finding; when the data stay inside the domain but span less, there is a finding only if
   some form below satisfies 1.;
3. otherwise the finding names the form that satisfies 1. with the widest implied range (the true form fills
   0..255; a wrong one that also stays inside covers only part of it), ties within ``TOL`` going to the first in
   :data:`FORMS` order (listing the forms that give the same data, such as "mean and scale twice" and "scale twice"
   when the mean is 128), or, when none does, says the values lie outside the domain and by how much.

The false-alarm rate of this rule on correct data is measured by the tests on every real stage set (README
"Input-contract rules").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["PixelDomain", "Form", "FORMS", "STANDARDIZED", "DomainVerdict", "judge_domain", "judge_samples",
           "undo_formula",
           "TOLERANCE", "MIN_SPAN", "channel_ranges"]

#: Pixel levels by which implied pixels may leave 0..255 (a mean of 127.5 against the 128 offset, rounding).
TOLERANCE = 2.0
#: Pixel levels the widest channel must span under a hypothesis for it to explain the data.
MIN_SPAN = 64.0


@dataclass(frozen=True)
class PixelDomain:
    """What an image input takes, as an affine function of the pixel value: ``d = p + offset`` (per channel), and
    the normalization ``(p - mean) * scale`` the model (or the toolchain) applies after it.

    ``mean``/``scale`` are per channel in the input's colour order (0..255 units; ``mean`` 0 and ``scale`` 1 when
    the config's ``norm_type`` has none); ``offset`` is -128 for Horizon ``*_128`` inputs and 0 for calibration
    files; ``label`` says it in words (``"pixel - 128 in [-128, 127]"``).
    """

    offset: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    label: str

    @property
    def channels(self) -> int:
        return max(len(self.mean), len(self.scale), 1)

    def per_channel(self, v: tuple[float, ...]) -> np.ndarray:
        """``v`` broadcast to :attr:`channels` entries (a single value repeats)."""
        arr = np.asarray(v, dtype=np.float64).ravel()
        return np.full(self.channels, arr[0]) if arr.size == 1 else arr[:self.channels]


def _want(dom: PixelDomain) -> str:
    return "pixel - 128" if dom.offset else "pixels 0..255"


@dataclass(frozen=True)
class Form:
    """One way data can be prepared: ``d = a * p + b`` per channel, built from a :class:`PixelDomain`.

    ``key`` names it in reports (``"mean_twice"``); ``code`` is the input rule that reports it (P203 normalization
    applied twice, P205 the -128 offset, P206 [0, 1] data); ``title`` and ``fix`` are the words a user reads.
    """

    key: str
    code: str
    title: str
    fix: str
    title_pixels: str = ""  # the title for a domain of plain pixels (offset 0: calibration files), when it differs

    def describe(self, dom: PixelDomain) -> str:
        """The title for ``dom``."""
        return (self.title_pixels if self.title_pixels and not dom.offset else self.title).format(want=_want(dom))

    def advice(self, dom: PixelDomain) -> str:
        """The fix for ``dom``, as a sentence."""
        text = self.fix.format(want=_want(dom))
        return text[:1].upper() + text[1:] + "."


    def affine(self, dom: PixelDomain) -> tuple[np.ndarray, np.ndarray] | None:
        """``(a, b)`` per channel, or None when the form does not apply to the domain (no mean to repeat...)."""
        m, s, o = dom.per_channel(dom.mean), dom.per_channel(dom.scale), dom.offset
        one, zero = np.ones(dom.channels), np.zeros(dom.channels)
        has_mean, has_scale = bool(np.any(np.abs(m) > 0.5)), bool(np.any(np.abs(s - 1) > 1e-3))  # half a level
        k = self.key
        if k == "contract":
            return one, zero + o
        if k == "normalized_twice":
            return (s, -m * s) if has_mean and has_scale else None
        if k == "mean_twice":
            return (one, o - m) if has_mean else None
        if k == "mean_for_offset":
            return (one, -m) if has_mean and o else None
        if k == "scale_twice":
            return (s, o * s) if has_scale else None
        if k == "scale_no_offset":
            return (s, zero) if has_scale and o else None
        if k == "unit_range":
            return one / 255.0, zero
        if k == "minus_one_one":
            return one / 127.5, zero - 1.0
        if k == "missing_offset":
            return (one, zero) if o else None
        if k == "offset_added":
            return one, zero + o - 128.0
        raise KeyError(k)


#: The contract itself (never a finding).
CONTRACT = Form("contract", "", "as the input takes them", "")

#: Harness mistakes, in the order a tie is resolved (the most common first).
FORMS: tuple[Form, ...] = (
    Form("normalized_twice", "P203", "normalized twice (mean and scale): the data are the float model's normalized "
         "input, (pixel - mean) * scale, and the model normalizes again",
         "feed {want}: drop the harness's mean subtraction and scaling"),
    Form("mean_twice", "P203", "mean subtracted twice: the harness subtracted the mean, and the model subtracts it "
         "again", "drop the mean subtraction from the harness (the model's normalization does it)",
         "mean subtracted twice: the data are pixel - mean, and the toolchain subtracts the mean again"),
    Form("mean_for_offset", "P203", "mean subtracted in place of the -128 offset: the model subtracts the mean again",
         "subtract 128, not the mean, in the harness (the model's normalization subtracts the mean)"),
    Form("scale_twice", "P203", "scale applied twice: the harness multiplied by the scale, and the model multiplies "
         "again", "drop the scaling from the harness (the model's normalization does it)"),
    Form("unit_range", "P206", "[0, 1] data (pixels divided by 255) where {want} is expected",
         "feed {want}, not pixel / 255"),
    Form("scale_no_offset", "P203", "scale applied in place of the -128 offset: the data are pixel * scale, and the "
         "model scales again", "feed pixel - 128 without scaling"),
    Form("minus_one_one", "P203", "[-1, 1] data (pixel / 127.5 - 1, an already normalized input) where {want} is "
         "expected", "feed {want} without normalizing"),
    Form("missing_offset", "P205", "raw 0..255 pixels: the -128 offset is missing", "subtract 128 in the harness"),
    Form("offset_added", "P205", "the -128 offset applied twice",
         "subtract 128 once for *_128 inputs and not at all for calibration files",
         "the -128 offset applied to data that must be pixels 0..255 (the toolchain subtracts 128 itself)"),
)


#: Data normalized by some mean/std other than the model's (no affine form of this input's constants explains them).
STANDARDIZED = Form("standardized", "P203", "normalized in the harness with a mean/std (values of a few units around "
                    "zero), and the model normalizes again", "feed {want}: drop the harness's normalization")
#: ... recognised when the data, not whole numbers, straddle zero within this many units and span at least
#: STANDARDIZED_MIN_SPAN (flatter data are a constant image, P209's finding).
STANDARDIZED_MAX_ABS = 20.0
STANDARDIZED_MIN_SPAN = 0.5


def _standardized(lo: np.ndarray, hi: np.ndarray, integral: bool) -> bool:
    return (not integral and float(lo.min()) < 0.0 < float(hi.max())
            and max(-float(lo.min()), float(hi.max())) < STANDARDIZED_MAX_ABS
            and float(np.max(hi - lo)) >= STANDARDIZED_MIN_SPAN)


def channel_ranges(minimum: list[float], maximum: list[float], channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel ``(lo, hi)`` arrays of length ``channels``; a single or mismatched range is used for every
    channel (data whose channel axis is not the input's: the ranges are then conservative)."""
    lo, hi = np.asarray(minimum, np.float64).ravel(), np.asarray(maximum, np.float64).ravel()
    if lo.size != channels or hi.size != channels:
        lo, hi = np.full(channels, lo.min()), np.full(channels, hi.max())
    return lo, hi


@dataclass
class Fit:
    """How data fit one hypothesis: implied pixel range per channel, its overflow out of 0..255 and widest span
    (pixel levels)."""

    form: Form
    a: np.ndarray
    b: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def overflow(self) -> float:
        return float(np.max(np.maximum(0.0, -self.lo) + np.maximum(0.0, self.hi - 255.0)))

    @property
    def span(self) -> float:
        return float(np.max(self.hi - self.lo))

    @property
    def fits(self) -> bool:
        return self.overflow <= TOLERANCE and self.span >= MIN_SPAN


def _fit(form: Form, a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> Fit:
    p1, p2 = (lo - b) / a, (hi - b) / a
    return Fit(form, a, b, np.minimum(p1, p2), np.maximum(p1, p2))


def _same(x: tuple[np.ndarray, np.ndarray], y: tuple[np.ndarray, np.ndarray]) -> bool:
    """Two hypotheses give the same data over 0..255 to within one pixel level of either."""
    unit = np.minimum(np.abs(x[0]), np.abs(y[0]))
    return all(float(np.max(np.abs((x[0] * p + x[1]) - (y[0] * p + y[1])) / unit)) <= 1.0 for p in (0.0, 255.0))


@dataclass
class DomainVerdict:
    """What the data are, judged against a :class:`PixelDomain` (:func:`judge_domain`).

    ``form`` is a :class:`Form` of :data:`FORMS`, or None for data outside the domain that no form explains;
    ``also`` lists the keys of forms the data fit equally; ``implied`` the implied pixel range per channel under
    ``form`` (under the contract when ``form`` is None); ``contract_range`` the contract's implied range.
    """

    form: Form | None
    also: list[str] = field(default_factory=list)
    implied: list[list[float]] = field(default_factory=list)
    contract_range: list[list[float]] = field(default_factory=list)
    overflow: float = 0.0
    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)  # judged sample by sample: the samples that have the form

    @property
    def key(self) -> str:
        return self.form.key if self.form is not None else "out_of_domain"

    def correction(self, dom: PixelDomain) -> tuple[np.ndarray, np.ndarray] | None:
        """``(k, c)`` per channel with ``corrected = k * d + c``: the data as the contract wants them (implied pixels
        mapped through the contract), or None when no form explains the data."""
        if self.form is None or not self.a:
            return None
        a, b = np.asarray(self.a), np.asarray(self.b)
        return 1.0 / a, dom.offset - b / a

    def to_dict(self) -> dict:
        return {"form": self.key, "also": list(self.also), "implied_pixels": self.implied,
                "contract_implied_pixels": self.contract_range, "overflow_levels": self.overflow,
                "form_a": self.a, "form_b": self.b}


def judge_domain(minimum: list[float], maximum: list[float], dom: PixelDomain,
                 integral: bool = False) -> DomainVerdict | None:
    """Judge data by their per-channel value range against an input's pixel domain (module docstring's rule).

    Parameters
    ----------
    minimum, maximum : list of float
        Per-channel minimum and maximum of the data over all samples, in the input's channel order (a single value
        stands for every channel).
    dom : PixelDomain
    integral : bool
        Every value is a whole number (data from integer pixels): forms that scale (``|a| != 1``) cannot have made
        them, so only the offset and mean forms are considered (a flat integer image near 128 is not read as
        scaled data).

    Returns
    -------
    DomainVerdict or None
        None when the data fit the contract (or are too flat to tell and no mistake explains them).
    """
    lo, hi = channel_ranges(minimum, maximum, dom.channels)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        return None
    a0, b0 = CONTRACT.affine(dom)
    contract = _fit(CONTRACT, a0, b0, lo, hi)
    if contract.fits:
        return None
    fits, seen = [], [(a0, b0)]
    for form in FORMS:
        ab = form.affine(dom)
        if ab is None or _same(ab, seen[0]) or (integral and np.any(np.abs(np.abs(ab[0]) - 1.0) > 1e-9)):
            continue
        seen.append(ab)
        f = _fit(form, ab[0], ab[1], lo, hi)
        if f.fits:
            fits.append(f)
    rng = [[round(float(x), 3), round(float(y), 3)] for x, y in zip(contract.lo, contract.hi)]
    if not fits and contract.span < MIN_SPAN and _standardized(lo, hi, integral):
        return DomainVerdict(STANDARDIZED, [], rng, rng, round(contract.overflow, 3))
    if not fits and contract.overflow <= TOLERANCE:
        return None  # inside the domain, only flat: nothing explains it better
    if not fits:
        return DomainVerdict(None, [], rng, rng, round(contract.overflow, 3))
    widest = max(f.span for f in fits)
    best = next(f for f in fits if f.span >= widest - TOLERANCE)  # the widest fill; ties in FORMS order
    also = [f.form.key for f in fits if f is not best and _same((f.a, f.b), (best.a, best.b))]
    return DomainVerdict(best.form, also, [[round(float(x), 3), round(float(y), 3)] for x, y in zip(best.lo, best.hi)],
                         rng, round(contract.overflow, 3), [float(x) for x in best.a], [float(x) for x in best.b])


def describe_pixels(lo: float, hi: float) -> str:
    """``"[lo, hi]"`` rounded for messages."""
    return f"[{lo:.4g}, {hi:.4g}]" if math.isfinite(lo) and math.isfinite(hi) else "[?, ?]"


def judge_samples(ranges: list[tuple[list[float], list[float]]], dom: PixelDomain,
                  integral: bool = False) -> tuple[DomainVerdict, list[int]] | None:
    """Judge every sample alone (``ranges``: per sample, per-channel minimum and maximum): a data set that mixes
    correct samples with wrong ones keeps a correct overall range and is caught only here.

    Returns the verdict of the most frequent recognised form (or out-of-domain) with the indices of the samples
    that have it, or None when every sample fits the contract.
    """
    by_key: dict[str, list[int]] = {}
    first: dict[str, DomainVerdict] = {}
    for i, (lo, hi) in enumerate(ranges):
        v = judge_domain(lo, hi, dom, integral)
        if v is not None:
            by_key.setdefault(v.key, []).append(i)
            first.setdefault(v.key, v)
    if not by_key:
        return None
    key = max(by_key, key=lambda k: (len(by_key[k]), k != "out_of_domain"))
    return first[key], by_key[key]


def undo_formula(v: DomainVerdict, dom: PixelDomain) -> str:
    """`` To convert data already prepared this way: x' = k * x + c ...`` for a verdict with a correction, else
    ``""``."""
    corr = v.correction(dom)
    if corr is None:
        return ""
    k, c = (np.round(np.asarray(x, np.float64), 6) for x in corr)
    same = bool(np.all(k == k[0]) and np.all(c == c[0]))
    kk = f"{k[0]:.6g}" if same else "[" + ", ".join(f"{x:.6g}" for x in k) + "]"
    cc = (f"{'-' if c[0] < 0 else '+'} {abs(c[0]):.6g}" if same else
          "+ [" + ", ".join(f"{x:.6g}" for x in c) + "]")
    per = "" if same else " per channel"
    return f" To convert data already prepared this way: x' = {kk} * x {cc}{per}."
