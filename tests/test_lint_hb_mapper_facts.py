"""Config-lint facts corrected against the real toolchains (issue 15), each with its answer worked out independently:
by hb_mapper 1.x's own validation (``horizon_tc_ui/config/mapper_conf_parser.py``, read and run in
tests/horizon_runtime/test_lint_vs_hb_mapper.py) or the OE 3.x references, or by the formula."""

from __future__ import annotations

from graphaudit.config import parse_config_text
from graphaudit.lint import lint_config

ONE_X = """model_parameters:
  onnx_model: m.onnx
  march: bayes-e
input_parameters:
  input_type_train: rgb
  input_type_rt: rgb
  input_layout_rt: NHWC
  input_layout_train: NCHW
calibration_parameters:
  cal_data_dir: cal
"""


def _lint(text: str, label: str = "c.yaml"):
    return lint_config(parse_config_text(text, label))


def _codes(fs, severity=None):
    return [(f.code, f.location["key"]) for f in fs if severity is None or f.severity == severity]


def test_optimization_is_a_key_of_both_families_and_no_family_hint():
    # hb_compile 3.x: a current calibration_parameters key (set_model_output_int8/int16, run_fast); hb_mapper 1.x:
    # a str key of conf_schema_dict. Without march it must not make a config 1.x.
    text = "calibration_parameters:\n  optimization: set_model_output_int16\n  quant_config: q.json\n"
    cfg = parse_config_text(text)
    assert cfg.family == "3.x"
    assert _lint(text) == []
    for march, item in (("nash-e", "run_fast"), ("bayes-e", "set_model_output_int8")):
        fs = _lint(f"model_parameters:\n  march: {march}\ncalibration_parameters:\n  optimization: {item}\n")
        assert not [f for f in fs if f.code in ("C301", "C302", "C317")], fs


def test_3x_keys_where_the_oe_references_put_them():
    text = ("model_parameters:\n  march: nash-e\n  enable_vpu: true\n  enable_spu: false\n"
            "input_parameters:\n  separate_name: a;b\n"
            "compiler_parameters:\n  max_l2m_size: 0\n  ability_entry: x\n  extra_params: {}\n"
            "  hbdk3_compatible_mode: true\n")
    fs = _lint(text)
    assert _codes(fs) == [("C302", "compiler_parameters.hbdk3_compatible_mode")], fs
    assert fs[0].severity == "info" and "deprecated" in fs[0].message
    # enable_vpu is a model_parameters key: in compiler_parameters it is misplaced
    fs = _lint("model_parameters:\n  march: nash-e\ncompiler_parameters:\n  enable_vpu: true\n")
    assert _codes(fs) == [("C301", "compiler_parameters.enable_vpu")]
    assert "belongs in model_parameters" in fs[0].message and fs[0].severity == "warning"


def test_1x_unknown_key_is_an_error_because_hb_mapper_refuses_it():
    # conf_schema_dict is a schema.Schema without ignore_extra_keys: "Wrong key 'frobnicate'"
    fs = _lint(ONE_X.replace("  march: bayes-e\n", "  march: bayes-e\n  frobnicate: 1\n"))
    assert _codes(fs, "error") == [("C301", "model_parameters.frobnicate")]
    # 1.x keys of hb_mapper's schema that were missing from graphaudit's table
    fs = _lint(ONE_X.replace("  march: bayes-e\n", "  march: bayes-e\n  set_node_data_type: 'Conv_0:int16'\n")
               + "  enable_int16: true\ncompiler_parameters:\n  ability_entry: x\n")
    assert _codes(fs, "error") == []


def test_1x_values_are_compared_as_written():
    # mapper_consts lists are compared with `in`: NV12, nchw, Bayes-E are refused by hb_mapper
    for old, new, key in (("input_type_rt: rgb", "input_type_rt: RGB", "input_parameters.input_type_rt"),
                          ("input_layout_train: NCHW", "input_layout_train: nchw",
                           "input_parameters.input_layout_train"),
                          ("march: bayes-e", "march: Bayes-E", "model_parameters.march")):
        fs = lint_config(parse_config_text(ONE_X.replace(old, new), "c.yaml", toolchain="1.x"))
        assert (("C304", key) in _codes(fs, "error")), (new, fs)


def test_1x_required_keys():
    # hb_mapper: "Input_layout_rt missing ... input_layout_rt is required for this type" (rgb runtime input)
    fs = _lint(ONE_X.replace("  input_layout_rt: NHWC\n", ""))
    assert _codes(fs, "error") == [("C318", "input_parameters.input_layout_rt")]
    # "Wrong cal_dir num given, cal_dir num 0 is not equal to input num 1" unless calibration_type load/skip
    fs = _lint(ONE_X.replace("  cal_data_dir: cal\n", "  calibration_type: kl\n"))
    assert _codes(fs, "error") == [("C318", "calibration_parameters.cal_data_dir")]
    assert _lint(ONE_X.replace("  cal_data_dir: cal\n", "  calibration_type: skip\n")) == []
    # "Parameter compile_mode is set to balance, please set balance_factor" (both families)
    fs = _lint(ONE_X + "compiler_parameters:\n  compile_mode: balance\n")
    assert _codes(fs, "error") == [("C318", "compiler_parameters.balance_factor")]


def test_1x_input_source_ddr_for_nv12_and_batch_range():
    text = ONE_X.replace("input_type_rt: rgb", "input_type_rt: nv12").replace("  input_layout_rt: NHWC\n", "")
    # input_source_support_dict: ddr takes rgb, bgr, yuv444, yuv444_128, gray, featuremap; not nv12
    fs = _lint(text + "compiler_parameters:\n  input_source: {x: ddr}\n")
    assert ("C314", "compiler_parameters.input_source.x") in _codes(fs, "error")
    # bernoulli2 takes input_batch 1..128
    fs = _lint(text.replace("bayes-e", "bernoulli2").replace("input_type_train: rgb",
                                                             "input_type_train: rgb\n  input_batch: 200"))
    assert _codes(fs, "error") == [("C304", "input_parameters.input_batch")]


def test_scale_only_normalization_shows_the_range():
    # data_scale 1/128 without a mean: the device's pixels 0..255 become 255/128 = 1.9921875 at most, [0, 2)
    text = ONE_X.replace("  input_layout_train: NCHW\n", "  input_layout_train: NCHW\n  norm_type: data_scale\n"
                         "  scale_value: 0.0078125\n")
    fs = _lint(text)
    assert _codes(fs) == [("C333", "input_parameters.scale_value")]
    f = fs[0]
    assert f.severity == "warning" and "[0, 1.992]" in f.message and "mean_value 127.5 (or 128)" in f.message
    assert f.evidence["range"] == [0.0, 255 * 0.0078125] and f.evidence["centring_mean"] == 255 / 2
    # with the mean that centres it, or the scale of a [0, 1] model (1/255), nothing
    assert _lint(text.replace("data_scale", "data_mean_and_scale").replace(
        "  scale_value:", "  mean_value: 128\n  scale_value:")) == []
    assert _lint(text.replace("0.0078125", "0.00392156862745098")) == []
