"""Error metrics against direct numpy formulas; accumulators merge exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphaudit.numeric.metrics import ErrorStats, top1_agreement


def test_metrics_match_formulas():
    rng = np.random.default_rng(1)
    a = [rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(3)]
    b = [x + rng.standard_normal(x.shape).astype(np.float32) * 0.05 for x in a]
    s = ErrorStats()
    for x, y in zip(a, b):
        s.update(x, y)
    A = np.concatenate([x.ravel() for x in a]).astype(np.float64)
    B = np.concatenate([y.ravel() for y in b]).astype(np.float64)
    assert s.cosine == pytest.approx(A @ B / np.linalg.norm(A) / np.linalg.norm(B), rel=1e-12)
    assert s.sqnr_db == pytest.approx(10 * np.log10(np.sum(A**2) / np.sum((B - A) ** 2)), rel=1e-12)
    assert s.rel_l2 == pytest.approx(np.linalg.norm(B - A) / np.linalg.norm(A), rel=1e-12)
    assert s.max_abs == pytest.approx(np.max(np.abs(B - A)))
    assert s.samples == 3 and s.count == A.size


def test_merge_equals_single_pass():
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(10) for _ in range(6)]
    ys = [x * 1.01 + 0.01 for x in xs]
    whole, p, q = ErrorStats(), ErrorStats(), ErrorStats()
    for i, (x, y) in enumerate(zip(xs, ys)):
        whole.update(x, y)
        (p if i < 3 else q).update(x, y)
    m = p.merge(q)
    assert (m.cosine, m.sqnr_db, m.max_abs, m.count) == pytest.approx((whole.cosine, whole.sqnr_db, whole.max_abs, whole.count))


def test_lsb_error_per_channel():
    a = np.zeros((1, 2, 2), np.float32)
    b = np.array([[[0.1, -0.2], [0.5, 1.0]]], np.float32)
    s = ErrorStats()
    s.update(a, b, scale=np.array([0.1, 0.5]), axis=1)
    # channel 0: |0.1|/0.1=1, |0.2|/0.1=2 ; channel 1: 0.5/0.5=1, 1.0/0.5=2
    assert s.lsb_max == pytest.approx(2.0) and s.lsb_mean == pytest.approx(1.5)


def test_identical_and_zero():
    s = ErrorStats()
    s.update(np.ones(4), np.ones(4))
    assert s.cosine == pytest.approx(1.0) and math.isinf(s.sqnr_db) and s.rel_l2 == 0.0
    z = ErrorStats()
    z.update(np.zeros(3), np.zeros(3))
    assert z.cosine == 1.0


def test_top1():
    a = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    b = np.array([[0.2, 0.8], [0.4, 0.6], [0.1, 0.9]])
    assert top1_agreement(a, b) == (2, 3)


def test_nonfinite_values_are_counted_per_side():
    """NaN in both stages alike is no divergence; NaN the test stage adds is one."""
    import numpy as np

    from graphaudit.numeric.metrics import ErrorStats

    same = ErrorStats()
    same.update(np.array([np.nan, 1.0, 2.0]), np.array([np.nan, 1.0, 2.0]))
    assert (same.nonfinite_a, same.nonfinite_b, same.diverged_nonfinite) == (1, 1, False)
    new = ErrorStats()
    new.update(np.array([0.5, 1.0, 2.0]), np.array([np.inf, 1.0, np.nan]))
    assert (new.nonfinite_a, new.nonfinite_b, new.diverged_nonfinite) == (0, 2, True)
    assert same.merge(new).to_dict()["nonfinite"] == [1, 3]


def test_identical_stages_producing_nan_do_not_diverge(tmp_path):
    from graphaudit.cli import main

    from .conftest import save_text

    text = '<ir_version: 8, opset_import: ["" : 13]>\ng (float[1,8] x) => (float[1,8] y) { l = Log (x)\n y = Relu (l) }'
    save_text(tmp_path, "m_original.onnx", text)
    save_text(tmp_path, "m_optimized.onnx", text)
    out = tmp_path.parent / f"{tmp_path.name}_out.json"
    # no divergence (both stages alike); the NaN outputs themselves are finding N406, an error: exit 1
    assert main(["explain", str(tmp_path), "--random", "3", "--json", str(out), "--no-report"]) == 1
    import json

    rep = json.loads(out.read_text())
    assert rep["numeric"][0]["first_divergence"] is None
    codes = {f["code"] for f in rep["findings"]}
    assert "N406" in codes and "N401" not in codes


def test_float32_sums_and_per_tensor_lsb_match_formulas():
    """The float32 path (float64 chunk buffers, LSB of one scale from the same pass, several chunks) against numpy
    float64 formulas."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(100_003).astype(np.float32)  # > 3 chunks of 32,768, with a tail
    b = (a + rng.standard_normal(a.size) * 0.02).astype(np.float32)
    s = ErrorStats()
    s.update(a, b, scale=np.array([0.015]), axis=1)
    A, B = a.astype(np.float64), b.astype(np.float64)
    E = np.abs(B - A)
    assert s.sum_aa == pytest.approx(A @ A, rel=1e-12) and s.sum_ab == pytest.approx(A @ B, rel=1e-12)
    assert s.sum_ee == pytest.approx((B - A) @ (B - A), rel=1e-12)
    assert s.max_abs == E.max()
    assert s.lsb_max == pytest.approx(E.max() / 0.015, rel=1e-12) and s.lsb_count == a.size
    assert s.lsb_mean == pytest.approx(np.mean(E / 0.015), rel=1e-12)


