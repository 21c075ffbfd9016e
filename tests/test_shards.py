"""Scale-out (``--workers N``, ``--ray``): a run sharded over worker processes or a Ray cluster reports what one
process reports.

The sharded runs use the real bundled PP-OCR cls pipeline (original -> optimized -> QDQ, onnxruntime sessions in the
workers, isolated regions included) on its real samples, and compare the whole JSON report with the one-process
run: equal, except timing fields and floats, which may differ by the float64 sums' different association (relative
1e-12, :mod:`graphaudit.numeric.merge`). Ray runs on a local cluster started inside the tests
(``ray.init(num_cpus=2)``, once per session).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from graphaudit import audit
from graphaudit.bisection import bisect
from graphaudit.errors import DataError
from graphaudit.evaluate import evaluate_stages
from graphaudit.evalshards import evaluate_scaled
from graphaudit.measure import NumericOptions, sample_source
from graphaudit.numeric.merge import MeanAccumulator, merge_stats
from graphaudit.numeric.metrics import ErrorStats
from graphaudit.pipeline import load_pipeline
from graphaudit.scaleout import ScaleOut, shard_ranges

from .conftest import REPO, copy_with_nan
from .test_cli import assert_user_error, run

REL = 1e-12  # the stated tolerance of merged float64 sums (graphaudit/numeric/merge.py)
TIMING = {"seconds"}
N = 6  # samples: shards of 3 and 3 over two workers


def assert_same(a, b, where="report"):
    """Two JSON trees equal: the same keys, lists and strings; numbers within :data:`REL`; timing keys skipped."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            if k not in TIMING:
                assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{where}: lengths {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool) and isinstance(b, (int, float)):
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL, abs_tol=0), f"{where}: {a} vs {b}"
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray cluster of 2 CPUs for the session (the ``ray`` extra is installed by setup.sh)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def cls(samples):
    return samples / "ort" / "ppocr_cls", samples / "data" / "ppocr_cls" / "x"


@pytest.fixture(scope="module")
def one_process(cls):
    stages, data = cls
    return audit(stages, data=data, numeric=NumericOptions(max_samples=N)).report.to_dict()


