"""Non-ONNX inputs for the fuzzer: conversion YAML, hb_mapper logs, quant_info JSON, npy/npz, images, raw files.

Each generator takes a ``random.Random`` and returns bytes. The templates are written here from the public key
names (hb_mapper 1.x, hb_compile 3.x) with made-up values; nothing is copied from a user's file.
"""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
import zlib

import numpy as np

YAML_1X = """model_parameters:
  onnx_model: 'model.onnx'
  march: 'bernoulli2'
  working_dir: 'model_output'
  output_model_file_prefix: 'm'
input_parameters:
  input_name: 'x'
  input_type_rt: 'rgb'
  input_layout_rt: 'NHWC'
  input_type_train: 'rgb'
  input_layout_train: 'NCHW'
  input_shape: '1x3x8x8'
  norm_type: 'data_mean_and_scale'
  mean_value: 128.0 128.0 128.0
  scale_value: 0.0078125 0.0078125 0.0078125
calibration_parameters:
  cal_data_dir: './cal'
  cal_data_type: 'float32'
  calibration_type: 'default'
compiler_parameters:
  compile_mode: 'latency'
  optimize_level: 'O3'
  core_num: 1
"""

YAML_3X = """model_parameters:
  onnx_model: 'model.onnx'
  march: 'nash-e'
  working_dir: 'model_output'
  output_model_file_prefix: 'm'
  enable_vpu: False
input_parameters:
  input_name: 'x'
  input_type_rt: 'featuremap'
  input_layout_rt: 'NCHW'
  input_type_train: 'featuremap'
  input_layout_train: 'NCHW'
  input_shape: '1x3x8x8'
  norm_type: 'no_preprocess'
calibration_parameters:
  cal_data_dir: './cal'
  calibration_type: 'default'
  optimization: 'set_model_output_int8'
compiler_parameters:
  compile_mode: 'latency'
  optimize_level: 'O2'
  jobs: 4
"""

_VALUES = [None, 0, -1, 2 ** 63, 1e308, float("nan"), float("inf"), "", "x" * 5000, [1, [2, [3]]], {"a": {"b": 1}},
           True, "1x3x224x224x9x9x9x9x9", "0x0x0x0", "-1x3x8x8", "99999999999x99999999999", "NCHW;NHWC;;",
           "\x1b[31mred", "\u202ertl", "../../../etc/passwd", "/dev/zero", "rgb;bgr;nv12", "1.0 2.0 nan",
           "0 0 0", "1e-45", "128" * 300]


def _walk_set(rng: random.Random, d: dict) -> None:
    section = rng.choice(list(d))
    if not isinstance(d[section], dict) or not d[section]:
        d[section] = rng.choice(_VALUES)
        return
    key = rng.choice(list(d[section]))
    op = rng.randrange(5)
    if op == 0:
        d[section][key] = rng.choice(_VALUES)
    elif op == 1:
        del d[section][key]
    elif op == 2:
        other = rng.choice(list(d))
        if isinstance(d[other], dict):
            d[other][key] = d[section].pop(key)
    elif op == 3:
        d[section][key + rng.choice(["_", "s", "X"])] = d[section].pop(key)
    else:
        d[rng.choice(["extra", "model_parameters", "custom_op", ""])] = rng.choice(_VALUES)


def config_yaml(rng: random.Random) -> bytes:
    """A 1.x or 3.x config: keys removed, renamed, moved, given values of the wrong type or out of range; or the
    text damaged (truncated, bytes flipped, alias bombs, deep nesting, tabs, non-UTF-8)."""
    from ruamel.yaml import YAML

    text = YAML_1X if rng.random() < 0.5 else YAML_3X
    kind = rng.randrange(4)
    if kind <= 1:
        y = YAML(typ="safe")
        d = y.load(text)
        for _ in range(rng.randrange(1, 5)):
            _walk_set(rng, d)
        buf = io.StringIO()
        y.dump(d, buf)
        return buf.getvalue().encode("utf-8", "surrogatepass")
    if kind == 2:
        return _text_damage(rng, text.encode())
    return rng.choice([
        b"a: &a [" + b"x," * 50 + b"]\n" + b"".join(b"%c: &%c [*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c]\n" % ((98 + i,) * 2 + (97 + i,) * 8)
                                                      for i in range(9)),
        b"[" * 5000 + b"]" * 5000, b"{" * 100000, b"\t model_parameters:\n", b"\xff\xfe\x00m\x00o\x00d",
        b"!!python/object/apply:os.system ['true']\n", b"model_parameters: !!binary AAAA\n", b"---\n---\n---\n",
        b"model_parameters:\n  onnx_model: a\nmodel_parameters:\n  march: b\n", b"- - - - -\n", b"",
        text.encode().replace(b"\n", b"\r"), b"model_parameters: " + b"x" * 3_000_000])


