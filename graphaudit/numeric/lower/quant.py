"""Lowering of Horizon fake quantization: HzCalibration, HzQuantize, HzDequantize."""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import TensorProto, helper

from .common import _FLOAT_TYPES, _INT_TYPES, _Attrs, _Emitter, _Failure, _inp

__all__: list[str] = []


class QuantLowerings:
    """Mixin of :class:`~graphaudit.numeric.lower.core.Lowerer`: quantization ops (docs/HORIZON.md section 3)."""

    def _calibration(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzCalibration: fake quantization ``y = (clip(round(x/s) + zp, qmin, qmax) - zp) * s``.

        Source: docs/HORIZON.md section 3 (the hbdk4 frontend's reading of HMCT's HzCalibration); rounding is half to
        even, as QuantizeLinear (Horizon's kernel rounds ties 0.5 -> 0, 1.5 -> 2, 2.5 -> 2).

        ``dequantize_scale`` (a float; written with ``channel_scales`` by HMCT's activation equalization pass,
        ``hmct/quantizer/calibrater/activation/activation_equalization.py``, on per-channel activation nodes
        feeding a Conv whose weights it rescales by ``scales / max(scales)``) replaces the dequantization scale:
        ``y = (clip(round(x/s[c]) + zp, qmin, qmax) - zp) * dequantize_scale``, and with ``switch`` OFF
        ``y = x * dequantize_scale / s[c]``: the output is the input rescaled per channel, not its fake-quantized
        value. ``channel_scales`` (``dequantize_scale / scales`` as written) has no effect of its own. Both read
        off Horizon's kernel (horizon_nn 1.1.0) on single-node models and checked on the PP-OCRv4 det sets by
        ``tests/horizon_runtime/test_lowering_vs_horizon.py``.
        """
        self._ignore(n, a, {"thresholds", "scales", "zero_point", "qtype", "axis", "group", "constant", "switch",
                            "quant_attrs", "bits", "info_strings", "cali_attrs", "max_num_bins", "num_bins",
                            "percentiles", "channel_scales", "dequantize_scale"})
        x, y = n.input[0], n.output[0]
        dq = a.get("dequantize_scale")
        off = str(a.get("switch", "ON")).upper() == "OFF"
        if off and dq is None:
            e.op("Identity", [x], out=y)
            return "switch OFF -> Identity"
        qtype = _calibration_qtype(a)
        ft = self._float_type(x)
        passed = self._float_calibration(e, x, y, qtype, ft, dq)
        if passed:
            return passed
        signed, bits, qmin, qmax = _integer_range(qtype)
        s, zp = _calibration_grid(a, qtype, signed, qmin, qmax)
        axis = self._calibration_axis(x, a, len(s))
        kind = f"{qtype} {'per-channel' if axis is not None else 'per-tensor'}"
        if not off:
            self._remark_pass_through(a)
        if dq is not None:
            return kind + self._rescale(e, x, y, s, _dequantize_scale(a), zp, qmin, qmax, axis, ft, off)
        return kind + self._fake_quant(e, x, y, s, zp, qmin, qmax, (signed, bits), axis, ft)

    @staticmethod
    def _float_calibration(e: _Emitter, x: str, y: str, qtype: str, ft: type, dq) -> str | None:
        """The lowering of a float ``qtype`` (float32: Identity; float16: Cast there and back), or None for
        integer qtypes."""
        if qtype in ("float32", "float16") and dq is not None:
            raise _Failure(f"dequantize_scale with qtype {qtype}: no known semantics")
        if qtype == "float32":
            e.op("Identity", [x], out=y)
            return "float32 -> Identity"
        if qtype == "float16":
            h = e.op("Cast", [x], to=TensorProto.FLOAT16)
            e.op("Cast", [h], out=y, to=helper.np_dtype_to_tensor_dtype(np.dtype(ft)))
            return "float16 -> Cast to float16 and back"
        return None

    def _calibration_axis(self, x: str, a: _Attrs, c: int) -> int | None:
        """The channel axis of ``c`` scales on input ``x`` (None for one scale), checked against its shape."""
        if c <= 1:
            return None
        axis = a.int("axis", 1)
        xs = self.shapes.shape(x)
        if xs is not None:
            if not -len(xs) <= axis < len(xs):
                raise _Failure(f"axis {axis} out of range for rank {len(xs)}")
            d = xs[axis]
            if d is not None and d != c:
                raise _Failure(f"{c} scales but dim {axis} of {x!r} is {d}")
        return axis

    def _remark_pass_through(self, a: _Attrs) -> None:
        """Note the nodes that Horizon's runtime would not fake-quantize although the lowering does.

        Horizon's kernel (horizon_nn 1.1.0, single-node models in ``tests/horizon_runtime``) fake-quantizes only when
        ``constant`` is 1 or 2 and ``scales`` is given; with ``constant`` 0 or absent, or with thresholds only, it
        passes the input through unchanged (what HMCT means by ``constant`` 0 is not documented).
        hb_mapper's calibrated models set both on every node; graphaudit keeps the fake-quantizing reading of
        docs/HORIZON.md section 3 for the other cases and says so here.
        """
        if a.int("constant", 0) not in (1, 2):
            self.remarks[("HzCalibration", "constant 0 or absent: Horizon's runtime passes such a node through "
                                           "unquantized; lowered as fake quantization (docs/HORIZON.md section 3)")] += 1
        elif not a.floats("scales"):
            self.remarks[("HzCalibration", "no scales (thresholds only): Horizon's runtime passes such a node "
                                           "through unquantized; lowered as fake quantization with thresholds / "
                                           "qmax")] += 1

    def _rescale(self, e: _Emitter, x: str, y: str, s: np.ndarray, dq: np.float32, zp: np.ndarray, qmin: int,
                 qmax: int, axis: int | None, ft: type, off: bool) -> str:
        """HzCalibration with ``dequantize_scale``: quantize with ``s``, dequantize with ``dq`` (see above)."""
        shape = self._channel_shape(x, axis, len(s)) if axis is not None else ()
        if off:
            r = (np.float64(dq) / s.astype(np.float64)).astype(ft)
            e.op("Mul", [x, e.const("rescale", r.reshape(shape))], out=y)
            return " with dequantize_scale, switch OFF -> Mul by dequantize_scale / scales"
        self._need(11, "the fake-quant formula (Round)")
        s_c = e.const("scale", s.astype(ft).reshape(shape))
        t, z_c = self._round_clip(e, x, s_c, zp, qmin, qmax, shape, ft)
        e.op("Mul", [t, e.const("dequantize_scale", np.asarray(dq, ft))], out=y)
        return " with dequantize_scale -> Div/Round/Clip/Mul formula (Mul by dequantize_scale)"

    @staticmethod
    def _round_clip(e: _Emitter, x: str, s_c: str, zp: np.ndarray, qmin: int, qmax: int, shape: tuple,
                    ft: type) -> tuple[str, str | None]:
        """``clip(round(x / s) + zp, qmin, qmax) - zp`` (the integer grid in float), and the zero-point constant
        (None when every zero point is 0)."""
        t = e.op("Round", [e.op("Div", [x, s_c])])
        z_c = None
        if np.any(zp != 0):
            z_c = e.const("zero_point", zp.astype(ft).reshape(shape))
            t = e.op("Add", [t, z_c])
        t = e.op("Clip", [t, e.const("qmin", np.asarray(qmin, ft)), e.const("qmax", np.asarray(qmax, ft))])
        if z_c is not None:
            t = e.op("Sub", [t, z_c])
        return t, z_c

    def _fake_quant(self, e: _Emitter, x: str, y: str, s: np.ndarray, zp: np.ndarray, qmin: int, qmax: int,
                    sb: tuple[bool, int], axis: int | None, ft: type) -> str:
        """QuantizeLinear+DequantizeLinear when the opset has the integer type, else the float formula."""
        qtypes = {(True, 8): np.int8, (False, 8): np.uint8, (True, 16): np.int16, (False, 16): np.uint16}
        qnp = qtypes.get(sb)
        need = None if qnp is None else (21 if sb[1] == 16 else (13 if axis is not None else 10))
        if qnp is not None and self.opset >= need and ft is np.float32:
            s_c = e.const("scale", s if axis is not None else s[0].reshape(()))
            z_c = e.const("zero_point", (zp if axis is not None else zp[:1].reshape(())).astype(qnp))
            attrs = {"axis": axis} if axis is not None else {}
            q = e.op("QuantizeLinear", [x, s_c, z_c], **attrs)
            e.op("DequantizeLinear", [q, s_c, z_c], out=y, **attrs)
            return " -> QuantizeLinear+DequantizeLinear"
        self._need(11, "the fake-quant formula (Round)")
        shape = self._channel_shape(x, axis, len(s)) if axis is not None else ()
        s_c = e.const("scale", s.astype(ft).reshape(shape))
        t, z_c = self._round_clip(e, x, s_c, zp, qmin, qmax, shape, ft)
        e.op("Mul", [t, s_c], out=y)
        return " -> Div/Round/Add/Clip/Sub/Mul formula" if z_c is not None else " -> Div/Round/Clip/Mul formula"

    def _scale_layout(self, s: str) -> tuple[bool, int]:
        """(per_axis, count) of a scale input of HzQuantize/HzDequantize."""
        shape = self.shapes.shape(s)
        if shape is None or any(d is None for d in shape):
            raise _Failure(f"shape of scale {s!r} unknown")
        if len(shape) > 1:
            raise _Failure(f"scale {s!r} has rank {len(shape)}; a scalar or 1-D scale is expected")
        count = int(np.prod(shape, dtype=np.int64))
        return count > 1, count

    def _scalar(self, e: _Emitter, name: str, rank: int | None) -> str:
        """A 1-element tensor reshaped to a scalar (QuantizeLinear-10 wants scalar scale and zero point)."""
        if rank == 0:
            return name
        return e.op("Reshape", [name, e.const("scalar_shape", np.zeros((0,), np.int64))])

    def _broadcast_param(self, e: _Emitter, x: str, name: str, axis: int, c: int, to_float: type | None) -> str:
        """Reshape a per-axis parameter tensor to broadcast along ``axis`` of ``x`` (optionally cast to float)."""
        if to_float is not None:
            name = e.op("Cast", [name], to=helper.np_dtype_to_tensor_dtype(np.dtype(to_float)))
        shape = self._channel_shape(x, axis, c)
        return e.op("Reshape", [name, e.const("param_shape", np.asarray(shape, np.int64))])

    def _formula_params(self, e: _Emitter, x: str, s: str, z: str, per_axis: bool, axis: int, c: int,
                        ft: type) -> tuple[str, str | None]:
        """Scale and float zero point of the Q/DQ formula, broadcast along ``axis`` when per-channel."""
        if per_axis:
            return (self._broadcast_param(e, x, s, axis, c, None),
                    self._broadcast_param(e, x, z, axis, c, ft) if z else None)
        return s, (e.op("Cast", [z], to=helper.np_dtype_to_tensor_dtype(np.dtype(ft))) if z else None)

    def _quantize(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzQuantize(data, scale, zero_point?; bits=8, axis) = QuantizeLinear (docs/HORIZON.md section 3).

        Without zero_point the output type is int<bits> (signed), as in Horizon's int8 fixed-point stage.
        """
        self._ignore(n, a, {"bits", "axis"})
        x, s, z, y = n.input[0], _inp(n, 1), _inp(n, 2), n.output[0]
        if not s:
            raise _Failure("no scale input")
        if z:
            zt = self.shapes.dtype(z)
            if zt not in _INT_TYPES:
                raise _Failure(f"element type of zero_point {z!r} unknown or not an integer type")
            signed, bits = _INT_TYPES[zt]
        else:
            signed, bits = True, a.int("bits", 8)
            if bits not in (8, 16):
                raise _Failure(f"bits={bits} without a zero_point input: no output type")
            zt = TensorProto.INT8 if bits == 8 else TensorProto.INT16
        per_axis, c = self._scale_layout(s)
        axis = a.int("axis", 1)
        ft = self._float_type(x)
        need = 21 if bits == 16 else (13 if per_axis else 10)
        if bits in (8, 16) and self.opset >= need and ft is np.float32:
            if not z:
                z = e.const("zero_point", np.zeros((c,) if per_axis else (), helper.tensor_dtype_to_np_dtype(zt)))
            if not per_axis and self.opset < 13:
                s = self._scalar(e, s, self.shapes.rank(s))
                z = self._scalar(e, z, self.shapes.rank(z) if z in self.shapes.info else 0)
            e.op("QuantizeLinear", [x, s, z], out=y, **({"axis": axis} if per_axis else {}))
            return f"{'int' if signed else 'uint'}{bits} {'per-axis' if per_axis else 'per-tensor'} -> QuantizeLinear"
        self._need(11, "the quantize formula (Round)")
        qmin, qmax = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)
        s_b, z_b = self._formula_params(e, x, s, z, per_axis, axis, c, ft)
        t = e.op("Round", [e.op("Div", [x, s_b])])
        if z_b is not None:
            t = e.op("Add", [t, z_b])
        t = e.op("Clip", [t, e.const("qmin", np.asarray(qmin, ft)), e.const("qmax", np.asarray(qmax, ft))])
        e.op("Cast", [t], out=y, to=zt)
        return f"{'int' if signed else 'uint'}{bits} -> Div/Round/Add/Clip/Cast formula"

    def _dequantize(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzDequantize(data, scale, zero_point?; axis) = DequantizeLinear (docs/HORIZON.md section 3)."""
        self._ignore(n, a, {"axis", "bits"})
        x, s, z, y = n.input[0], _inp(n, 1), _inp(n, 2), n.output[0]
        if not s:
            raise _Failure("no scale input")
        per_axis, c = self._scale_layout(s)
        axis = a.int("axis", 1)
        sb = _INT_TYPES.get(self.shapes.dtype(x))
        st = self.shapes.dtype(s)
        ft = _FLOAT_TYPES.get(st, np.float32)
        if sb is not None and ft is np.float32:
            need = 21 if sb[1] == 16 else (13 if per_axis else 10)
            if self.opset >= need:
                ins = [x, s] + ([z] if z else [])
                if not per_axis and self.opset < 13:
                    ins = [x, self._scalar(e, s, self.shapes.rank(s))] + (
                        [self._scalar(e, z, self.shapes.rank(z))] if z else [])
                e.op("DequantizeLinear", ins, out=y, **({"axis": axis} if per_axis else {}))
                return f"{'per-axis' if per_axis else 'per-tensor'} -> DequantizeLinear"
        t = e.op("Cast", [x], to=helper.np_dtype_to_tensor_dtype(np.dtype(ft)))
        s_b, z_b = self._formula_params(e, x, s, z, per_axis, axis, c, ft)
        if z_b is not None:
            t = e.op("Sub", [t, z_b])
        e.op("Mul", [t, s_b], out=y)
        return f"{'per-axis' if per_axis else 'per-tensor'} -> Cast/Sub/Mul formula"


def _calibration_qtype(a: _Attrs) -> str:
    """An HzCalibration's ``qtype``, lower case; from the legacy ``bits`` when absent (default int8)."""
    qtype = a.get("qtype")
    if qtype is None:
        qtype = f"int{a.int('bits', 8)}"
    return str(qtype).lower()


def _integer_range(qtype: str) -> tuple[bool, int, int, int]:
    """(signed, bits, qmin, qmax) of an integer qtype such as ``int8`` or ``uint16`` (2 to 32 bits)."""
    m = re.fullmatch(r"(u?)int(\d+)", qtype)
    if not m or not 2 <= int(m[2]) <= 32:
        raise _Failure(f"qtype {qtype!r} has no documented fake-quant semantics")
    signed, bits = not m[1], int(m[2])
    qmin, qmax = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)
    return signed, bits, qmin, qmax


def _calibration_grid(a: _Attrs, qtype: str, signed: bool, qmin: int, qmax: int) -> tuple[np.ndarray, np.ndarray]:
    """(scales as float32, zero points as int64, one per scale) of an HzCalibration; scales from ``thresholds /
    qmax`` when only thresholds are given (symmetric signed quantization only)."""
    zps = a.ints("zero_point")
    scales = a.floats("scales")
    if not scales:
        thresholds = a.floats("thresholds")
        if not thresholds:
            raise _Failure("neither scales nor thresholds")
        if not signed or any(zps):
            raise _Failure("no scales and asymmetric quantization: the scale is not derivable from thresholds")
        scales = [t / qmax for t in thresholds]
    s = np.asarray(scales, dtype=np.float64).astype(np.float32)
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise _Failure(f"non-positive or non-finite scale ({float(s.min())})")
    c = len(s)
    if not zps:
        zps = [0]
    if len(zps) not in (1, c):
        raise _Failure(f"{len(zps)} zero points for {c} scales")
    zp = np.broadcast_to(np.asarray(zps, dtype=np.int64), (c,)).copy()
    if np.any(zp < qmin) or np.any(zp > qmax):
        raise _Failure(f"zero point outside [{qmin}, {qmax}] of {qtype}")
    return s, zp


def _dequantize_scale(a: _Attrs) -> np.float32:
    """The ``dequantize_scale`` attribute as one positive finite float32."""
    dq = a.floats("dequantize_scale")
    dqs = dq[0] if len(dq) == 1 else float("nan")
    if not np.isfinite(dqs) or dqs <= 0:
        raise _Failure(f"dequantize_scale {a['dequantize_scale']!r} is not one positive finite float")
    return np.float32(dqs)
