"""The compiled error sums (graphaudit/numeric/fastsum.py, llvmlite) against numpy float64 formulas and the numpy route.

- the kernel's five figures against float64 sums worked out here (``math.fsum`` of the exact float64 products), on
  sizes that are and are not multiples of its block;
- :class:`ErrorStats` with the kernel against the formulas of its docstring, LSB of one scale and first-sample
  cosine included;
- pairs the kernel does not take (NaN/inf, float16, float64, too small) fall back to the numpy route: figures and
  non-finite counts equal the numpy route's, the counts also known from the arrays;
- a real 3-stage pipeline (PP-OCR cls original -> optimized -> QDQ, isolated regions and outputs against the first
  stage included) compared with the kernel and with the numpy route: every figure of every tensor pair and region
  within 1e-9 relative (the tolerance the report's figures are held to; the two routes add the same float64 terms
  in another order, a few 1e-15 apart on these tensors).

llvmlite is an optional dependency (``graphaudit[fast]``): without it these tests skip.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from graphaudit.numeric import fastsum
from graphaudit.numeric.metrics import ErrorStats

pytest.importorskip("llvmlite")


@pytest.fixture
def kernel():
    """The kernel in use for this test only (module state restored after it)."""
    prev = (fastsum._kernel, fastsum._many, fastsum._scaled, fastsum._tried, fastsum._no_cache)
    fastsum._tried = fastsum._no_cache = False
    assert fastsum.enable()
    yield fastsum._kernel
    fastsum._kernel, fastsum._many, fastsum._scaled, fastsum._tried, fastsum._no_cache = prev


def _pair(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n, dtype=np.float32) * 3
    return a, (a + rng.standard_normal(n, dtype=np.float32) * 1e-2).astype(np.float32)


def _fsum_figures(a: np.ndarray, b: np.ndarray) -> tuple[float, ...]:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    e = b64 - a64  # exact: float32 values differ by a float64-representable amount
    return (math.fsum(a64 * a64), math.fsum(b64 * b64), math.fsum(e * e), math.fsum(np.abs(e)),
            float(np.abs(e).max()))


@pytest.mark.parametrize("n", [fastsum.MIN_ELEMENTS, 3 * fastsum.BLOCK * 40 + 17])
def test_kernel_sums_equal_exact_float64_sums(kernel, n):
    a, b = _pair(n)
    got = fastsum.error_sums(a, b)
    assert got is not None
    for g, w in zip(got, _fsum_figures(a, b)):
        assert g == pytest.approx(w, rel=1e-12)


def test_error_stats_with_kernel_match_formulas(kernel):
    pairs = [_pair(200_003, seed=k) for k in range(3)]
    step = 0.01
    s = ErrorStats()
    for a, b in pairs:
        s.update(a.reshape(1, -1), b.reshape(1, -1), step)
    A = np.concatenate([a for a, _b in pairs]).astype(np.float64)
    B = np.concatenate([b for _a, b in pairs]).astype(np.float64)
    E = B - A
    assert s.cosine == pytest.approx(math.fsum(A * B) / math.sqrt(math.fsum(A * A) * math.fsum(B * B)), rel=1e-12)
    assert s.sqnr_db == pytest.approx(10 * math.log10(math.fsum(A * A) / math.fsum(E * E)), rel=1e-12)
    assert s.rel_l2 == pytest.approx(math.sqrt(math.fsum(E * E) / math.fsum(A * A)), rel=1e-12)
    assert s.max_abs == float(np.abs(E).max())
    assert s.lsb_max == pytest.approx(float(np.abs(E).max()) / step, rel=1e-15)
    assert s.lsb_mean == pytest.approx(math.fsum(np.abs(E)) / step / A.size, rel=1e-12)
    a0, b0 = (x.astype(np.float64) for x in pairs[0])
    eps = ErrorStats.TOOLCHAIN_EPS
    first = (math.fsum(a0 * b0) + eps) / (math.sqrt(math.fsum(a0 * a0)) * math.sqrt(math.fsum(b0 * b0)) + eps)
    assert s.first_sample_cosine == pytest.approx(first, rel=1e-12)
    assert s.samples == 3 and s.count == A.size and s.nonfinite_a == s.nonfinite_b == 0


def _numpy_route(fn):
    saved, fastsum._kernel = fastsum._kernel, None
    saved_scaled, fastsum._scaled = fastsum._scaled, {}
    try:
        return fn()
    finally:
        fastsum._kernel, fastsum._scaled = saved, saved_scaled


def test_nonfinite_and_other_dtypes_fall_back_to_the_numpy_route(kernel):
    a, b = _pair(max(fastsum.MIN_ELEMENTS + 5, 60_005))
    a[[10, 60_000]] = np.nan
    b[[3, 4, 50_000]] = [np.inf, -np.inf, np.nan]
    assert fastsum.error_sums(a, b) is None
    assert fastsum.error_sums(*(x.astype(np.float16) for x in _pair(fastsum.MIN_ELEMENTS))) is None
    assert fastsum.error_sums(*(x.astype(np.float64) for x in _pair(fastsum.MIN_ELEMENTS))) is None
    assert fastsum.error_sums(*_pair(fastsum.MIN_ELEMENTS - 1)) is None
    with_kernel = ErrorStats()
    with_kernel.update(a, b, 0.5)
    numpy_only = _numpy_route(lambda: (s := ErrorStats(), s.update(a, b, 0.5))[0])
    assert (with_kernel.nonfinite_a, with_kernel.nonfinite_b) == (2, 3)
    assert repr(with_kernel.to_dict()) == repr(numpy_only.to_dict())  # NaN figures compare equal as text


def test_environment_variable_keeps_the_numpy_route():
    code = ("import graphaudit.numeric.fastsum as f; import numpy as np; "
            "print(f.enable(), f.enabled(), f.error_sums(np.ones(1 << 17, np.float32), np.ones(1 << 17, np.float32)))")
    env = {**os.environ, "GRAPHAUDIT_NUMPY_SUMS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "False", "None"]
    del env["GRAPHAUDIT_NUMPY_SUMS"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split()[:2] == ["True", "True"]
    env["GRAPHAUDIT_NUMPY_SUMS"] = "0"  # a switch set to off keeps the kernel (breaker run: "0" turned it off)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split()[:2] == ["True", "True"]


def _all_figures(results) -> dict:
    out = {}
    for i, res in enumerate(results):
        for kind, items in (("t", res.tensors), ("ref", res.vs_reference)):
            for te in items:
                out[(i, kind, te.a_tensor, te.b_tensor)] = te.stats
        for r in res.regions:
            out[(i, "region", r.change.pattern, tuple(r.outputs))] = r.stats
    return out


def _close(x: ErrorStats, y: ErrorStats) -> bool:
    fields = ("sum_aa", "sum_bb", "sum_ab", "sum_ee", "max_abs", "lsb_max", "lsb_sum")
    return (x.count, x.samples, x.lsb_count, x.nonfinite_a, x.nonfinite_b) == (
        y.count, y.samples, y.lsb_count, y.nonfinite_a, y.nonfinite_b) and all(
        getattr(x, f) == pytest.approx(getattr(y, f), rel=1e-9, abs=0) for f in fields) and (
        x.first is None) == (y.first is None) and (x.first is None or x.first == pytest.approx(y.first, rel=1e-9))


def test_three_stage_pipeline_figures_equal_the_numpy_route(kernel, samples, monkeypatch):
    from graphaudit.numeric.compare import CompareOptions, compare_stages
    from graphaudit.pipeline import audit

    d = samples / "ort" / "ppocr_cls"
    au = audit([d / f"ppocr_cls_{s}.onnx" for s in ("original", "optimized", "qdq")])
    xs = [{"x": np.load(samples / "data" / "ppocr_cls" / "x" / f"{k}.npy")} for k in range(3)]
    calls = []
    # every float32 pair of a sample goes to the kernel in one call (graphaudit.numeric.reduction.Updates)
    monkeypatch.setattr(fastsum, "_many", lambda k, *args, f=fastsum._many: calls.append(k) or f(k, *args))
    run = lambda: compare_stages(au.stages, au.lineage.alignments, au.changes, xs,  # noqa: E731
                                 CompareOptions(isolated=True))
    fast = _all_figures(run())
    assert sum(calls) > 300  # the kernel did the pairs and region outputs
    slow = _all_figures(_numpy_route(run))
    assert fast.keys() == slow.keys() and len(fast) > 300
    assert sum(1 for k in fast if k[1] == "ref") > 0 and sum(1 for k in fast if k[1] == "region") > 0
    assert any(s.lsb_count for s in fast.values())
    bad = [k for k in fast if not _close(fast[k], slow[k])]
    assert not bad, bad[:5]


def test_updates_in_one_kernel_call_equal_updates_one_by_one(kernel):
    """graphaudit.numeric.reduction.Updates: pairs of every size (one element to 3 blocks), with and without one
    quantization step, a per-channel scale (element-wise LSB, numpy), a float64 pair and a NaN pair (numpy), and an
    accumulator updated twice in the sample (its first-sample figures are its first update's, as one by one)."""
    from graphaudit.numeric.reduction import Updates

    rng = np.random.default_rng(3)
    sizes = [1, 7, 4096, 4097, 3 * fastsum.BLOCK + 5, 70_000]
    pairs = [_pair(n, seed=k) for k, n in enumerate(sizes)]
    nan_a, nan_b = _pair(5000, seed=9)
    nan_b[17] = np.nan
    per_channel = (rng.standard_normal((1, 4, 8, 8)).astype(np.float32),) * 2
    items = [(a, b, None) for a, b in pairs] + [(a, b, ((0.01,), 1)) for a, b in pairs[2:4]] + [
        (nan_a, nan_b, None), (per_channel[0], per_channel[1] + np.float32(0.1), ((0.1, 0.2, 0.3, 0.4), 1)),
        (pairs[4][0].astype(np.float64), pairs[4][1].astype(np.float64), None)]
    one_by_one = [ErrorStats() for _ in items]
    batched = [ErrorStats() for _ in items]
    twice_seq, twice_bat = ErrorStats(), ErrorStats()
    for sample in range(2):
        u = Updates()
        for st_seq, st_bat, (a, b, scale) in zip(one_by_one, batched, items):
            _numpy_route(lambda: st_seq.update(a, b, np.asarray(scale[0]) if scale else None, scale[1] if scale else 1))
            u.add(st_bat, a, b, scale)
        for a, b in (pairs[5], pairs[1]):
            _numpy_route(lambda: twice_seq.update(a, b))
            u.add(twice_bat, a, b)
        u.apply()
    nan_at = len(pairs) + 2
    for k, (x, y) in enumerate(zip(one_by_one + [twice_seq], batched + [twice_bat])):
        if k == nan_at:  # NaN figures: equal as text
            assert repr(x.to_dict()) == repr(y.to_dict())
        else:
            assert _close(x, y), k
    assert twice_bat.first == pytest.approx(twice_seq.first, rel=1e-12)
    assert batched[nan_at].nonfinite_b == 2  # the NaN pair went the numpy way, which counts


@pytest.mark.parametrize("dtype,offset", [(np.int8, 0), (np.int8, 128), (np.int16, 0)])
def test_fixed_point_kernel_sums_equal_exact_float64_sums(kernel, dtype, offset):
    """Integers of the fixed-point stage read as (q + offset) * scale (docs/HORIZON.md section 7) in the compiled
    pass: the five figures against math.fsum of the float64 values worked out here."""
    from graphaudit.numeric.scaledint import ScaledIntegers

    rng = np.random.default_rng(11)
    n = 3 * fastsum.BLOCK * 40 + 17
    info = np.iinfo(dtype)
    q = rng.integers(info.min, info.max + 1, n).astype(dtype)
    scale = 0.0234375 + 2.0 ** -30
    real = (q.astype(np.float64) + offset) * scale
    a = (real + rng.standard_normal(n) * 0.01).astype(np.float32)
    got = fastsum.error_sums_scaled(a, ScaledIntegers(q, offset, scale))
    assert got is not None
    a64 = a.astype(np.float64)
    e = real - a64
    want = (math.fsum(a64 * a64), math.fsum(real * real), math.fsum(e * e), math.fsum(np.abs(e)),
            float(np.abs(e).max()))
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-12)
    assert got[4] == want[4]  # the largest error, exactly
    assert fastsum.error_sums_scaled(a, ScaledIntegers(q.astype(np.int32), offset, scale)) is None  # no int32 kernel


