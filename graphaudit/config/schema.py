"""Horizon conversion-config schema as data: known keys, deprecated keys and allowed values per toolchain family.

Sources: for hb_mapper 1.x, hb_mapper's own validation (``horizon_tc_ui/config/mapper_conf_parser.py``: its
``conf_schema_dict`` and ``_validate_*`` methods, and ``mapper_consts.py``, of the installed 1.x toolchain; the
differential test ``tests/horizon_runtime/test_lint_vs_hb_mapper.py`` checks graphaudit against it); for hb_compile
3.x, the public OE 3.x references (docs/HORIZON.md section 4; HorizonRobotics/OE-Skills ``references/yaml``:
``model_parameters.md`` for ``enable_vpu``/``enable_spu``, ``input_parameters.md`` for ``separate_batch``/``separate_name``,
``compiler_parameters.md`` for ``max_l2m_size``, ``ability_entry``, ``extra_params``, ``cache_mode``/``cache_path`` and the
deprecated ``hbdk3_compatible_mode``). Where the sources are silent a key is known (no finding) rather than flagged.
"""

from __future__ import annotations

__all__ = ["SECTIONS", "KNOWN_KEYS", "DEPRECATED_KEYS", "FAMILY_1X_ONLY_KEYS", "FAMILY_3X_ONLY_KEYS", "MARCH",
           "INPUT_TYPE_TRAIN", "INPUT_TYPE_RT", "LAYOUTS", "NORM_TYPES", "CALIBRATION_TYPE", "DEPRECATED_VALUES",
           "OPTIMIZE_LEVEL", "COMPILE_MODE", "INPUT_SPACE_AND_RANGE", "CAL_DATA_TYPE", "INPUT_SOURCE",
           "OPTIMIZATION", "REMOVE_NODE_TYPE", "LEGAL_TYPE_PAIRS", "IMAGE_TYPES", "INT_KEYS", "FLOAT_KEYS",
           "MAPPING_KEYS", "SCALAR_KEYS", "FAMILY_NAMES", "HB_MAPPER_TYPES", "HB_MAPPER_REQUIRED_SECTIONS",
           "HB_MAPPER_CUSTOM_OP_KEYS", "HB_MAPPER_INPUT_TYPE_RT", "HB_MAPPER_INPUT_TYPE_TRAIN", "HB_MAPPER_NORM_TYPES",
           "HB_MAPPER_DEBUG_MODE", "HB_MAPPER_CORE_NUM", "HB_MAPPER_BATCH", "INPUT_SOURCE_TYPES", "NODE_INFO_ON",
           "NODE_DATA_TYPES"]

FAMILY_NAMES = {"1.x": "hb_mapper (OE 1.x)", "3.x": "hb_compile (OE 3.x)"}

#: Top-level sections; ``custom_op`` is free-form (not checked inside).
SECTIONS = ("model_parameters", "input_parameters", "calibration_parameters", "compiler_parameters", "custom_op")

_COMMON = {
    "model_parameters": {"onnx_model", "caffe_model", "prototxt", "march", "working_dir", "output_model_file_prefix",
                         "output_nodes", "remove_node_type", "remove_node_name", "node_info", "debug_mode",
                         "layer_out_dump"},
    "input_parameters": {"input_name", "input_type_rt", "input_type_train", "input_layout_train",
                         "input_space_and_range", "input_shape", "input_batch", "mean_value", "scale_value"},
    "calibration_parameters": {"cal_data_dir", "calibration_type", "max_percentile", "per_channel", "run_on_cpu",
                               "run_on_bpu", "preprocess_on", "cal_data_type", "optimization"},
    "compiler_parameters": {"compile_mode", "balance_factor", "optimize_level", "core_num", "max_time_per_fc", "jobs",
                            "debug", "input_source", "advice", "ability_entry"},
}

#: Section -> keys each family accepts (deprecated keys included: they are reported by C302, not C301).
KNOWN_KEYS: dict[str, dict[str, set[str]]] = {
    "1.x": {  # hb_mapper's conf_schema_dict: any other key is refused ("Wrong key")
        "model_parameters": _COMMON["model_parameters"] | {"log_level", "set_node_data_type"},
        "input_parameters": _COMMON["input_parameters"] | {"input_layout_rt", "norm_type"},
        "calibration_parameters": _COMMON["calibration_parameters"] | {"enable_int16"},
        "compiler_parameters": _COMMON["compiler_parameters"],
    },
    "3.x": {
        "model_parameters": _COMMON["model_parameters"] | {"log_level", "enable_vpu", "enable_spu",
                                                            "set_node_data_type"},
        "input_parameters": _COMMON["input_parameters"] | {"input_layout_rt", "norm_type", "std_value",
                                                            "separate_batch", "separate_name"},
        "calibration_parameters": _COMMON["calibration_parameters"] | {"quant_config"},
        "compiler_parameters": _COMMON["compiler_parameters"] | {"cache_mode", "cache_path", "max_l2m_size",
                                                                  "extra_params", "hbdk3_compatible_mode"},
    },
}

