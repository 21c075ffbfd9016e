"""Lowering of Horizon preprocessing and float ops (HzPreprocess, HzSwish, HzGelu, HzLayerNorm, ...)."""

from __future__ import annotations

import math

import numpy as np
import onnx

from .common import _Attrs, _Defer, _Emitter, _Failure, _inp

__all__: list[str] = []


class OpLowerings:
    """Mixin of :class:`~graphaudit.numeric.lower.core.Lowerer`: preprocessing and float ops (docs/HORIZON.md section 3)."""

    def _preprocess(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzPreprocess(x, w, b?) = 1x1 convolution with group C on an NCHW input: ``y[c] = w[c] * x[c] + b[c]``.

        Source: docs/HORIZON.md section 3 and the hbdk4 frontend (conv2d with group = channel_group). The channel axis
        is 1 whatever ``data_format`` says: ``data_format`` names the user's training layout, not the layout of the
        node's input (docs/HORIZON.md section 6b: for an NHWC-trained model hb_mapper puts the HzPreprocess, with
        ``data_format`` NHWC, between two Transposes, so its input is NCHW), and Horizon's own kernel
        (``horizon_ops/cpu/hz_preprocess.cc`` in horizon_nn 1.1.0) scales along axis 1 for both values; checked
        against it by ``tests/horizon_runtime/test_lowering_vs_horizon.py`` on the NHWC-trained MTCNN ONet sets.
        Only an input whose dim 1 is known not to be C while its last dim is C takes the per-last-axis reading
        (Mul/Add): Horizon's kernel refuses such an input, so that reading is graphaudit's, not Horizon's.
        """
        self._ignore(n, a, {"channel_group", "data_format", "input_type"})
        x, w, b, y = n.input[0], _inp(n, 1), _inp(n, 2), n.output[0]
        if not w:
            raise _Failure("no weight input")
        xs = self.shapes.shape(x)
        if xs is not None and len(xs) != 4:
            raise _Failure(f"input {x!r} has rank {len(xs)}; HzPreprocess is defined for rank-4 inputs")
        fmt = str(a.get("data_format", "NCHW")).upper()
        if fmt not in ("NCHW", "NHWC"):
            raise _Failure(f"data_format {fmt!r} is neither NCHW nor NHWC")
        c_attr = a.int("channel_group", None)
        wsize, bsize = self.shapes.size(w), (self.shapes.size(b) if b else None)
        c_vals = wsize if wsize and wsize > 1 else (bsize if bsize and bsize > 1 else None)
        c_known = c_attr or c_vals
        d1 = xs[1] if xs is not None else None
        d3 = xs[3] if xs is not None else None
        if c_known is not None and d1 is not None and d1 != c_known and d3 == c_known:
            wr = e.op("Reshape", [w, e.const("w_shape", np.asarray([1, 1, 1, -1], np.int64))])
            t = e.op("Mul", [x, wr], out=None if b else y)
            if b:
                br = e.op("Reshape", [b, e.const("b_shape", np.asarray([1, 1, 1, -1], np.int64))])
                e.op("Add", [t, br], out=y)
            return ("channels last (dim 3 of the input, not dim 1) -> Reshape + Mul/Add "
                    "(Horizon's own kernel refuses such an input)")
        c_x = d1
        if c_x is not None and c_attr is not None and c_x != c_attr:
            raise _Failure(f"channel_group {c_attr} but input {x!r} has {c_x} channels on axis 1")
        c = c_x or c_attr or c_vals
        if c is None:
            raise _Defer(f"number of channels of {x!r} unknown")
        for nm, size in ((w, wsize), (b, bsize)):
            if size is not None and size not in (1, c):
                raise _Failure(f"{nm!r} has {size} values for {c} channels")
        wr = e.op("Reshape", [w, e.const("w_shape", np.asarray([-1, 1, 1, 1], np.int64))])
        if wsize != c:
            self._need(8, "broadcasting a per-tensor HzPreprocess weight (Expand)")
            wr = e.op("Expand", [wr, e.const("w_expand", np.asarray([c, 1, 1, 1], np.int64))])
        ins = [x, wr]
        if b:
            br = b
            if self.shapes.shape(b) != (c,):
                br = e.op("Reshape", [b, e.const("b_shape", np.asarray([-1], np.int64))])
                if bsize != c:
                    self._need(8, "broadcasting a per-tensor HzPreprocess bias (Expand)")
                    br = e.op("Expand", [br, e.const("b_expand", np.asarray([c], np.int64))])
            ins.append(br)
        e.op("Conv", ins, out=y, kernel_shape=[1, 1], group=c)
        return (f"channel axis 1 (data_format {fmt} names the training layout) -> Reshape + 1x1 Conv (group {c})"
                if fmt == "NHWC" else f"NCHW -> Reshape + 1x1 Conv (group {c})")

    # ---- float ops ---------------------------------------------------------------------------------
    def _swish(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzSwish = x * Sigmoid(x) (docs/HORIZON.md section 3)."""
        self._ignore(n, a, set())
        x = n.input[0]
        e.op("Mul", [x, e.op("Sigmoid", [x])], out=n.output[0])
        return "-> Sigmoid + Mul"

    def _hardswish(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzHardSwish = x * HardSigmoid(x; alpha=1/6, beta=0.5), the ONNX HardSwish definition."""
        self._ignore(n, a, set())
        x = n.input[0]
        e.op("Mul", [x, e.op("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)], out=n.output[0])
        return "-> HardSigmoid + Mul"

    def _gelu(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzGelu(approximate) = ONNX Gelu-20; before opset 20 its function body (erf or tanh form)."""
        self._ignore(n, a, {"approximate"})
        x, y = n.input[0], n.output[0]
        approx = str(a.get("approximate", "none")).lower()
        if approx not in ("none", "tanh"):
            raise _Failure(f"approximate={approx!r} is neither 'none' nor 'tanh'")
        if self.opset >= 20:
            e.op("Gelu", [x], out=y, approximate=approx)
            return f"approximate={approx} -> Gelu"
        ft = self._float_type(x)
        if approx == "none":
            self._need(9, "the Gelu erf formula (Erf)")
            t = e.op("Erf", [e.op("Mul", [x, e.const("inv_sqrt2", np.asarray(1 / math.sqrt(2), ft))])])
        else:
            self._need(6, "the Gelu tanh formula (Tanh)")
            cube = e.op("Mul", [e.op("Mul", [x, x]), x])
            inner = e.op("Add", [x, e.op("Mul", [cube, e.const("c0044715", np.asarray(0.044715, ft))])])
            t = e.op("Tanh", [e.op("Mul", [inner, e.const("sqrt_2_over_pi", np.asarray(math.sqrt(2 / math.pi), ft))])])
        t = e.op("Add", [t, e.const("one", np.asarray(1.0, ft))])
        t = e.op("Mul", [x, t])
        e.op("Mul", [t, e.const("half", np.asarray(0.5, ft))], out=y)
        return f"approximate={approx} -> {'erf' if approx == 'none' else 'tanh'} formula"

    def _softmax(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzSoftmax(axis=-1) = Softmax-13 (default axis from the hbdk4 frontend)."""
        self._ignore(n, a, {"axis"})
        x, y = n.input[0], n.output[0]
        axis = a.int("axis", -1)
        if self.opset >= 13:
            e.op("Softmax", [x], out=y, axis=axis)
            return "-> Softmax"
        r = self.shapes.rank(x)
        if axis == -1 or (r is not None and axis == r - 1):
            e.op("Softmax", [x], out=y, axis=axis)
            return f"last axis -> Softmax-{11 if self.opset >= 11 else 1}"
        if r is None and axis >= 0:
            raise _Defer(f"rank of {x!r} unknown: cannot tell whether axis {axis} is the last one "
                         f"(Softmax before opset 13 flattens)")
        raise _Failure(f"axis {axis} is not the last axis and Softmax before opset 13 (model: {self.opset}) "
                       "flattens the input from that axis on")

    def _layernorm(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzLayerNorm(x, scale?, bias?; axis=-1, epsilon=1e-5) = LayerNormalization-17 over axes [axis, rank).

        Before opset 17 (or without scale) the formula ``(x - mean) / sqrt(var + eps) * scale + bias`` with
        ReduceMean over the same axes (axes attribute before opset 18, input from 18).
        """
        self._ignore(n, a, {"axis", "epsilon"})
        x, sc, bi, y = n.input[0], _inp(n, 1), _inp(n, 2), n.output[0]
        axis = a.int("axis", -1)
        eps = a.float("epsilon", 1e-5)
        if self.opset >= 17 and sc:
            e.op("LayerNormalization", [x, sc] + ([bi] if bi else []), out=y, axis=axis, epsilon=eps)
            return "-> LayerNormalization"
        if axis < 0:
            axes = list(range(axis, 0))
        else:
            r = self.shapes.rank(x)
            if r is None:
                raise _Defer(f"rank of {x!r} unknown, needed to list the normalized axes from axis {axis}")
            axes = list(range(axis, r))
        ft = self._float_type(x)

        def mean(t: str) -> str:
            if self.opset >= 18:
                return e.op("ReduceMean", [t, e.const("axes", np.asarray(axes, np.int64))], keepdims=1)
            return e.op("ReduceMean", [t], axes=axes, keepdims=1)

        d = e.op("Sub", [x, mean(x)])
        var = mean(e.op("Mul", [d, d]))
        std = e.op("Sqrt", [e.op("Add", [var, e.const("epsilon", np.asarray(eps, ft))])])
        last = not sc and not bi
        t = e.op("Div", [d, std], out=y if last else None)
        if sc:
            t = e.op("Mul", [t, sc], out=None if bi else y)
        if bi:
            e.op("Add", [t, bi], out=y)
        return f"-> ReduceMean formula (ReduceMean axes as {'input' if self.opset >= 18 else 'attribute'})"

    def _rsqrt(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzRsqrt(epsilon=0, is_sqrt_add_reciprocal=0): 1/sqrt(x + eps), or 1/(sqrt(x) + eps) when the flag is 1.

        Source: docs/HORIZON.md section 3 and the hbdk4 frontend (``HzRsqrt`` convertor: add/sqrt/reciprocal order).
        """
        self._ignore(n, a, {"epsilon", "is_sqrt_add_reciprocal"})
        x, y = n.input[0], n.output[0]
        eps = e.const("epsilon", np.asarray(a.float("epsilon", 0.0), self._float_type(x)))
        if a.int("is_sqrt_add_reciprocal", 0) == 0:
            e.op("Reciprocal", [e.op("Sqrt", [e.op("Add", [x, eps])])], out=y)
            return "-> Add + Sqrt + Reciprocal"
        e.op("Reciprocal", [e.op("Add", [e.op("Sqrt", [x]), eps])], out=y)
        return "is_sqrt_add_reciprocal=1 -> Sqrt + Add + Reciprocal"

    def _relux(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzReluX(clip_value) = Clip(x, 0, clip_value) (docs/HORIZON.md section 3; data_format is irrelevant)."""
        self._ignore(n, a, {"clip_value", "data_format"})
        x, y = n.input[0], n.output[0]
        if "clip_value" not in a:
            raise _Failure("no clip_value attribute")
        hi = a.float("clip_value", 0.0)
        if self.opset >= 11:
            ft = self._float_type(x)
            e.op("Clip", [x, e.const("min", np.asarray(0.0, ft)), e.const("max", np.asarray(hi, ft))], out=y)
        else:
            e.op("Clip", [x], out=y, min=0.0, max=hi)
        return "-> Clip"

    def _pad(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzPad(x, value?; pads, mode="constant", data_format="NCHW") = Pad.

        ``pads`` as in ONNX Pad (all begins, then all ends). With data_format NHWC the pads are in NHWC axis
        order for an NCHW tensor (hbdk4 frontend), so they are permuted to NCHW. The pad value is the second
        input (hbdk4 frontend), else the ``value`` attribute, else 0.
        """
        self._ignore(n, a, {"pads", "mode", "value", "data_format"})
        x, v, y = n.input[0], _inp(n, 1), n.output[0]
        if "pads" not in a:
            raise _Failure("no pads attribute")
        pads = a.ints("pads")
        fmt = str(a.get("data_format", "NCHW")).upper()
        if fmt == "NHWC":
            if len(pads) != 8:
                raise _Failure(f"data_format NHWC with {len(pads)} pads (8 expected)")
            pads = [pads[0], pads[3], pads[1], pads[2], pads[4], pads[7], pads[5], pads[6]]
        elif fmt != "NCHW":
            raise _Failure(f"data_format {fmt!r} is neither NCHW nor NHWC")
        mode = str(a.get("mode", "constant")).lower()
        if mode not in ("constant", "edge", "reflect"):
            raise _Failure(f"mode {mode!r} is not constant, edge or reflect")
        ft = self._float_type(x)
        value: float | str = a.float("value", 0.0)
        if v:
            known = self._const_value(v)
            if known is not None:
                if known.size != 1:
                    raise _Failure(f"pad value {v!r} has {known.size} elements")
                value = float(known.reshape(-1)[0])
            else:
                value = v
        if self.opset < 11:
            if isinstance(value, str):
                raise _Failure(f"pad value {v!r} is computed and Pad before opset 11 takes it as an attribute")
            e.op("Pad", [x], out=y, pads=pads, mode=mode, value=value)
            return f"mode={mode} -> Pad-2"
        ins = [x, e.const("pads", np.asarray(pads, np.int64))]
        if mode == "constant":
            if isinstance(value, str):
                ins.append(self._scalar(e, value, self.shapes.rank(value)))
            else:
                ins.append(e.const("value", np.asarray(value, ft)))
        e.op("Pad", ins, out=y, mode=mode)
        return f"mode={mode} -> Pad"

    def _space_to_depth(self, e: _Emitter, n: onnx.NodeProto, a: _Attrs) -> str:
        """HzSpaceToDepth(block_height, block_width) = SpaceToDepth(blocksize) when square.

        The hbdk4 frontend's reshape [N,C,H/bh,bh,W/bw,bw] + transpose [0,3,5,1,2,4] is ONNX SpaceToDepth's.
        """
        self._ignore(n, a, {"block_height", "block_width"})
        if "block_height" not in a or "block_width" not in a:
            raise _Failure("block_height or block_width missing")
        bh, bw = a.int("block_height", 0), a.int("block_width", 0)
        if bh != bw:
            raise _Failure(f"block {bh}x{bw} is not square; SpaceToDepth takes one blocksize")
        r = self.shapes.rank(n.input[0])
        if r is not None and r != 4:
            raise _Failure(f"input rank {r}; SpaceToDepth needs rank 4")
        e.op("SpaceToDepth", [n.input[0]], out=n.output[0], blocksize=bh)
        return "square block -> SpaceToDepth"

