"""Config loading: positions, family detection, per-input entries, and bad input refused in one line (exit 2)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from graphaudit.cli import main
from graphaudit.config import ConfigError, load_config
from graphaudit.config.parse import MAX_CONFIG_NODES
from .conftest import corpus_file, corpus_names
from .conftest import lint_under_memory_limit


def _write(tmp_path, text: str, name: str = "c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


def test_positions_are_one_based_line_and_column(tmp_path):
    p = _write(tmp_path, """\
        # comment
        model_parameters:
          march: bernoulli2
        input_parameters:
            input_type_rt: nv12
            mean_value: 1 2 3
        """)
    cfg = load_config(p)
    assert cfg.position(("model_parameters",)) == (2, 1)
    assert cfg.position(("model_parameters", "march")) == (3, 3)
    assert cfg.position("input_parameters.mean_value") == (6, 5)
    # absent keys fall back to the nearest ancestor
    assert cfg.position(("input_parameters", "scale_value")) == (4, 1)
    assert cfg.position(("nothing",)) == (1, 1)


def test_family_from_march_keys_and_override(tmp_path):
    assert load_config(_write(tmp_path, "model_parameters: {march: bayes-e}\n")).family == "1.x"
    assert load_config(_write(tmp_path, "model_parameters: {march: nash-m}\n")).family == "3.x"
    assert load_config(_write(tmp_path, "input_parameters: {norm_type: data_scale}\n")).family == "1.x"
    assert load_config(_write(tmp_path, "input_parameters: {std_value: '1,2,3'}\n")).family == "3.x"
    cfg = load_config(_write(tmp_path, "model_parameters: {march: bayes-e}\n"), toolchain="3.x")
    assert (cfg.family, cfg.family_reason) == ("3.x", "--toolchain")


def test_per_input_entries_semicolons_and_lists(tmp_path):
    cfg = load_config(_write(tmp_path, """\
        model_parameters: {march: bayes}
        input_parameters:
          input_name: 'img;aux'
          input_type_train: 'bgr;featuremap'
          input_type_rt: 'nv12;featuremap'
          input_layout_train: 'NCHW;NCHW'
          input_shape: '1x3x224x224;1x128'
          norm_type: 'data_mean_and_scale;no_preprocess'
          mean_value: '103.53 116.28 123.675;None'
          scale_value: '0.5;None'
        calibration_parameters:
          cal_data_dir: './cal/img;./cal/aux'
        """))
    a, b = cfg.inputs
    assert (a.name, a.type_train, a.type_rt, a.layout_train, a.shape) == ("img", "bgr", "nv12", "NCHW", (1, 3, 224, 224))
    assert (a.mean, a.scale, a.norm_type, a.cal_data_dir) == ([103.53, 116.28, 123.675], [0.5], "data_mean_and_scale",
                                                              "./cal/img")
    assert (b.name, b.shape, b.mean, b.scale, b.norm_type) == ("aux", (1, 128), None, None, "no_preprocess")
    cfg = load_config(corpus_file("configs", "HorizonRobotics__OE-Skills__horizon__skills__horizon_tc_ui__horizon-tc-ui"
                                             "__assets__recipes__multi_input.yaml"))
    assert [i.name for i in cfg.inputs] == ["image", "aux_features"]
    assert cfg.inputs[0].mean == [123.675, 116.28, 103.53] and cfg.inputs[1].mean is None
    assert cfg.position(("input_parameters", "mean_value", 0)) == (77, 7)


def test_std_becomes_scale(tmp_path):
    cfg = load_config(_write(tmp_path, "model_parameters: {march: nash-e}\ninput_parameters: {std_value: '2,4,8'}\n"))
    assert cfg.inputs[0].std == [2.0, 4.0, 8.0] and cfg.inputs[0].scale == [0.5, 0.25, 0.125]


def test_yaml_11_booleans_as_pyyaml_reads_them(tmp_path):
    cfg = load_config(_write(tmp_path, "model_parameters:\n  node_info: {Conv_1: {ON: BPU}}\n"))
    assert cfg.data["model_parameters"]["node_info"]["Conv_1"] == {True: "BPU"}


def test_corpus_lists_32_configs():
    assert len(corpus_names("configs")) == 32


@pytest.mark.parametrize("name", corpus_names("configs"))
def test_every_corpus_config_loads(name):
    cfg = load_config(corpus_file("configs", name))
    assert cfg.family in ("1.x", "3.x") and cfg.inputs


BOMB = "a: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(9))


@pytest.mark.parametrize("content, words", [
    (b"model_parameters: [1, 2\n", "not valid YAML at line 2"),
    (b"", "empty config"),
    (b"# only a comment\n", "empty config"),
    (bytes(range(256)) * 4, "binary file"),
    (b"\xff\xfe\xfa not utf8\n", "not UTF-8"),
    (b"just a sentence\n", "not a conversion config"),
    (BOMB.encode(), "YAML bomb"),
    (b"a: 1\na: 2\n", "duplicate key"),
    (b"[" * 5000 + b"]" * 5000, "nested more than"),
    # block style, 250 levels: ruamel recursed out of Python's stack ("RecursionError" in the message); the 65th
    # level is on line 1 + 64 = 65 (line 1 opens level 1)
    ("".join("  " * i + f"k{i}:\n" for i in range(250)).encode() + b"  " * 250 + b"v: 1\n",
     "YAML nested more than 64 levels deep (line 65); not a conversion config"),
    # a 5000-digit integer: Python's int() refuses more than 4300 digits (its advice to call
    # sys.set_int_max_str_digits was the message); PyYAML, hb_mapper's reader, fails on it too
    (b"model_parameters:\n  march: bayes-e\ncompiler_parameters:\n  core_num: " + b"9" * 5000 + b"\n",
     "not valid YAML at line 4, column 13: an integer of 5000 digits"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, content, words):
    p = tmp_path / "bad.yaml"
    p.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert words in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)
    assert main(["lint", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graphaudit: error: ") and "Traceback" not in err


def test_block_nesting_up_to_the_limit_loads(tmp_path):
    """64 levels of block mappings (the limit) load; the deepest value is where the text put it."""
    text = "".join("  " * i + f"k{i}:\n" for i in range(63)) + "  " * 63 + "v: 1\n"
    cfg = load_config(_write(tmp_path, text))
    node = cfg.data
    for i in range(63):
        node = node[f"k{i}"]
    assert node == {"v": 1}


def test_python_advice_is_not_the_message(tmp_path, capsys):
    p = tmp_path / "big.yaml"
    p.write_text("model_parameters:\n  march: " + "1" * 4301 + "\n", encoding="utf-8")
    assert main(["lint", str(p)]) == 2
    err = capsys.readouterr().err
    assert "set_int_max_str_digits" not in err and "line 2, column 10: an integer of 4301 digits" in err


def test_missing_file_and_directory_exit_2(tmp_path, capsys):
    assert main(["lint", str(tmp_path / "none.yaml")]) == 2
    assert main(["lint", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "cannot read config" in err[0] and "is a directory" in err[1]


def test_yaml_bomb_memory_is_bounded(tmp_path):
    """The billion-laughs document (9 levels of 9 aliases: 9**9 strings once expanded) under a 1 GiB address-space
    limit: refused with exit 2, never a MemoryError or a killed process."""
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB, encoding="utf-8")
    r = lint_under_memory_limit(p)
    assert r.returncode == 2, r.stderr
    assert f"more than {MAX_CONFIG_NODES} YAML nodes" in r.stderr and "Traceback" not in r.stderr


# --- the config a toolchain log echoes ----------------------------------------------------------------------------

def test_config_echoed_by_a_log_keeps_positions_in_the_log(tmp_path):
    """The llama hb_mapper log echoes a 2-input 1.x config after "Dump config:" (log line 31); read by hand:
    `calibration_parameters:` starts at log line 32 after the 91-character log prefix, `cal_data_type` at line 35,
    column 3, with the per-input value 'float32; float32' that hb_mapper accepted (the run went on)."""
    from graphaudit.config import load_config_or_log

    log = corpus_file("logs", "frank05080__llama.onnx__hb_mapper_makertbin.log")
    cfg = load_config_or_log(log)
    assert cfg.family == "1.x" and [i.name for i in cfg.inputs] == ["input", "state_in"]
    assert [i.cal_data_type for i in cfg.inputs] == ["float32", "float32"]
    assert cfg.position(("calibration_parameters",)) == (32, 92)
    assert cfg.position(("calibration_parameters", "cal_data_type")) == (35, 3)
    assert main(["lint", str(log)]) == 0


def test_error_in_a_logged_config_points_at_the_log_line(tmp_path, capsys):
    src = corpus_file("logs", "D-Robotics__rdk_model_zoo__samples__vision__ultralytics_yolo__source__reference_logs__"
                              "hb_mapper_log_yolov8n_cls.txt")
    lines = src.read_text(encoding="utf-8").splitlines()
    dump = next(i for i, ln in enumerate(lines) if ln.endswith("Dump config:"))
    k = next(i for i in range(dump, len(lines)) if lines[i].strip() == "march: bayes-e")
    lines[k] = lines[k].replace("bayes-e", "bayes-x")
    log = tmp_path / "hb_mapper_makertbin.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["lint", str(log)]) == 1
    from graphaudit.config import load_config_or_log
    from graphaudit.lint import lint_config

    (f,) = [f for f in lint_config(load_config_or_log(log)) if f.code == "C304"]
    assert (f.location["file"], f.location["line"], f.location["col"]) == (str(log), k + 1, 3)  # "  march:" key


def test_log_without_a_config_echo_is_refused(tmp_path, capsys):
    log = corpus_file("logs", "cqu20160901__yolov8n_onnx_tensorRT_rknn_horizon__yolov8_horizon__hb_mapper_checker.log")
    assert main(["lint", str(log)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "echoes no conversion config" in err[0]
