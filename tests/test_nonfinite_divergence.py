"""NaN or infinite values are no divergence N401 blames on a rewrite (P209, P211 and N406 report them).

Conv, Sub, Mul folded into one Conv is the same math, but not the same float range: with mean 2e38 and scale 1.5,
the original computes ``(x - 2e38) * 1.5`` (1.2e38 for x = 2.8e38: finite) while the folded Conv computes ``1.5 * x -
3e38`` (1.5 * 2.8e38 overflows to inf first). The expected values are computed here with numpy float32 from those
formulas. (onnxruntime's BatchNormalization kernel computes the folded form itself, so it overflows alike.)
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser

import graphaudit
from graphaudit.measure import NumericOptions

MEAN, SCALE = 2e38, 1.5


def _stages(d, folded_weight: float = SCALE, mean: float = MEAN) -> None:
    d.mkdir()
    orig = f"""<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,2,2] x) => (float[1,1,2,2] y)
    <float[1,1,1,1] w = {{1.0}}, float[1,1,1,1] m = {{{mean}}}, float[1,1,1,1] s = {{{SCALE}}}> {{
      c = Conv (x, w)
      d = Sub (c, m)
      y = Mul (d, s)
    }}"""
    opt = f"""<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,2,2] x) => (float[1,1,2,2] y) <float[1,1,1,1] w = {{{folded_weight}}}, float[1] b = {{{-mean * SCALE}}}> {{
      y = Conv (x, w, b)
    }}"""
    for role, text in (("original", orig), ("optimized", opt)):
        m = onnx.parser.parse_model(text)
        for n in m.graph.node:
            n.name = n.op_type
        onnx.checker.check_model(m)
        onnx.save(m, str(d / f"m_{role}.onnx"))


def _data(d, values: list[list[float]]) -> None:
    d.mkdir()
    for k, v in enumerate(values):
        np.save(d / f"{k}.npy", np.asarray(v, np.float32).reshape(1, 1, 2, 2))


def test_overflow_in_one_stage_is_not_a_rewrite_divergence(tmp_path):
    x = np.float32(2.8e38)  # the smallest sample value
    with np.errstate(over="ignore"):
        a = (x - np.float32(MEAN)) * np.float32(SCALE)
        b = np.float32(SCALE) * x + np.float32(-MEAN * SCALE)
    assert np.isfinite(a) and np.isinf(b)  # the stages part in an inf, not in numbers

    _stages(tmp_path / "st")
    _data(tmp_path / "data", [[3e38, 2.9e38, 3.1e38, 3.2e38], [3.3e38, 3e38, 2.8e38, 3e38]])  # all below 4e38 / 1.5
    au = graphaudit.audit([tmp_path / "st"], data=tmp_path / "data", numeric=NumericOptions(isolated=False))
    assert "N401" not in [f.code for f in au.report.findings]
    assert "N406" in [f.code for f in au.report.findings]  # the overflow is reported, as an overflow
    assert all(v.cause != "rewrite" for v in au.report.verdict), au.report.verdict
    line = next(v for v in au.report.verdict if v.scope == "original -> optimized")
    assert line.cause == "not-seen" and "NaN or infinite values at y" in line.text
    assert "0 such values in original, 8 in optimized" in line.text  # 2 samples x 4 elements, all inf in b


def test_finite_divergence_is_still_blamed(tmp_path):
    """A folded weight 1.6 instead of 1.5 on ordinary data: the stages part in numbers, N401 names the fusion."""
    _stages(tmp_path / "st", folded_weight=1.6, mean=0.0)
    _data(tmp_path / "data", [[0.5, -0.25, 1.0, 0.75], [-1.0, 0.1, 0.2, 0.3]])
    au = graphaudit.audit([tmp_path / "st"], data=tmp_path / "data", numeric=NumericOptions(isolated=False))
    assert "N401" in [f.code for f in au.report.findings]
    assert au.report.verdict[0].cause == "rewrite", au.report.verdict[0]


def test_fewer_nonfinite_in_the_test_stage_does_not_stop_the_search(tmp_path):
    """A rewrite putting -1e9 where the original masks with -inf (fewer non-finite values in the test stage) is no
    parting: a real divergence after it (a scale 1.5 instead of 1.0 on the Softmax output) is still N401."""
    d = tmp_path / "st"
    d.mkdir()
    for role, fill, k in (("original", "-inf", 1.0), ("optimized", "-1e9", 1.5)):
        text = f"""<ir_version: 8, opset_import: ["" : 13]>
        g (float[1,4] x) => (float[1,4] y) <float[1,4] m = {{{fill}, 0.0, 0.0, 0.0}}, float[1] k = {{{k}}}> {{
          a = Add (x, m)
          s = Softmax (a)
          y = Mul (s, k)
        }}"""
        m = onnx.parser.parse_model(text)
        for n in m.graph.node:
            n.name = n.op_type
        onnx.save(m, str(d / f"m_{role}.onnx"))
    (tmp_path / "data").mkdir()
    for k, v in enumerate([[0.5, -0.25, 1.0, 0.75], [-1.0, 0.1, 0.2, 0.3]]):
        np.save(tmp_path / "data" / f"{k}.npy", np.asarray([v], np.float32))
    au = graphaudit.audit([d], data=tmp_path / "data", numeric=NumericOptions(isolated=False))
    (n401,) = [f for f in au.report.findings if f.code == "N401"]
    assert n401.location["tensor"] == "y", n401.message
    (t,) = au.report.numeric
    assert next(ts.nonfinite for ts in t.tensors if ts.b_tensor == "a") == [2, 0]  # 2 samples x one -inf