def test_shard_ranges_are_contiguous_and_cover_the_samples():
    assert shard_ranges(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert shard_ranges(2, 4) == [(0, 1), (1, 2)]
    assert shard_ranges(8, 1) == [(0, 8)]


def test_merged_accumulators_equal_one_pass():
    """Two shards merged give the figures of numpy's float64 sums over all samples at once (formula, not the code
    under test): cosine = sum(ab) / sqrt(sum(aa) sum(bb)), SQNR = 10 log10(sum(aa) / sum(ee)); counts, max |err|,
    the first sample's cosine exact; a NaN error in either shard is NaN merged, as in one pass."""
    rng = np.random.default_rng(3)
    a = [rng.standard_normal((2, 50)).astype(np.float32) for _ in range(6)]
    b = [x + 0.01 * rng.standard_normal(x.shape).astype(np.float32) for x in a]
    shards = [ErrorStats(), ErrorStats()]
    for k, (x, y) in enumerate(zip(a, b)):
        shards[k // 3].update(x, y)
    m = merge_stats(*shards)
    A = np.concatenate([x.ravel() for x in a]).astype(np.float64)
    B = np.concatenate([y.ravel() for y in b]).astype(np.float64)
    assert m.samples == 6 and m.count == 600 and m.max_abs == float(np.max(np.abs(B - A)))
    assert math.isclose(m.cosine, A @ B / math.sqrt((A @ A) * (B @ B)), rel_tol=REL)
    assert math.isclose(m.sqnr_db, 10 * math.log10((A @ A) / ((B - A) @ (B - A))), rel_tol=REL)
    a0, b0 = A[:100], B[:100]
    assert math.isclose(m.first_sample_cosine, (a0 @ b0 + 1e-5) / (math.sqrt(a0 @ a0) * math.sqrt(b0 @ b0) + 1e-5),
                        rel_tol=REL)
    bad = ErrorStats()
    bad.update(np.ones(3, np.float32), np.array([1, np.nan, 1], np.float32))
    assert math.isnan(merge_stats(shards[0], bad).max_abs) and math.isnan(merge_stats(bad, shards[0]).max_abs)
    acc = MeanAccumulator()
    acc.add({"m": 1.0})
    other = MeanAccumulator()
    other.add({"m": 2.0})
    other.add({"m": 6.0})
    assert acc.merge(other).means() == {"m": 3.0}


def test_window_yields_what_iteration_yields(cls, tmp_path):
    src = sample_source(load_pipeline([cls[0]]), 0, cls[1], NumericOptions(), None)
    every = list(src)
    for start, stop in ((0, 2), (2, 5), (5, 100)):
        got = list(src.window(start, stop))
        assert len(got) == len(every[start:stop])
        assert all(np.array_equal(g["x"], e["x"]) for g, e in zip(got, every[start:stop]))


def test_workers_report_equals_one_process(cls, one_process):
    stages, data = cls
    rep = audit(stages, data=data, numeric=NumericOptions(max_samples=N, scale=ScaleOut(workers=2))).report.to_dict()
    assert rep["numeric"] and rep["numeric"][-1]["regions"], "the isolated regions were measured"
    assert_same(one_process, rep)


def test_ray_report_equals_one_process(cls, one_process, ray_local):
    stages, data = cls
    rep = audit(stages, data=data, numeric=NumericOptions(max_samples=N, scale=ScaleOut(workers=2, ray="local")))
    assert_same(one_process, rep.report.to_dict())


def test_progress_counts_every_sample_over_all_workers(cls):
    stages, data = cls
    seen: list[int] = []
    audit(stages, data=data, numeric=NumericOptions(max_samples=4, isolated=False, scale=ScaleOut(workers=2),
                                                    progress=lambda total: seen.append))
    assert sorted(seen) == [0, 1, 2, 3]


def test_a_bad_sample_in_a_later_shard_is_the_one_process_error(cls, tmp_path, monkeypatch):
    """Sample 3 (the second worker's shard) holds a NaN: the sharded run leaves it out as one process does (P209
    names it), naming the sample as the user gave the data: a relative path stays relative (workers run in the
    caller's working directory; they named the absolute path before)."""
    stages, data = cls
    monkeypatch.chdir(tmp_path)
    copy_with_nan(data, tmp_path / "data", bad=3, at=5)
    notes = []
    for scale in (None, ScaleOut(workers=2)):
        rep = audit(stages, data="data", numeric=NumericOptions(isolated=False, scale=scale)).report
        assert rep.numeric and rep.run.samples_used == 3 and rep.run.numeric_skipped is None
        (p209,) = [f for f in rep.findings if f.code == "P209"]
        assert p209.severity == "error"
        notes.append(p209.evidence["left_out_samples"])
    assert notes[0] == notes[1] == ["data/3.npy"], notes


HOOKS = '''
import os
import numpy as np

def per_sample(run, path):
    x = np.load(path)
    out = run(run.feeds_from({run.inputs[0].name: x}))[run.outputs[0]].reshape(-1)
    return {"p0": float(out[0]), "top": float(np.argmax(out))}
per_sample.per_sample = True

def p0_lower(run, path):
    return per_sample(run, path)["p0"]
p0_lower.per_sample = True
p0_lower.lower_is_better = True
p0_lower.metric_name = "p0"

def whole(run, samples):
    files = sorted(os.listdir(samples))[:4]
    return sum(float(run(run.feeds_from({run.inputs[0].name: np.load(os.path.join(samples, f))}))[
        run.outputs[0]].reshape(-1)[0]) for f in files)
'''


def _hooks_and_eval_set(tmp_path, data, n: int):
    """(the HOOKS module written to tmp_path/hooks.py, a directory of the first ``n`` samples of ``data``)."""
    hooks = tmp_path / "hooks.py"
    hooks.write_text(HOOKS)
    small = tmp_path / "eval"
    small.mkdir()
    for k in range(n):
        np.save(small / f"{k}.npy", np.load(data / f"{k}.npy"))
    return hooks, small


def test_eval_hook_sharded_equals_one_process(cls, tmp_path):
    """A per-sample hook sharded over the files (means of float64 sums) and a whole-set hook run one stage per
    worker give the one-process values; the per-sample mean is also checked against numpy on the outputs."""
    stages_dir, data = cls
    hooks, small = _hooks_and_eval_set(tmp_path, data, 5)
    stages = load_pipeline([stages_dir])
    got = {}
    for fn in ("per_sample", "whole"):
        one = evaluate_stages(stages, f"{hooks}:{fn}", small)
        many = evaluate_scaled(stages, f"{hooks}:{fn}", small, scale=ScaleOut(workers=2))
        assert [m.samples for m in many.stages] == [m.samples for m in one.stages] == [
            5 if fn == "per_sample" else 4] * 3
        assert_same(one.to_dict(), many.to_dict(), fn)
        got[fn] = many
    import onnxruntime as ort

    sess = ort.InferenceSession(str(stages[0].path), providers=["CPUExecutionProvider"])
    p0 = [float(sess.run(None, {"x": np.load(small / f"{k}.npy")})[0].reshape(-1)[0]) for k in range(5)]
    assert math.isclose(got["per_sample"].stages[0].values["p0"], sum(p0) / 5, rel_tol=1e-6)


def test_bisect_sharded_equals_one_process(cls, ray_local):
    stages, data = cls
    one = bisect(stages, data=data, numeric=NumericOptions(max_samples=4))
    many = bisect(stages, data=data, numeric=NumericOptions(max_samples=4, scale=ScaleOut(workers=2, ray="local")))
    assert one.steps, "the search made hybrid evaluations"
    assert_same(json.loads(json.dumps(one.to_dict())), json.loads(json.dumps(many.to_dict())))


def test_cli_workers_flag(cls, tmp_path):
    stages, data = cls
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert run("compare", str(stages), "--data", str(data), "--max-samples", "4", "--no-isolated", "--json",
               str(one)).returncode in (0, 1)
    assert run("compare", str(stages), "--data", str(data), "--max-samples", "4", "--no-isolated", "--workers", "2",
               "--json", str(two)).returncode in (0, 1)
    assert_same(json.loads(one.read_text()), json.loads(two.read_text()))
    assert_user_error(run("compare", str(stages), "--random", "2", "--workers", "0"), "--workers")
    # a cluster that is not there: one line at once (Ray itself would retry for minutes)
    assert_user_error(run("compare", str(stages), "--random", "2", "--input-shape", "x=1x3x48x192", "--ray",
                          "127.0.0.1:1"), "--ray 127.0.0.1:1: cannot reach the cluster")


def test_per_sample_example_on_ray_matches_the_whole_set_example(cls, ray_local):
    """examples/eval_top1_per_sample.py sharded over a Ray cluster (the mean of 0/1 per sample) reports the top-1
    that examples/eval_top1.py computes over the whole set in one process (checked against labels in
    tests/test_eval_hook.py)."""
    stages_dir, data = cls
    stages = load_pipeline([stages_dir])
    whole = evaluate_stages(stages, f"{REPO / 'examples' / 'eval_top1.py'}:evaluate", data.parent)
    sharded = evaluate_scaled(stages, f"{REPO / 'examples' / 'eval_top1_per_sample.py'}:evaluate", data,
                              scale=ScaleOut(workers=2, ray="local"))
    assert [m.values for m in sharded.stages] == [m.values for m in whole.stages]
    assert [m.samples for m in sharded.stages] == [16, 16, 16]


def test_a_worker_error_keeps_what_its_pickled_args_lose():
    """StageRunError.path (which stage the comparison leaves out, finding N403) and LoweringError.failures survive
    the trip back from a worker."""
    from graphaudit.errors import LoweringError, StageRunError
    from graphaudit.shards import Failure, results_of

    e = Failure.of(StageRunError("b.onnx: the runtime refused node X", path="/x/b.onnx")).error()
    assert type(e) is StageRunError and e.path == "/x/b.onnx" and str(e) == "b.onnx: the runtime refused node X"
    lo = Failure.of(LoweringError("c.onnx: 1 op", [{"op_type": "HzFoo", "count": 1}])).error()
    assert type(lo) is LoweringError and lo.failures == [{"op_type": "HzFoo", "count": 1}]
    with pytest.raises(StageRunError):
        results_of([[1], Failure.of(StageRunError("first", path="a")), Failure.of(DataError("second"))])


def test_a_refused_stage_is_the_same_finding_sharded(cls, tmp_path):
    """The middle stage stamped with an opset onnxruntime refuses (as in tests/test_degrade.py): the workers meet the
    refusal, and the sharded run leaves the stage out and compares across it as one process does (N403, the same
    report)."""
    from .test_degrade import _ppocr_cls_with_opset

    stages = _ppocr_cls_with_opset(tmp_path, "optimized", 10000)
    d = tmp_path / "data"
    d.mkdir()
    for k in range(4):
        np.save(d / f"{k}.npy", np.load(cls[1] / f"{k}.npy"))
    reps = [audit(stages, data=d, numeric=NumericOptions(isolated=False, scale=s)).report.to_dict()
            for s in (None, ScaleOut(workers=2))]
    assert [f["stage"] for f in reps[1]["findings"] if f["code"] == "N403"] == ["optimized"]
    assert_same(reps[0], reps[1])


def test_bisect_with_a_per_sample_hook_sharded_equals_one_process(cls, tmp_path, ray_local):
    """bisect --eval with a per-sample hook: the hybrids' metric measured over the sample files sharded on Ray
    (each worker builds the hybrid from the changes it reverts) gives the one-process bisection."""
    stages, data = cls
    hooks, small = _hooks_and_eval_set(tmp_path, data, 4)
    kw = dict(data=data, budget=4, eval_hook=f"{hooks}:p0_lower", eval_samples=small)
    one = bisect(stages, numeric=NumericOptions(max_samples=2), **kw)
    many = bisect(stages, numeric=NumericOptions(max_samples=2, scale=ScaleOut(workers=2, ray="local")), **kw)
    assert one.metric == "p0" and len(one.steps) >= 2
    assert_same(json.loads(json.dumps(one.to_dict())), json.loads(json.dumps(many.to_dict())))


def test_a_stage_file_replaced_during_the_run_is_refused_in_the_worker(samples, tmp_path):
    """A worker checks each stage file's SHA-256 against the one taken when the run started: a file replaced in
    between (or another copy on a cluster node) is a one-line error naming the file, never a report that mixes the
    model this process aligned with another one's numbers (found by a breaker run: exit 0, SQNR 130 dB for 32.5)."""
    import shutil

    from graphaudit.errors import GraphAuditError
    from graphaudit import shards
    from graphaudit.shards import PipelineSpec, worker_pipeline

    src = samples / "ort" / "ppocr_cls"
    for f in src.glob("*.onnx"):
        shutil.copy(f, tmp_path / f.name)
    stages = load_pipeline([tmp_path])
    spec = PipelineSpec.of(stages)
    shards._CACHE.clear()  # a fresh worker process
    assert [s.name for s in worker_pipeline(spec)[0]] == [s.name for s in stages]  # the same files: rebuilt
    shutil.copy(src / "ppocr_cls_original.onnx", tmp_path / "ppocr_cls_qdq.onnx")
    shards._CACHE.clear()
    with pytest.raises(GraphAuditError, match="ppocr_cls_qdq.onnx: the file differs from the one the run started"):
        worker_pipeline(spec)
