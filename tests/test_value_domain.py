"""The value-domain rule (graphaudit.toolchains.valuedomain) on hand-made ranges whose answer follows from the
formulas: d = a p + b per form, pixels p in 0..255, the contract p - 128 (stage inputs) or p (calibration files)."""

from __future__ import annotations

import numpy as np
import pytest

from graphaudit.toolchains.valuedomain import PixelDomain, judge_domain, judge_samples

PPOCR = PixelDomain(-128.0, (127.5,) * 3, (1 / 127.5,) * 3, "pixel - 128")
IMAGENET = PixelDomain(-128.0, (123.675, 116.28, 103.53), (1 / 58.395, 1 / 57.12, 1 / 57.375), "pixel - 128")
CAL = PixelDomain(0.0, (123.675, 116.28, 103.53), (1 / 58.395, 1 / 57.12, 1 / 57.375), "pixels 0..255")


def _range(f, dom):
    m = np.asarray(dom.mean)
    lo, hi = f(np.zeros(3), m), f(np.full(3, 255.0), m)
    return list(np.minimum(lo, hi)), list(np.maximum(lo, hi))


@pytest.mark.parametrize("dom,f,key", [
    (IMAGENET, lambda p, m: p - 128, None),
    (IMAGENET, lambda p, m: (p - m) * np.asarray(IMAGENET.scale), "normalized_twice"),
    (IMAGENET, lambda p, m: p - 128 - m, "mean_twice"),
    (IMAGENET, lambda p, m: p - m, "mean_for_offset"),
    (IMAGENET, lambda p, m: (p - 128) * np.asarray(IMAGENET.scale), "scale_twice"),
    (IMAGENET, lambda p, m: p / 255, "unit_range"),
    (IMAGENET, lambda p, m: p, "missing_offset"),
    (IMAGENET, lambda p, m: p - 256, "offset_added"),
    (CAL, lambda p, m: p, None),
    (CAL, lambda p, m: p - m, "mean_twice"),
    (CAL, lambda p, m: p - 128, "offset_added"),
    (CAL, lambda p, m: p * np.asarray(CAL.scale), "scale_twice"),
])
def test_forms_from_their_formulas(dom, f, key):
    v = judge_domain(*_range(f, dom), dom)
    assert (v.key if v is not None else None) == key


def test_integer_data_are_never_read_as_scaled():
    """Correct integer pixels of a flat grey image (p in 127..129): the scale forms would fit the range, but integer
    data cannot be (p - mean) * scale or p / 255 over 64 levels."""
    lo, hi = [127 - 128.0] * 3, [129 - 128.0] * 3
    assert judge_domain(lo, hi, PPOCR, integral=True) is None
    assert judge_domain([0.0] * 3, [1.0] * 3, PPOCR, integral=True) is None


def test_standardized_with_other_constants():
    """ImageNet-standardized data fed to an input normalizing with PP-OCR's constants: no affine form of the
    input's own constants fits, the values straddle zero within a few units: standardized."""
    m, s = np.array(IMAGENET.mean), np.array(IMAGENET.scale)
    lo, hi = list((0 - m) * s), list((255 - m) * s)
    v = judge_domain(lo, hi, PPOCR)
    assert v is not None and v.key == "standardized" and v.form.code == "P203" and v.correction(PPOCR) is None


def test_mixed_samples_are_judged_one_by_one():
    good = ([-128.0] * 3, [127.0] * 3)
    unit = ([0.0] * 3, [1.0] * 3)
    found = judge_samples([good, unit, unit, good], PPOCR)
    assert found is not None and found[0].key == "unit_range" and found[1] == [1, 2]
    assert judge_samples([good, good], PPOCR) is None