def test_fixed_point_pairs_in_updates_equal_the_numpy_route(kernel):
    """Updates with ScaledIntegers pairs (one large, one with a NaN in the reference, one per-channel scale for the
    element-wise LSB): the kernel's figures within 1e-9 of the numpy route's, the NaN pair counted there."""
    from graphaudit.numeric.reduction import Updates
    from graphaudit.numeric.scaledint import ScaledIntegers

    rng = np.random.default_rng(12)
    q = rng.integers(-128, 128, (1, 40, 40, 64)).astype(np.int8)  # NHWC
    lazy = ScaledIntegers(np.transpose(q, (0, 3, 1, 2)), 128, 0.05)
    ref = (lazy.array() + rng.standard_normal(lazy.shape) * 0.02).astype(np.float32)
    nan_ref = ref.copy()
    nan_ref[0, 3, 4, 5] = np.nan
    items = [(ref, ((0.05,), 1)), (nan_ref, ((0.05,), 1)), (ref, ((0.05, 0.1), 1))]

    def run():
        stats = [ErrorStats() for _ in items]
        for _sample in range(2):
            u = Updates()
            for st, (a, scale) in zip(stats, items):
                u.add(st, a, lazy, scale)
            u.apply()
        return stats

    assert fastsum.takes_scaled(ref, lazy) and fastsum.error_sums_scaled(ref, lazy) is not None
    fast, slow = run(), _numpy_route(run)
    assert _close(fast[0], slow[0]) and _close(fast[2], slow[2])
    assert repr(fast[1].to_dict()) == repr(slow[1].to_dict()) and fast[1].nonfinite_a == 2
