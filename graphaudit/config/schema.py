"""Horizon conversion-config schema as data: known keys, deprecated keys and allowed values per toolchain family.

Source: docs/HORIZON.md section 4 (hb_mapper OE 1.x and hb_compile OE 3.x parameter lists), completed with
keys that Horizon's and D-Robotics' own public configs use (the comments of Horizon's 1.x template in
``tests/corpus/horizon/SOURCES.md``; ``separate_batch``, ``enable_vpu``/``enable_spu`` from HorizonRobotics/OE-Skills 3.x
templates). Where the sources are silent a key is known (no finding) rather than flagged.
"""

from __future__ import annotations

__all__ = ["SECTIONS", "KNOWN_KEYS", "DEPRECATED_KEYS", "FAMILY_1X_ONLY_KEYS", "FAMILY_3X_ONLY_KEYS", "MARCH",
           "INPUT_TYPE_TRAIN", "INPUT_TYPE_RT", "LAYOUTS", "NORM_TYPES", "CALIBRATION_TYPE", "DEPRECATED_VALUES",
           "OPTIMIZE_LEVEL", "COMPILE_MODE", "INPUT_SPACE_AND_RANGE", "CAL_DATA_TYPE", "INPUT_SOURCE",
           "OPTIMIZATION", "REMOVE_NODE_TYPE", "LEGAL_TYPE_PAIRS", "IMAGE_TYPES", "INT_KEYS", "FLOAT_KEYS",
           "MAPPING_KEYS", "SCALAR_KEYS", "FAMILY_NAMES"]

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
                            "debug", "input_source", "advice", "cache_mode", "cache_path"},
}

#: Section -> keys each family accepts (deprecated keys included: they are reported by C302, not C301).
KNOWN_KEYS: dict[str, dict[str, set[str]]] = {
    "1.x": {
        "model_parameters": _COMMON["model_parameters"] | {"log_level"},
        "input_parameters": _COMMON["input_parameters"] | {"input_layout_rt", "norm_type"},
        "calibration_parameters": _COMMON["calibration_parameters"],
        "compiler_parameters": _COMMON["compiler_parameters"],
    },
    "3.x": {
        "model_parameters": _COMMON["model_parameters"] | {"log_level"},
        "input_parameters": _COMMON["input_parameters"] | {"input_layout_rt", "norm_type", "std_value",
                                                            "separate_batch"},
        "calibration_parameters": _COMMON["calibration_parameters"] | {"quant_config"},
        "compiler_parameters": _COMMON["compiler_parameters"] | {"enable_vpu", "enable_spu"},
    },
}

#: Family -> (section, key) -> why it is deprecated (docs/HORIZON.md section 4).
DEPRECATED_KEYS: dict[str, dict[tuple[str, str], str]] = {
    "1.x": {
        ("calibration_parameters", "preprocess_on"): "hb_mapper 1.x itself warns \"User input 'preprocess_on' will be "
                                                     "deprecated\" (use calibration_type skip to simplify "
                                                     "calibration)",
    },
    "3.x": {
        ("model_parameters", "log_level"): "hb_compile does not read it",
        ("input_parameters", "input_layout_rt"): "hb_compile decides the runtime layout itself",
        ("input_parameters", "norm_type"): "hb_compile derives the normalization from which of mean_value / "
                                           "scale_value / std_value are present",
        ("calibration_parameters", "cal_data_type"): "hb_compile reads .npy calibration files, whose header "
                                                     "carries the dtype",
        ("calibration_parameters", "preprocess_on"): "hb_compile does not resize calibration images",
        ("calibration_parameters", "optimization"): "the OE docs list it for hb_mapper 1.x only; hb_compile "
                                                    "sets int16 and output types with quant_config",
    },
}

#: Keys that point to one family when ``march`` is absent: 3.x-only keys, and 1.x keys that 3.x deprecates.
FAMILY_1X_ONLY_KEYS = frozenset({"norm_type", "input_layout_rt", "cal_data_type", "preprocess_on", "optimization",
                                 "log_level"})
FAMILY_3X_ONLY_KEYS = frozenset({"std_value", "quant_config", "separate_batch", "enable_vpu", "enable_spu"})

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
CAL_DATA_TYPE = ("uint8", "float32")
INPUT_SOURCE = ("ddr", "pyramid", "resizer")
#: 1.x ``optimization`` items (comma-separated).
OPTIMIZATION = ("set_model_output_int8", "set_model_output_int16", "set_all_nodes_int16", "set_Softmax_input_int8",
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