def _text_damage(rng: random.Random, b: bytes) -> bytes:
    b = bytearray(b)
    op = rng.randrange(4)
    if op == 0:
        return bytes(b[:rng.randrange(len(b))])
    if op == 1:
        for _ in range(rng.randrange(1, 20)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    lines = bytes(b).split(b"\n")
    if op == 2:
        rng.shuffle(lines)
    else:  # a line repeated (at most about 1 MB more)
        i = rng.randrange(len(lines))
        line = lines[i][:2000]
        lines[i:i] = [line * rng.choice([2, 100])] * rng.choice([1, 50])
    return b"\n".join(lines)


def hb_log(rng: random.Random) -> bytes:
    """An hb_mapper makertbin log (the layout of hb_mapper 1.x: header, config echo, node table, output table) naming
    the base stages' nodes, damaged."""
    pre = "2025-01-01 00:00:00,000 file: hb_mapper.py func: main line No: 1 "
    rows = [("conv", "BPU", "id(0)", "HzSQuantizedConv", "0.999000", "2.5", "int8"),
            ("relu", "BPU", "id(0)", "Relu", "0.990000", "--", "int8"),
            ("fc", "CPU", "--", "Gemm", "0.950000", "--", "float")]
    titles = ("Node", "ON", "Subgraph", "Type", "Cosine Similarity", "Threshold", "DataType")
    widths = [max(len(t), *(len(r[i]) for r in rows)) + 2 for i, t in enumerate(titles)]

    def fmt(cells):
        return "".join(c.ljust(w) for c, w in zip(cells, widths))

    lines = [pre + "Start hb_mapper....", pre + "hb_mapper version 1.24.3", pre + "Dump config:",
             "model_parameters:", "  march: bernoulli2", pre + "The main quantized node information:",
             "=" * sum(widths), fmt(titles), "-" * sum(widths)] + [fmt(r) for r in rows]
    lines += [pre + "The quantized model output:", "=" * 60, "Output  Cosine Similarity  L1 Distance", "-" * 60,
              "y       0.990000           0.100000", pre + "End to Horizon NN Model Convert."]
    text = "\n".join(lines) + "\n"
    op = rng.randrange(5)
    if op == 0:
        for v in ["nan", "inf", "-1e309", "1" * 400, "--", "", "\x1b[2J"]:
            text = text.replace("0.990000", v, 1) if rng.random() < 0.5 else text
        return text.encode()
    if op == 1:
        return text.encode() + ("conv  BPU  id(0)  X  0.5  1  int8\n" * rng.choice([10, 5000])).encode()
    if op == 2:
        return b"\x00" * 100 + text.encode()
    return _text_damage(rng, text.encode())


def quant_info(rng: random.Random) -> bytes:
    """A ``*_quant_info.json`` (horizon_tc_ui NodeInfo layout) with values of the wrong type, or damaged text."""
    d = {"conv": {"type": "Conv", "inputs": ["x"], "outputs": ["c"], "thresholds": [[2.5, 2.4]],
                  "cosine_similarity": 0.999},
         "relu": {"type": "Relu", "inputs": ["c"], "outputs": ["r"], "thresholds": [[]]},
         "model_output_tensor": {"y": {"cosine_similarity": 0.97}}}
    op = rng.randrange(4)
    if op <= 1:
        for _ in range(rng.randrange(1, 4)):
            node = rng.choice(list(d))
            if rng.random() < 0.3:
                d[node] = rng.choice([None, 1, "s", [], [1, 2]])
            elif isinstance(d[node], dict) and d[node]:
                k = rng.choice(list(d[node]))
                d[node][k] = rng.choice([None, -1, "NaN", 1e400, [[None]], {"a": 1}, [[1, 2, 3]] * 1000, "x"])
        return json.dumps(d, allow_nan=True).encode()
    if op == 2:
        return _text_damage(rng, json.dumps(d).encode())
    return rng.choice([b"[" * 100000, b'{"a": ' * 5000 + b"1" + b"}" * 5000, b"NaN", b'"\xff"', b"{}", b"",
                       b'{"conv": {"thresholds": [[1e999]], "cosine_similarity": "1"}}'])


def npy(rng: random.Random) -> bytes:
    """A .npy: right or wrong shape and dtype, NaN/inf, Fortran order, an object array (pickle), a header that
    declares a huge shape, or damaged bytes."""
    op = rng.randrange(8)
    shape = rng.choice([(1, 3, 8, 8), (3, 8, 8), (1, 8, 8, 3), (2, 3, 8, 8), (1, 3, 9, 9), (0, 3, 8, 8), (), (1,)])
    dtype = rng.choice(["float32", "float64", "uint8", "int8", "float16", "int64", "bool", "complex64", "<U3"])
    buf = io.BytesIO()
    if op == 0:
        np.save(buf, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
        return buf.getvalue()
    a = np.random.default_rng(rng.randrange(2 ** 32)).normal(0, 1, shape).astype(dtype)
    if op == 1 and a.dtype.kind == "f" and a.size:
        a.flat[0] = rng.choice([np.nan, np.inf, -np.inf])
    if op == 2:
        a = np.asfortranarray(a)
    np.save(buf, a)
    b = buf.getvalue()
    if op == 3:  # a header declaring a huge shape over a small payload
        hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d, 3, 8), }" % (
            rng.choice([2 ** 31, 2 ** 40, 10 ** 6]), rng.choice([1, 2 ** 31]))
        hdr = hdr.ljust(118) + "\n"
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + b"\x00" * 64
    if op == 4:
        return _text_damage(rng, b)
    if op == 5:
        return b[:rng.randrange(len(b))]
    return b