#: Family -> (section, key) -> why it is deprecated (docs/HORIZON.md section 4).
DEPRECATED_KEYS: dict[str, dict[tuple[str, str], str]] = {
    "1.x": {
        ("calibration_parameters", "preprocess_on"): "hb_mapper 1.x itself warns \"User input 'preprocess_on' will be "
                                                     "deprecated\" (use calibration_type skip to simplify "
                                                     "calibration)",
        ("model_parameters", "log_level"): "hb_mapper 1.x itself warns \"User input 'log_level' is deprecated\" "
                                           "(console info, log file debug)",
    },
    "3.x": {
        ("model_parameters", "log_level"): "hb_compile does not read it",
        ("input_parameters", "input_layout_rt"): "hb_compile decides the runtime layout itself",
        ("input_parameters", "norm_type"): "hb_compile derives the normalization from which of mean_value / "
                                           "scale_value / std_value are present",
        ("calibration_parameters", "cal_data_type"): "hb_compile reads .npy calibration files, whose header "
                                                     "carries the dtype",
        ("calibration_parameters", "preprocess_on"): "hb_compile does not resize calibration images",
        ("model_parameters", "set_node_data_type"): "hb_compile ignores it; use node_info or quant_config",
        ("compiler_parameters", "hbdk3_compatible_mode"): "HBDK3 compatibility mode was removed; hb_compile "
                                                          "ignores it",
    },
}

#: Keys that point to one family when ``march`` is absent: 3.x-only keys, and 1.x keys that 3.x deprecates.
#: ``optimization`` is a key of both (1.x: a ``str`` of hb_mapper's schema; 3.x: a current calibration_parameters key).
FAMILY_1X_ONLY_KEYS = frozenset({"norm_type", "input_layout_rt", "cal_data_type", "preprocess_on", "log_level",
                                 "enable_int16"})
FAMILY_3X_ONLY_KEYS = frozenset({"std_value", "quant_config", "separate_batch", "separate_name", "enable_vpu",
                                 "enable_spu", "max_l2m_size", "extra_params", "hbdk3_compatible_mode", "cache_mode",
                                 "cache_path"})

MARCH = {"1.x": ("bernoulli2", "bayes", "bayes-e"),
         "3.x": ("nash-b-lite", "nash-b", "nash-b-plus", "nash-e", "nash-m", "nash-h", "nash-p", "nash-starry-p")}

INPUT_TYPE_TRAIN = ("rgb", "bgr", "yuv444", "gray", "featuremap")
INPUT_TYPE_RT = ("nv12", "yuv444", "rgb", "bgr", "gray", "featuremap", "yuv444_128", "yuv420sp_bt601_video")
#: Image (pixel) input types: they get an HzPreprocess and take 0..255 values.
IMAGE_TYPES = ("rgb", "bgr", "yuv444", "gray", "nv12", "yuv444_128", "yuv420sp_bt601_video")
LAYOUTS = ("NCHW", "NHWC")
NORM_TYPES = ("data_mean_and_scale", "data_mean", "data_scale", "no_preprocess")
CALIBRATION_TYPE = {"1.x": ("default", "mix", "kl", "max", "load", "skip"),
                    "3.x": ("kl", "max", "skip", "mix", "default")}
#: (family, key) -> {value: why deprecated}.
DEPRECATED_VALUES = {("3.x", "calibration_type"): {"mix": "deprecated in hb_compile; use kl or max",
                                                   "default": "deprecated in hb_compile; use kl or max"}}
OPTIMIZE_LEVEL = {"1.x": ("O0", "O1", "O2", "O3"), "3.x": ("O0", "O1", "O2")}
COMPILE_MODE = ("latency", "bandwidth", "balance")
INPUT_SPACE_AND_RANGE = ("regular", "bt601_video")
#: hb_mapper 1.x ``cal_data_type_list`` (mapper_consts.py); the OE manuals name uint8 and float32 only.
CAL_DATA_TYPE = ("uint8", "float32", "int32", "int16", "int8")
INPUT_SOURCE = ("ddr", "pyramid", "resizer")
#: ``optimization`` items (comma-separated); ``run_fast`` makes hb_mapper 1.x skip calibration (fast perf).
OPTIMIZATION = ("set_model_output_int8", "set_model_output_int16", "run_fast", "set_all_nodes_int16", "set_Softmax_input_int8",
                "set_Softmax_output_int8")
REMOVE_NODE_TYPE = ("Quantize", "Transpose", "Dequantize", "Cast", "Reshape", "Softmax")

#: input_type_train -> legal input_type_rt other than the same type (docs/HORIZON.md section 4).
LEGAL_TYPE_PAIRS = {
    "rgb": ("bgr", "nv12", "yuv444", "yuv444_128", "yuv420sp_bt601_video"),
    "bgr": ("rgb", "nv12", "yuv444", "yuv444_128", "yuv420sp_bt601_video"),
    "yuv444": ("yuv444_128", "nv12"),
    "gray": (),
    "featuremap": (),
}

#: (section, key) -> what the value must be. Checked by C303.
INT_KEYS = {("input_parameters", "input_batch"), ("compiler_parameters", "core_num"), ("compiler_parameters", "jobs"),
            ("compiler_parameters", "max_time_per_fc"), ("compiler_parameters", "balance_factor"),
            ("compiler_parameters", "advice")}
