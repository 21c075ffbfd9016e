"""A change whose clipping a saturating reader removes is not blamed (N404, the verdict).

The isolated SQNR of a fake quantization is measured on its own tensor; when every reader saturates inside the clip
range (PP-OCR cls's squeeze-excitation Conv clipped at 3 before a HardSigmoid that saturates at 2.5) the clipping
costs nothing one node later. The expected figures here are computed with numpy from the definitions (round half to
even, clip to the int8 grid, HardSigmoid ``clip(alpha x + beta, 0, 1)``), on the same samples graphaudit runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

import graphaudit
from graphaudit.measure import NumericOptions

REPO = Path(__file__).resolve().parents[1]
CLS = REPO / "samples" / "build" / "hb" / "ppocr_cls_bayes-e"

_FLOAT = """
<ir_version: 8, opset_import: ["" : 13]>
g (float[1,64] x) => (float[1,64] yh, float[1,64] yr, float[1,64] y1, float[1,64] y2, float[1,64] y3, float[1,64] y4)
<float ka = {10.0}, float kr = {10.0}, float k1 = {1.0}, float k2 = {2.0}, float k3 = {3.0}, float k4 = {4.0}> {
  a = Mul (x, ka)
  yh = HardSigmoid <alpha = 0.2, beta = 0.5> (a)
  r = Mul (x, kr)
  yr = Relu (r)
  p1 = Mul (x, k1)
  y1 = Abs (p1)
  p2 = Mul (x, k2)
  y2 = Abs (p2)
  p3 = Mul (x, k3)
  y3 = Abs (p3)
  p4 = Mul (x, k4)
  y4 = Abs (p4)
}
"""

#: scale per quantized tensor: ``a`` and ``r`` (values up to 10) clipped at 127 * 3/127 = 3, the peers p_k (values
#: up to k) on a grid that fits them.
SCALES = {"a": 3 / 127, "r": 3 / 127, "p1": 1 / 127, "p2": 2 / 127, "p3": 3 / 127, "p4": 4 / 127}
READER = {"a": "yh", "r": "yr", "p1": "y1", "p2": "y2", "p3": "y3", "p4": "y4"}


def _qdq_text() -> str:
    """The float graph with a QuantizeLinear/DequantizeLinear pair (int8, zero point 0) on every Mul output."""
    head, body = _FLOAT.split("{\n", 1)
    inits = ", ".join(f"float s_{t} = {{{s!r}}}, int8 z_{t} = {{0}}" for t, s in SCALES.items())
    head = head.replace("float k4 = {4.0}>", f"float k4 = {{4.0}}, {inits}>")
    lines = []
    for line in body.splitlines():
        name = line.split("=")[0].strip()
        if name in SCALES:
            lines += [line, f"  {name}_q = QuantizeLinear ({name}, s_{name}, z_{name})",
                      f"  {name}_d = DequantizeLinear ({name}_q, s_{name}, z_{name})"]
        else:
            for t in SCALES:
                line = line.replace(f"({t})", f"({t}_d)")
            lines.append(line)
    return head + "{\n" + "\n".join(lines) + "\n"


def _model(text: str, names: bool = True) -> onnx.ModelProto:
    m = onnx.parser.parse_model(text)
    for n in m.graph.node:
        n.name = {"a": "clipped_mul", "r": "relu_mul"}.get(n.output[0], n.output[0] + "_node")
    onnx.checker.check_model(m)
    return m


def _write_case(tmp_path: Path, models: dict[str, onnx.ModelProto], seed: int) -> tuple[Path, Path, list]:
    """The stages ``tmp_path/stages/m_<role>.onnx`` and 6 samples ``tmp_path/data/K.npy``, [1, 64] float32 uniform in
    [-1, 1) drawn with ``seed``: ``(stages dir, data dir, the samples)``."""
    d, data = tmp_path / "stages", tmp_path / "data"
    d.mkdir()
    data.mkdir()
    for role, m in models.items():
        onnx.save(m, str(d / f"m_{role}.onnx"))
    rng = np.random.default_rng(seed)
    xs = [rng.uniform(-1, 1, (1, 64)).astype(np.float32) for _ in range(6)]
    for k, x in enumerate(xs):
        np.save(data / f"{k}.npy", x)
    return d, data, xs


def _fake_quant(v: np.ndarray, s: float) -> np.ndarray:
    return np.clip(np.rint(v / s), -128, 127) * s  # np.rint rounds half to even, as QuantizeLinear


def _sqnr(ref: np.ndarray, test: np.ndarray) -> float:
    e = float(np.sum((test - ref) ** 2))
    return math.inf if e == 0 else 10 * math.log10(float(np.sum(ref ** 2)) / e)


def test_clipping_a_hardsigmoid_removes_is_not_named(tmp_path):
    d, data, xs = _write_case(tmp_path, {"optimized": _model(_FLOAT), "qdq": _model(_qdq_text())}, seed=7)

    # the figures from the definitions: each change alone on its tensor, and a's and r's after their reader
    x = np.concatenate(xs).astype(np.float64)
    mult = {"a": 10.0, "r": 10.0, "p1": 1.0, "p2": 2.0, "p3": 3.0, "p4": 4.0}
    alone = {t: _sqnr(x * k, _fake_quant(x * k, SCALES[t])) for t, k in mult.items()}
    med = float(np.median(list(alone.values())))
    assert alone["a"] < med - 6 and alone["r"] < med - 6  # both are outliers measured alone

    def hsig(v):
        return np.clip(0.2 * v + 0.5, 0, 1)

    after_a = _sqnr(hsig(10 * x), hsig(_fake_quant(10 * x, SCALES["a"])))
    after_r = _sqnr(np.maximum(10 * x, 0), np.maximum(_fake_quant(10 * x, SCALES["r"]), 0))
    assert after_a > med - 6 > after_r  # after its reader, a's clipping is gone; r's (Relu passes it) is not

    au = graphaudit.audit([d], data=data, numeric=NumericOptions())
    line = next(v for v in au.report.verdict if v.cause == "quantization")
    assert line.nodes == ["relu_mul"], line.text
    n404 = next(f for f in au.report.findings if f.code == "N404")
    assert [o["node"] for o in n404.evidence["outliers"]] == ["relu_mul"], n404.message
    n402 = next(f for f in au.report.findings if f.code == "N402")
    (landed,) = n402.evidence["landed"]
    assert landed["node"] == "clipped_mul" and landed["consumers"] == ["yh_node"]
    assert landed["sqnr_db_alone"] == pytest.approx(alone["a"], abs=1e-3)
    # the bound is a bound: at most what the definitions give after the HardSigmoid, and 0.2 * s / 2 per element
    assert landed["bound"] == pytest.approx(0.2 * SCALES["a"] / 2, rel=1e-6)
    assert med - 6 < landed["sqnr_db"] <= after_a


@pytest.mark.parametrize("op, attrs, g, lipschitz", [
    ("HardSigmoid", "<alpha = 0.2, beta = 0.5>", lambda v: np.clip(0.2 * v + 0.5, 0, 1), 0.2),
    ("HardSigmoid", "<alpha = 0.5, beta = 0.5>", lambda v: np.clip(0.5 * v + 0.5, 0, 1), 0.5),
    ("Sigmoid", "", lambda v: 1 / (1 + np.exp(-v)), 0.25),
    ("Tanh", "", np.tanh, 1.0),
])
@pytest.mark.parametrize("threshold", [0.5, 3.0, 8.0])
def test_bound_holds_on_every_element(op, attrs, g, lipschitz, threshold, tmp_path):
    """landed_sqnr's per-element bound against the brute-force error after the reader, on values reaching 4x past
    the clip range: never exceeded; and it is the rounding term alone where the reader saturates inside the grid."""
    from graphaudit.checks.saturation import landed_sqnr
    from graphaudit.load import load_stage
    from graphaudit.numeric.compare import TensorError

    s = threshold / 127
    text = f"""<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,4096] x) => (float[1,4096] y) <float s = {{{s!r}}}, int8 z = {{0}}> {{
      q = QuantizeLinear (x, s, z)
      d = DequantizeLinear (q, s, z)
      y = {op} {attrs} (d)
    }}"""
    m = onnx.parser.parse_model(text)
    for n in m.graph.node:
        n.name = n.op_type
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    st = load_stage(path)
    x = np.random.default_rng(1).uniform(-4 * threshold, 4 * threshold, 4096)
    q = _fake_quant(x, s)
    err = np.abs(g(q) - g(x))
    te = TensorError("y", "y", "exact", 0, "", b_node=op)  # the reader's output, its reference values g(x)
    te.stats.update(g(x).astype(np.float32), g(x).astype(np.float32))
    ld = landed_sqnr(st, ["QuantizeLinear", "DequantizeLinear"], "d", [te])
    assert ld is not None and ld.consumers == [op]
    assert float(err.max()) <= ld.bound * (1 + 1e-9)
    power = float(np.mean(g(x).astype(np.float32).astype(np.float64) ** 2))
    assert ld.sqnr_db == pytest.approx(10 * math.log10(power / ld.bound ** 2), rel=1e-9)
    assert ld.sqnr_db <= _sqnr(g(x), g(q)) + 1e-9
    hi = 127 * s
    if g(np.array([hi]))[0] == g(np.array([1e9]))[0] and g(np.array([-128 * s]))[0] == g(np.array([-1e9]))[0]:
        assert ld.bound == pytest.approx(lipschitz * s / 2, rel=1e-6)  # alpha and s stored as float32


def test_relu_and_conv_readers_get_no_bound(tmp_path):
    """A reader that passes clipped values on (Relu above its threshold, a Conv, a second reader among them) leaves
    the change judged on its own tensor."""
    from graphaudit.checks.saturation import landed_sqnr
    from graphaudit.load import load_stage
    from graphaudit.numeric.compare import TensorError

    text = """<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,8] x) => (float[1,8] y, float[1,8] z) <float s = {0.1}, int8 zp = {0}> {
      q = QuantizeLinear (x, s, zp)
      d = DequantizeLinear (q, s, zp)
      y = Relu (d)
      z = HardSigmoid (d)
    }"""
    m = onnx.parser.parse_model(text)
    for n in m.graph.node:
        n.name = n.op_type
    onnx.save(m, str(tmp_path / "m.onnx"))
    st = load_stage(tmp_path / "m.onnx")
    tes = []
    for t, op in (("y", "Relu"), ("z", "HardSigmoid")):
        te = TensorError(t, t, "exact", 0, "", b_node=op)
        te.stats.update(np.ones(8, np.float32), np.ones(8, np.float32))
        tes.append(te)
    assert landed_sqnr(st, ["QuantizeLinear", "DequantizeLinear"], "d", tes) is None


@pytest.mark.skipif(not (CLS / "model_output").is_dir(), reason="real PP-OCR cls set not built (setup.sh)")
def test_real_ppocr_cls_se_convs_not_blamed():
    """PP-OCR cls bayes-e: Conv@50's HzCalibration (threshold 3, read from the calibrated protobuf) measured alone
    on conv2d_92.tmp_1 of the shipped float model in onnxruntime, and after the HardSigmoid that reads it. The first
    is the worst of the transition; the second is far above every peer: the verdict must not name it."""
    cal = onnx.load(str(CLS / "model_output" / "ppocr_cls_calibrated_model.onnx"), load_external_data=False)
    node = next(n for n in cal.graph.node if n.op_type == "HzCalibration" and n.input[0] == "conv2d_92.tmp_1")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    (s,) = attrs["scales"]
    assert list(attrs["thresholds"]) == [3.0]
    m = onnx.load(str(CLS / "ch_ppocr_mobile_v2.0_cls_infer.onnx"))
    m.graph.output.extend([onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None)
                           for t in ("conv2d_92.tmp_1", "hardsigmoid_8.tmp_0")])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    files = sorted((CLS / "calibration_data_bgr").iterdir())
    xs, hs = [], []
    for f in files:  # raw uint8 NCHW bgr 1x3x48x192, normalized as the config says: (p - 127.5) * 0.0078431373
        p = np.fromfile(f, np.uint8).reshape(1, 3, 48, 192).astype(np.float32)
        x, h = sess.run(["conv2d_92.tmp_1", "hardsigmoid_8.tmp_0"], {"x": (p - 127.5) * np.float32(0.0078431373)})
        xs.append(x.astype(np.float64))
        hs.append(h.astype(np.float64))
    x, h = np.concatenate(xs), np.concatenate(hs)
    q = _fake_quant(x, s)
    alone, after = _sqnr(x, q), _sqnr(h, np.clip(0.2 * q + 0.5, 0, 1))
    assert alone < 10 and after > 45, (alone, after)

    au = graphaudit.audit([CLS / "model_output"], config=CLS / "config.yaml", numeric=NumericOptions())
    line = next(v for v in au.report.verdict if v.cause == "quantization")
    assert "Conv@50" not in line.nodes and "Conv@45" not in line.nodes, line.text
    assert "Relu@4" in line.nodes, line.text  # relu_4.tmp_0's HzCalibration: in the set `bisect` chooses (README)
    n402 = next(f for f in au.report.findings if f.code == "N402" and f.stage == "optimized -> calibrated")
    landed = next(e for e in n402.evidence["landed"] if e["node"] == "Conv@50")
    assert landed["sqnr_db_alone"] == pytest.approx(alone, abs=0.05)
    assert landed["sqnr_db"] <= after + 0.05


def test_n404_names_no_change_far_cleaner_than_the_outputs(tmp_path):
    """N404 and the verdict name an outlier only within 10 dB of the transition's lowest output SQNR: p5, quantized
    on a grid 2.5x too coarse (about 8 dB below its peers alone), is far cleaner than the output the clipped r
    leaves (Relu of a tensor clipped at 3 out of 10), so it cannot be where the outputs' loss concentrates. All
    figures from the definitions with numpy."""
    scales = {"r": 3 / 127, "p1": 1 / 127, "p2": 2 / 127, "p3": 3 / 127, "p4": 4 / 127, "p5": 2.5 * 5 / 127}
    mult = {"r": 10.0, "p1": 1.0, "p2": 2.0, "p3": 3.0, "p4": 4.0, "p5": 5.0}
    outs = ", ".join(f"float[1,64] y_{t}" for t in mult)
    consts = ", ".join(f"float k_{t} = {{{m!r}}}" for t, m in mult.items())
    qconsts = ", ".join(f"float s_{t} = {{{s!r}}}, int8 z_{t} = {{0}}" for t, s in scales.items())

    def text(quantized: bool) -> str:
        body = []
        for t in mult:
            body.append(f"  {t} = Mul (x, k_{t})")
            v = t
            if quantized:
                body += [f"  {t}_q = QuantizeLinear ({t}, s_{t}, z_{t})", f"  {t}_d = DequantizeLinear ({t}_q, s_{t}, z_{t})"]
                v = f"{t}_d"
            body.append(f"  y_{t} = {'Relu' if t == 'r' else 'Abs'} ({v})")
        return (f'<ir_version: 8, opset_import: ["" : 13]>\ng (float[1,64] x) => ({outs})\n'
                f"<{consts}{', ' + qconsts if quantized else ''}> {{\n" + "\n".join(body) + "\n}\n")

    models = {}
    for role, q in (("optimized", False), ("qdq", True)):
        m = onnx.parser.parse_model(text(q))
        for n in m.graph.node:
            n.name = n.output[0] + "_node"
        onnx.checker.check_model(m)
        models[role] = m
    d, data, xs = _write_case(tmp_path, models, seed=3)

    x = np.concatenate(xs).astype(np.float64)
    alone = {t: _sqnr(x * k, _fake_quant(x * k, scales[t])) for t, k in mult.items()}
    med = float(np.median(list(alone.values())))
    out_db = min(_sqnr(np.maximum(10 * x, 0), np.maximum(_fake_quant(10 * x, scales["r"]), 0)),
                 *(_sqnr(np.abs(x * k), np.abs(_fake_quant(x * k, scales[t]))) for t, k in mult.items() if t != "r"))
    assert alone["p5"] <= med - 6 and alone["r"] <= med - 6  # both outliers among their peers
    assert alone["p5"] > out_db + 10 >= alone["r"]  # but p5 is far cleaner than the outputs

    au = graphaudit.audit([d], data=data, numeric=NumericOptions())
    n404 = next(f for f in au.report.findings if f.code == "N404")
    assert [o["node"] for o in n404.evidence["outliers"]] == ["r_node"], n404.message
    line = next(v for v in au.report.verdict if v.cause == "quantization")
    assert line.nodes == ["r_node"], line.text