def npz(rng: random.Random) -> bytes:
    """A .npz: arrays under other names, a damaged zip, an entry that is not npy, or a deflated entry whose
    header declares far more data than it holds."""
    buf = io.BytesIO()
    op = rng.randrange(5)
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        if op == 0:
            z.writestr("x.npy", npy(rng))
        elif op == 1:
            for i in range(rng.choice([0, 2, 30])):
                z.writestr(f"a{i}.npy", npy(rng))
        elif op == 2:
            z.writestr("x.npy", b"not an array")
        elif op == 3:  # 256 MiB of zeros declared, ~256 KiB on disk
            hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 64, 1024, 1024), }".ljust(118) + "\n"
            head = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode()
            with z.open("x.npy", "w", force_zip64=True) as fh:
                fh.write(head)
                zero = bytes(1 << 20)
                for _ in range(256):
                    fh.write(zero)
        else:
            z.writestr("../../x.npy", npy(rng))
    b = buf.getvalue()
    return _text_damage(rng, b) if rng.random() < 0.2 else b


def _png(w: int, h: int, color: int = 2, depth: int = 8, body: bytes | None = None) -> bytes:
    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0)
    raw = body if body is not None else b"\x00" * 4096  # far fewer pixels than the header declares
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def image(rng: random.Random) -> tuple[str, bytes]:
    """(suffix, bytes): a PNG/JPEG/BMP/GIF of the model's size or not, other modes (L, RGBA, P, I;16, CMYK),
    a decompression bomb header, truncated or damaged bytes."""
    from PIL import Image

    op = rng.randrange(6)
    if op == 0:
        return ".png", _png(rng.choice([100000, 2 ** 31 - 1, 65535]), rng.choice([100000, 65535]))
    mode = rng.choice(["RGB", "L", "RGBA", "P", "I;16", "CMYK", "1", "F"])
    size = rng.choice([(8, 8), (8, 9), (1, 1), (64, 48), (3, 8)])
    fmt, suffix = rng.choice([("PNG", ".png"), ("JPEG", ".jpg"), ("BMP", ".bmp"), ("GIF", ".gif"), ("TIFF", ".tif")])
    try:
        im = Image.new(mode, size, color=rng.randrange(256) if mode in ("L", "P", "1") else None)
        buf = io.BytesIO()
        im.save(buf, fmt)
    except (OSError, ValueError, KeyError):
        im = Image.new("RGB", size)
        buf = io.BytesIO()
        im.save(buf, "PNG")
        suffix = ".png"
    b = buf.getvalue()
    if op == 1:
        return suffix, b[:rng.randrange(len(b))]
    if op == 2:
        return suffix, _text_damage(rng, b)
    if op == 3:
        return rng.choice([".png", ".jpg", ".jpeg"]), rng.randbytes(rng.randrange(0, 500))
    return suffix, b


RAW_SUFFIXES = [".rgb", ".bgr", ".rgbchw", ".gray", ".yuv444", ".nv12", ".bin", ".raw", ".f32", ""]


def raw(rng: random.Random) -> tuple[str, bytes]:
    """(suffix, bytes): a raw calibration file of 1x3x8x8 at uint8 or float32, or of another size."""
    n = rng.choice([192, 768, 0, 1, 191, 767, 3 * 8 * 8 * 2, 12288, 100])
    return rng.choice(RAW_SUFFIXES), rng.randbytes(n)