FLOAT_KEYS = {("calibration_parameters", "max_percentile")}
MAPPING_KEYS = {("compiler_parameters", "input_source")}  # node_info / quant_config may be str or mapping
SCALAR_KEYS = {("model_parameters", k) for k in ("onnx_model", "caffe_model", "prototxt", "march", "working_dir",
                                                 "output_model_file_prefix", "debug_mode")} | {
    ("calibration_parameters", k) for k in ("calibration_type", "max_percentile")} | {
    ("compiler_parameters", k) for k in ("compile_mode", "optimize_level")}

# ----------------------------------------------------------------------------------------------------------------
# hb_mapper 1.x: its own schema and value lists (horizon_tc_ui/config/mapper_conf_parser.py ``conf_schema_dict``,
# mapper_consts.py), which refuse what they do not accept before anything is converted.

#: (section, key) -> type hb_mapper's ``schema.Schema`` demands: "str", "bool", "int" (a YAML int; the schema
#: library refuses true/false there), "str|dict", "float" (anything float() takes), "text" (``Use(str)``: anything),
#: "nonempty" (a non-empty str).
HB_MAPPER_TYPES: dict[tuple[str, str], str] = {
    **{("model_parameters", k): "str" for k in ("onnx_model", "caffe_model", "prototxt", "march", "log_level",
                                                 "working_dir", "output_model_file_prefix", "output_nodes",
                                                 "remove_node_type", "remove_node_name")},
    ("model_parameters", "layer_out_dump"): "bool",
    **{("model_parameters", k): "str|dict" for k in ("set_node_data_type", "debug_mode", "node_info")},
    **{("input_parameters", k): "str" for k in ("input_type_rt", "input_type_train", "input_layout_train")},
    **{("input_parameters", k): "text" for k in ("input_name", "input_space_and_range", "input_layout_rt", "norm_type",
                                                 "input_shape", "input_batch", "mean_value", "scale_value")},
    ("calibration_parameters", "cal_data_dir"): "nonempty",
    **{("calibration_parameters", k): "str" for k in ("calibration_type", "optimization", "cal_data_type")},
    **{("calibration_parameters", k): "bool" for k in ("preprocess_on", "per_channel", "enable_int16")},
    ("calibration_parameters", "max_percentile"): "float",
    **{("calibration_parameters", k): "text" for k in ("run_on_cpu", "run_on_bpu")},
    **{("compiler_parameters", k): "str" for k in ("compile_mode", "optimize_level", "ability_entry")},
    **{("compiler_parameters", k): "int" for k in ("balance_factor", "core_num", "max_time_per_fc", "jobs", "advice")},
    ("compiler_parameters", "debug"): "bool",
    ("compiler_parameters", "input_source"): "dict",  # the schema takes a str, _validate_input_source refuses it
    **{("custom_op", k): "str" for k in ("op_register_files", "custom_op_method", "custom_op_dir")},
}
#: Sections hb_mapper requires (the others may be absent, but a present one must be a mapping).
HB_MAPPER_REQUIRED_SECTIONS = ("model_parameters", "input_parameters")
#: Keys of ``custom_op`` (the only ones hb_mapper's schema accepts there).
HB_MAPPER_CUSTOM_OP_KEYS = frozenset({"op_register_files", "custom_op_method", "custom_op_dir"})
#: mapper_consts.py value lists (compared exactly: hb_mapper does not fold case).
HB_MAPPER_INPUT_TYPE_RT = ("nv12", "yuv444", "yuv444_128", "featuremap", "rgb", "bgr", "gray", "yuv_bt601_full",
                           "yuv_bt601_video")
HB_MAPPER_INPUT_TYPE_TRAIN = ("rgb", "bgr", "featuremap", "gray", "yuv444", "yuv444_128", "yuv_bt601_full",
                              "yuv_bt601_video")
HB_MAPPER_NORM_TYPES = ("no_preprocess", "mean_file", "data_mean", "data_scale", "mean_file_and_scale",
                        "data_mean_and_scale")
HB_MAPPER_DEBUG_MODE = ("dump_calibration_data",)
HB_MAPPER_CORE_NUM = (1, 2)
#: input_batch range per march.
HB_MAPPER_BATCH = {"bernoulli2": 128, "bayes": 4096, "bayes-e": 4096}
#: input_source -> input_type_rt it takes (mapper_consts.input_source_support_dict; 3.x the same, OE-Skills).
INPUT_SOURCE_TYPES = {"pyramid": ("nv12", "gray", "yuv420sp_bt601_video", "yuv_bt601_full"),
                      "resizer": ("nv12", "gray", "yuv420sp_bt601_video", "yuv_bt601_full"),
                      "ddr": ("rgb", "bgr", "yuv444", "yuv444_128", "gray", "featuremap")}
#: node_info: ON values and data types (mapper_consts.run_on_list, node_data_type_list).
NODE_INFO_ON = ("BPU", "CPU")
NODE_DATA_TYPES = ("int8", "int16")