def test_per_tensor_lsb_with_nan_drops_it_and_reports_nan_max():
    s = ErrorStats()
    s.update(np.array([0.0, 1.0, 2.0], np.float32), np.array([0.1, np.nan, 2.2], np.float32), scale=0.1)
    assert math.isnan(s.max_abs) and s.lsb_count == 2
    assert s.lsb_mean == pytest.approx((1.0 + 2.0) / 2, rel=1e-6) and s.lsb_max == pytest.approx(2.0, rel=1e-6)


def test_update_many_equals_update_one_by_one():
    """Small tensors reduced as a group give each accumulator the figures of its own update(), to float64
    rounding; a NaN in one tensor stays in that tensor's figures."""
    from graphaudit.numeric.metrics import SMALL_TENSOR, update_many

    rng = np.random.default_rng(4)
    sizes = [1, 7, 300, SMALL_TENSOR, 5000, 12, SMALL_TENSOR - 1, 4096, 4097]
    pairs = [(rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)) for n in sizes]
    pairs[5][1][3] = np.nan
    steps = [None, 0.02, None, 0.5, None, 0.1, None, 0.03, 0.2]
    grouped, alone = [ErrorStats() for _ in sizes], [ErrorStats() for _ in sizes]
    for _ in range(2):  # two samples: the first-sample figures stay those of the first
        update_many([(g, a, b, s) for g, (a, b), s in zip(grouped, pairs, steps)])
        for s1, (a, b), s in zip(alone, pairs, steps):
            s1.update(a, b, s)
    for g, s1 in zip(grouped, alone):
        assert (g.count, g.samples, g.nonfinite_a, g.nonfinite_b, g.lsb_count) == (
            s1.count, s1.samples, s1.nonfinite_a, s1.nonfinite_b, s1.lsb_count)
        for f in ("sum_aa", "sum_bb", "sum_ab", "sum_ee", "max_abs", "lsb_sum", "lsb_max"):
            x, y = getattr(g, f), getattr(s1, f)
            assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-12), f
        assert g.first == pytest.approx(s1.first, rel=1e-12, nan_ok=True)
    assert math.isnan(grouped[5].max_abs) and grouped[5].nonfinite_b == 2
