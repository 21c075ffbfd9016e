"""bench/bench_insession.py: the combined model it times computes the sums it claims, checked against numpy.

Two stages generated with onnx.helper (stage a in opset 12 with a Squeeze whose axes are an attribute there and an
input from opset 13, stage b in opset 13; both name their tensors alike, so stage b's prefix is what keeps them
apart), run as plain onnxruntime sessions with the compared tensors as outputs; the float64 sums of each pair worked
out here with numpy (sum of squares of a, b and b - a, max |b - a|) must equal the combined model's scalars to
1e-12 relative (float64 sums of the same float32 values in another order differ by about n * 2^-53, n <= 2,048).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.bench_insession import fused_model, max_rel_diff

SHAPE = [1, 4, 8, 8]


def _stage(opset: int, weight: np.ndarray) -> onnx.ModelProto:
    """x [1,4,8,8] -> Conv(4->8, 3x3, pad 1) -> Relu -> ReduceMean over H, W (keepdims) -> Squeeze -> y [1, 8]."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("ReduceMean", ["relu"], ["mean"], axes=[2, 3], keepdims=1)]
    inits = [numpy_helper.from_array(weight, "w")]
    if opset >= 13:
        inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "axes"))
        nodes.append(helper.make_node("Squeeze", ["mean", "axes"], ["y"]))
    else:
        nodes.append(helper.make_node("Squeeze", ["mean"], ["y"], axes=[2, 3]))
    g = helper.make_graph(nodes, f"stage{opset}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _run(model: onnx.ModelProto, feeds: dict, outputs: list[str] | None = None) -> dict:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=t) for t in outputs or [] if t not in have)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()})))


def test_combined_model_sums_equal_numpy_float64_of_the_captured_tensors():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    a = _stage(12, w)
    b = _stage(13, (w * (1 + 1e-3 * rng.standard_normal(w.shape))).astype(np.float32))
    pairs = [("conv", "conv"), ("relu", "relu"), ("y", "y")]
    fused = fused_model(a, b, pairs)
    assert {o.domain: o.version for o in fused.opset_import}[""] == 13
    x = rng.standard_normal(SHAPE).astype(np.float32)
    got = _run(fused, {"x": x, "b::x": x})
    va, vb = _run(a, {"x": x}, ["conv", "relu"]), _run(b, {"x": x}, ["conv", "relu"])
    for k, (ta, tb) in enumerate(pairs):
        a64, b64 = va[ta].astype(np.float64).ravel(), vb[tb].astype(np.float64).ravel()
        e = b64 - a64
        want = {"aa": float(a64 @ a64), "bb": float(b64 @ b64), "ee": float(e @ e), "mx": float(np.abs(e).max())}
        assert want["ee"] > 0  # the stages differ: the error sums are not trivially zero
        for name, v in want.items():
            assert got[f"r{k}_{name}"].dtype == np.float64
            assert float(got[f"r{k}_{name}"]) == pytest.approx(v, rel=1e-12), (ta, name)


def test_max_rel_diff_is_over_the_pairs_both_runs_measured():
    x = {"t1": [1.0, 2.0, 4.0, 0.5], "t2": [1.0, 1.0, 1.0, 1.0]}
    y = {"t1": [1.0, 2.0 * (1 + 1e-10), 4.0, 0.5], "t3": [9.0, 9.0, 9.0, 9.0]}
    assert max_rel_diff(x, y) == pytest.approx(1e-10 / (1 + 1e-10), rel=1e-6)
    assert max_rel_diff(x, x) == 0.0
