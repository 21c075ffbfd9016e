"""The verdict's test for a change that computes another function (``graphaudit.verdict.SYSTEMATIC_LSB``).

A change measured alone in a fixed-point transition is read on its own int8 grid against the calibrated stage's
fake-quantized value on that grid. The figures here are accumulated by graphaudit's own ``ErrorStats`` from values
computed with numpy from the definitions: a hard-sigmoid of slope 1/6 (what Horizon's HzLut table computes, checked
in its runtime by tests/horizon_runtime/test_lowering_other_function.py) against the model's alpha 0.2; a faithful
lowering that rounds its intermediate step differently (at most 1 LSB off per element); an error confined to a few
saturated elements. Only the first is another function.
"""

from __future__ import annotations

import numpy as np

from graphaudit.numeric.metrics import ErrorStats
from graphaudit.numeric.summary import RegionSummary, TransitionSummary
from graphaudit.verdict_toolchain import SYSTEMATIC_LSB, SYSTEMATIC_SPREAD, offset_error, systematic

S = 1 / 127  # the int8 grid of a [0, 1] output (HzCalibration threshold 1)


def _grid(v):
    return np.clip(np.rint(v / S), -128, 127) * S


def _region(ref, got, kind="replaced") -> RegionSummary:
    st = ErrorStats()
    st.update(ref, got, S)
    return RegionSummary(kind=kind, pattern="HardSigmoid -> HzLut", b_nodes=["n"], **{
        k: v for k, v in st.to_dict().items() if k in ("cosine", "sqnr_db", "rel_l2", "max_abs", "lsb_max",
                                                       "lsb_mean", "samples", "elements")})


def _x(n=4096, seed=0):
    return np.random.default_rng(seed).normal(0.0, 2.0, n)


def test_another_function_issystematic():
    x = _x()
    ref, got = _grid(np.clip(0.2 * x + 0.5, 0, 1)), _grid(np.clip(x / 6 + 0.5, 0, 1))
    r = _region(ref, got)
    # by the formula: |x/5 - x/6| = |x|/30 where neither saturates; E|x| = 2 sqrt(2/pi) = 1.6 for sigma 2, so about
    # 0.053 = 6.8 steps of 1/127 there, less where both saturate
    assert r.lsb_mean > 3.0
    assert r.lsb_mean >= SYSTEMATIC_LSB and r.lsb_mean >= SYSTEMATIC_SPREAD * r.lsb_max
    assert offset_error(r)


def test_faithful_lowering_is_not():
    x = _x(seed=1)
    y = np.clip(0.2 * x + 0.5, 0, 1)
    ref = _grid(y)
    # an intermediate rounding: the result rounded from a value up to half a step off, so at most 1 LSB per element
    got = _grid(y + np.random.default_rng(2).uniform(-0.5, 0.5, y.size) * S)
    r = _region(ref, got)
    assert r.lsb_max <= 1.0 + 1e-9 and r.lsb_mean < SYSTEMATIC_LSB
    assert not offset_error(r)


def test_a_few_saturated_elements_are_not():
    x = _x(seed=3) * 10
    ref = _grid(np.where(x > 0, x, 0.25 * x) / 60)  # a PRelu-like output
    got = ref.copy()
    idx = np.argsort(ref)[:40]  # the 40 most negative values saturate at the grid's edge in the test stage
    got[idx] = np.maximum(ref[idx], -60 * S)
    r = _region(ref, got)
    if r.lsb_mean >= SYSTEMATIC_LSB:  # large enough on average, but confined to a few elements
        assert r.lsb_mean < SYSTEMATIC_SPREAD * r.lsb_max
    assert not offset_error(r)


def test_inserted_changes_are_left_to_quantization():
    x = _x()
    r = _region(_grid(np.clip(0.2 * x + 0.5, 0, 1)), _grid(np.clip(x / 6 + 0.5, 0, 1)))
    r.kind = "inserted"
    t = TransitionSummary.from_dict({"a": "calibrated", "b": "quantized", "regions": [r.to_dict()],
                                     "threshold": 0.99, "tensors": [], "outputs": []})
    assert systematic(t) == []
    r.kind = "replaced"
    t = TransitionSummary.from_dict({"a": "calibrated", "b": "quantized", "regions": [r.to_dict()],
                                     "threshold": 0.99, "tensors": [], "outputs": []})
    assert [x.b_nodes for x in systematic(t)] == [["n"]]
