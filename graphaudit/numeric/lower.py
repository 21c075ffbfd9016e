"""Lower Horizon ``horizon``-domain ops to standard ONNX so that stock onnxruntime can run a stage model."""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from ..errors import LoweringError, ModelLoadError

__all__ = ["LoweringResult", "lower_model", "lower_file", "needs_lowering", "HZ_DOMAIN", "NAME_PREFIX",
           "LOWERABLE_OPS"]

#: The ONNX domain of Horizon's custom ops (HORIZON.md section 1: logs print ``horizon v1``).
HZ_DOMAIN = "horizon"

#: Prefix of every tensor, initializer and helper node name that lowering creates.
NAME_PREFIX = "ga_lower/"

#: Horizon op types with a lowering (HORIZON.md section 3); every other ``horizon`` op raises LoweringError.
LOWERABLE_OPS = frozenset({"HzCalibration", "HzQuantize", "HzDequantize", "HzPreprocess", "HzSwish", "HzHardSwish",
                           "HzGelu", "HzSoftmax", "HzLayerNorm", "HzRsqrt", "HzReluX", "HzPad", "HzSpaceToDepth"})

#: Passes of lowering + shape inference before nodes still waiting for a rank are reported as failures.
_MAX_PASSES = 16

#: Horizon fixed-point ops (HORIZON.md section 3: no public bit-exact spec).
_FIXED_POINT = re.compile(r"^Hz(S[A-Z]|Quantized|Lut|Requantize)")

#: Domains that stock onnxruntime implements.
_STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")

_FLOAT_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64}

#: (signed, bits) of the integer element types QuantizeLinear/DequantizeLinear handle.
_INT_TYPES = {TensorProto.INT8: (True, 8), TensorProto.UINT8: (False, 8), TensorProto.INT16: (True, 16),
              TensorProto.UINT16: (False, 16), TensorProto.INT32: (True, 32)}


@dataclass
class LoweringResult:
    """What :func:`lower_model` produced.

    Attributes
    ----------
    model : onnx.ModelProto
        The lowered model: a new object, same opset versions, no ``horizon`` node left.
    lowered : dict of str to int
        Horizon op_type -> number of nodes lowered.
    notes : list of str
        One line per lowering strategy used (``"HzCalibration x45: int8 per-tensor -> QuantizeLinear+DequantizeLinear"``),
        per ignored attribute, and per other remark (opset import removed, other custom domains left).
    """

    model: onnx.ModelProto
    lowered: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class _Failure(Exception):
    """This node cannot be lowered (final)."""


class _Defer(Exception):
    """This node needs shape information not known yet; retry after the nodes before it are lowered."""


def _text(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [_text(x) for x in v]
    return v


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """Attribute name -> Python value (strings decoded)."""
    return {a.name: _text(helper.get_attribute_value(a)) for a in node.attribute}


def _floats(v: Any) -> list[float]:
    if v is None:
        return []
    return [float(x) for x in v] if isinstance(v, (list, tuple)) else [float(v)]


def _ints(v: Any) -> list[int]:
    if v is None:
        return []
    return [int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v)]


def _inp(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def _ai_onnx_opset(model: onnx.ModelProto) -> int | None:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return None


def _subgraphs(node: onnx.NodeProto):
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def _walk_nodes(graph: onnx.GraphProto):
    for n in graph.node:
        yield n
        for g in _subgraphs(n):
            yield from _walk_nodes(g)


def _local_functions(model: onnx.ModelProto) -> set[tuple[str, str]]:
    return {(f.domain, f.name) for f in model.functions}


def needs_lowering(model: onnx.ModelProto) -> bool:
    """True when the model (subgraphs included) holds a node of the ``horizon`` domain.

    Calls of a model-local function that happens to live in the ``horizon`` domain do not count:
    onnxruntime inlines those.

    Parameters
    ----------
    model : onnx.ModelProto

    Returns
    -------
    bool
    """
    local = _local_functions(model)
    return any(n.domain == HZ_DOMAIN and (n.domain, n.op_type) not in local for n in _walk_nodes(model.graph))


class _Shapes:
    """Element type and shape of every tensor whose type onnx shape inference (or the model) knows."""

    def __init__(self, model: onnx.ModelProto):
        self.info: dict[str, tuple[int, tuple | None]] = {}
        self.conflicts: set[str] = set()
        try:
            inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
        except Exception:  # noqa: BLE001 - inference is best effort (>2 GB models, odd graphs)
            inferred = model
        self._graph(inferred.graph)

    def _put(self, name: str, elem_type: int, shape: tuple | None) -> None:
        if not name or name in self.conflicts:
            return
        old = self.info.get(name)
        if old is None:
            self.info[name] = (elem_type, shape)
            return
        type_clash = bool(old[0] and elem_type and old[0] != elem_type)
        rank_clash = old[1] is not None and shape is not None and len(old[1]) != len(shape)
        if type_clash or rank_clash:  # sibling subgraphs reusing a name: trust neither
            del self.info[name]
            self.conflicts.add(name)
            return
        self.info[name] = (old[0] or elem_type, old[1] if shape is None else shape)

    def _graph(self, g: onnx.GraphProto) -> None:
        for init in g.initializer:
            self._put(init.name, init.data_type, tuple(int(d) for d in init.dims))
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if not vi.type.HasField("tensor_type"):
                continue
            tt = vi.type.tensor_type
            shape = None
            if tt.HasField("shape"):
                shape = tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in tt.shape.dim)
            self._put(vi.name, tt.elem_type, shape)
        for n in g.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output:
                for a in n.attribute:
                    if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                        self._put(n.output[0], a.t.data_type, tuple(int(d) for d in a.t.dims))
            for sg in _subgraphs(n):
                self._graph(sg)

    def dtype(self, name: str) -> int:
        """ONNX element type, 0 when unknown."""
        return self.info.get(name, (0, None))[0]

    def shape(self, name: str) -> tuple | None:
        """Dims (int, or None for an unknown dim), None when the rank is unknown."""
        return self.info.get(name, (0, None))[1]

    def rank(self, name: str) -> int | None:
        s = self.shape(name)
        return None if s is None else len(s)

    def size(self, name: str) -> int | None:
        s = self.shape(name)
        if s is None or any(d is None for d in s):
            return None
        return int(np.prod(s, dtype=np.int64))


class _Emitter:
    """Collects the standard nodes and constants replacing one Horizon node."""

    def __init__(self, low: "_Lowerer", node: onnx.NodeProto):
        self.low = low
        self.node = node
        self.label = node.name or next((o for o in node.output if o), "") or node.op_type
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def fresh(self, suffix: str) -> str:
        return self.low.fresh(f"{NAME_PREFIX}{self.label}/{suffix}")

    def const(self, suffix: str, value: np.ndarray) -> str:
        """A constant as an initializer (IR >= 4) or a Constant node (older IR: initializers must be inputs)."""
        name = self.fresh(suffix)
        t = numpy_helper.from_array(np.asarray(value), name)
        if self.low.use_initializers:
            self.inits.append(t)
        else:
            self.nodes.append(helper.make_node("Constant", [], [name], name=name, value=t))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        """Append a standard node; ``out`` given = the Horizon node's output (the node keeps the Horizon name)."""
        if out is None:
            out = self.fresh(op_type)
            name = out
        else:
            name = self.node.name
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out


class _Lowerer:
    def __init__(self, model: onnx.ModelProto, name: str):
        self.m = model
        self.name = name
        self.opset = _ai_onnx_opset(model) or 0
        self.use_initializers = model.ir_version >= 4
        self.local = _local_functions(model)
        self.taken: set[str] = set()
        self._collect_names(model.graph)
        self.lowered: Counter = Counter()
        self.strategies: Counter = Counter()
        self.ignored_attrs: Counter = Counter()
        self.failures: dict[tuple, tuple[str, str, str, bool]] = {}
        self.deferred: dict[tuple, tuple[str, str, str, bool]] = {}
        self.shapes: _Shapes | None = None
        self.graph_stack: list[onnx.GraphProto] = []
        self.handlers: dict[str, Callable[[_Emitter, onnx.NodeProto, dict], str]] = {
            "HzCalibration": self._calibration,
            "HzQuantize": self._quantize,
            "HzDequantize": self._dequantize,
            "HzPreprocess": self._preprocess,
            "HzSwish": self._swish,
            "HzHardSwish": self._hardswish,
            "HzGelu": self._gelu,
            "HzSoftmax": self._softmax,
            "HzLayerNorm": self._layernorm,
            "HzRsqrt": self._rsqrt,
            "HzReluX": self._relux,
            "HzPad": self._pad,
            "HzSpaceToDepth": self._space_to_depth,
        }
        assert set(self.handlers) == LOWERABLE_OPS

    # ---- names -------------------------------------------------------------------------------------
    def _collect_names(self, g: onnx.GraphProto) -> None:
        t = self.taken
        t.update(i.name for i in g.initializer)
        t.update(v.name for v in list(g.input) + list(g.output) + list(g.value_info))
        for n in g.node:
            t.add(n.name)
            t.update(n.input)
            t.update(n.output)
            for sg in _subgraphs(n):
                self._collect_names(sg)

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name = f"{base}_{k}"
            k += 1
        self.taken.add(name)
        return name

    # ---- driver ------------------------------------------------------------------------------------
    def run(self) -> None:
        for _ in range(_MAX_PASSES):
            self.shapes = _Shapes(self.m)
            self.deferred = {}
            progress = self._graph(self.m.graph, "")
            if not self.deferred or not progress:
                break

    def _graph(self, g: onnx.GraphProto, path: str) -> int:
        """Lower the Horizon nodes of one (sub)graph in place; returns how many were lowered.

        ``path`` names the graph (parent node output and attribute) so that failure keys stay stable
        across passes (nodes are copied when the node list is rebuilt).
        """
        self.graph_stack.append(g)
        count = 0
        new: list[onnx.NodeProto] = []
        for i, n in enumerate(g.node):
            here = n.output[0] if n.output and n.output[0] else f"#{i}"
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    count += self._graph(a.g, f"{path}/{here}:{a.name}")
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for j, sg in enumerate(a.graphs):
                        count += self._graph(sg, f"{path}/{here}:{a.name}[{j}]")
            if n.domain != HZ_DOMAIN or (n.domain, n.op_type) in self.local:
                new.append(n)
                continue
            key = (path, n.op_type, n.name, tuple(n.output))
            if key in self.failures:
                new.append(n)
                continue
            e = _Emitter(self, n)
            try:
                strategy = self._lower_one(e, n)
            except _Failure as f:
                generic = bool(getattr(f, "generic", False))
                self.failures[key] = (n.op_type, e.label, str(f), generic)
                new.append(n)
                continue
            except _Defer as d:
                self.deferred[key] = (n.op_type, e.label, str(d), False)
                new.append(n)
                continue
            new.extend(e.nodes)
            g.initializer.extend(e.inits)
            self.lowered[n.op_type] += 1
            self.strategies[(n.op_type, strategy)] += 1
            count += 1
        del g.node[:]
        g.node.extend(new)
        self.graph_stack.pop()
        return count

    def _lower_one(self, e: _Emitter, n: onnx.NodeProto) -> str:
        handler = self.handlers.get(n.op_type)
        if handler is None:
            if _FIXED_POINT.match(n.op_type):
                f = _Failure("fixed-point op without a public bit-exact spec")
            else:
                f = _Failure("no documented float semantics (not in HORIZON.md section 3)")
            f.generic = True  # type: ignore[attr-defined]
            raise f
        if not _inp(n, 0):
            raise _Failure("first input is missing")
        if not n.output or not n.output[0]:
            raise _Failure("first output is missing")
        if any(o for o in n.output[1:]):
            raise _Failure(f"{len(n.output)} outputs; the lowering knows only one")
        if self.opset < 7:
            raise _Failure(f"ai.onnx opset {self.opset} < 7 (no broadcasting)")
        return handler(e, n, _attrs(n))

    def _ignore(self, n: onnx.NodeProto, a: dict, known: set[str]) -> None:
        for k in a:
            if k not in known:
                self.ignored_attrs[(n.op_type, k)] += 1

    def _need(self, version: int, what: str) -> None:
        if self.opset < version:
            raise _Failure(f"{what} needs ai.onnx opset >= {version}, the model has {self.opset}")

    def _float_type(self, name: str) -> type:
        """numpy float type of a tensor (float32 when unknown; HORIZON.md: the stage models compute in float32)."""
        dt = self.shapes.dtype(name)
        if not dt:
            return np.float32
        if dt not in _FLOAT_TYPES:
            raise _Failure(f"input {name!r} has element type {TensorProto.DataType.Name(dt)}, not a float type")
        return _FLOAT_TYPES[dt]

    def _const_value(self, name: str) -> np.ndarray | None:
        """Value of an initializer or Constant output visible from the current graph, None if computed."""
        for g in reversed(self.graph_stack):
            for init in g.initializer:
                if init.name == name:
                    return numpy_helper.to_array(init)
            for n in g.node:
                if n.op_type == "Constant" and n.output and n.output[0] == name:
                    for a in n.attribute:
                        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                            return numpy_helper.to_array(a.t)
        return None

    def _channel_shape(self, x: str, axis: int, c: int) -> tuple[int, ...]:
        """Shape [C, 1, ..., 1] that broadcasts per-channel values along ``axis`` of ``x``."""
        if axis < 0:
            return (c,) + (1,) * (-axis - 1)
        r = self.shapes.rank(x)
        if r is None:
            raise _Defer(f"rank of {x!r} unknown, needed to broadcast per-channel values along axis {axis}")
        if axis >= r:
            raise _Failure(f"axis {axis} is out of range for rank {r}")
        return (c,) + (1,) * (r - 1 - axis)

    # ---- quantization ------------------------------------------------------------------------------
    def _calibration(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzCalibration: fake quantization ``y = (clip(round(x/s) + zp, qmin, qmax) - zp) * s``.

        Source: HORIZON.md section 3 (the hbdk4 frontend's reading of HMCT's HzCalibration).
        """
        self._ignore(n, a, {"thresholds", "scales", "zero_point", "qtype", "axis", "group", "constant", "switch",
                            "quant_attrs", "bits", "info_strings", "cali_attrs", "max_num_bins", "num_bins",
                            "percentiles"})
        x, y = n.input[0], n.output[0]
        if str(a.get("switch", "ON")).upper() == "OFF":
            e.op("Identity", [x], out=y)
            return "switch OFF -> Identity"
        qtype = a.get("qtype")
        if qtype is None:
            bits = a.get("bits")
            qtype = f"int{int(bits)}" if bits is not None else "int8"
        qtype = str(qtype).lower()
        ft = self._float_type(x)
        if qtype == "float32":
            e.op("Identity", [x], out=y)
            return "float32 -> Identity"
        if qtype == "float16":
            h = e.op("Cast", [x], to=TensorProto.FLOAT16)
            e.op("Cast", [h], out=y, to=helper.np_dtype_to_tensor_dtype(np.dtype(ft)))
            return "float16 -> Cast to float16 and back"
        m = re.fullmatch(r"(u?)int(\d+)", qtype)
        if not m or not 2 <= int(m[2]) <= 32:
            raise _Failure(f"qtype {qtype!r} has no documented fake-quant semantics")
        signed, bits = not m[1], int(m[2])
        qmin, qmax = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)
        zps = _ints(a.get("zero_point"))
        scales = _floats(a.get("scales"))
        if not scales:
            thresholds = _floats(a.get("thresholds"))
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
        axis = int(a.get("axis", 1)) if c > 1 else None
        if axis is not None:
            xs = self.shapes.shape(x)
            if xs is not None:
                if not -len(xs) <= axis < len(xs):
                    raise _Failure(f"axis {axis} out of range for rank {len(xs)}")
                d = xs[axis]
                if d is not None and d != c:
                    raise _Failure(f"{c} scales but dim {axis} of {x!r} is {d}")
        kind = f"{qtype} {'per-channel' if axis is not None else 'per-tensor'}"
        return kind + self._fake_quant(e, x, y, s, zp, qmin, qmax, (signed, bits), axis, ft)

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
        t = e.op("Round", [e.op("Div", [x, s_c])])
        z_c = None
        if np.any(zp != 0):
            z_c = e.const("zero_point", zp.astype(ft).reshape(shape))
            t = e.op("Add", [t, z_c])
        t = e.op("Clip", [t, e.const("qmin", np.asarray(qmin, ft)), e.const("qmax", np.asarray(qmax, ft))])
        if z_c is not None:
            t = e.op("Sub", [t, z_c])
        e.op("Mul", [t, s_c], out=y)
        return " -> Div/Round/Add/Clip/Sub/Mul formula" if z_c is not None else " -> Div/Round/Clip/Mul formula"

    def _scale_layout(self, n: onnx.NodeProto, s: str) -> tuple[bool, int]:
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

    def _quantize(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzQuantize(data, scale, zero_point?; bits=8, axis) = QuantizeLinear (HORIZON.md section 3).

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
            signed, bits = True, int(a.get("bits", 8))
            if bits not in (8, 16):
                raise _Failure(f"bits={bits} without a zero_point input: no output type")
            zt = TensorProto.INT8 if bits == 8 else TensorProto.INT16
        per_axis, c = self._scale_layout(n, s)
        axis = int(a.get("axis", 1))
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
        if per_axis:
            s_b = self._broadcast_param(e, x, s, axis, c, None)
            z_b = self._broadcast_param(e, x, z, axis, c, ft) if z else None
        else:
            s_b = s
            z_b = e.op("Cast", [z], to=helper.np_dtype_to_tensor_dtype(np.dtype(ft))) if z else None
        t = e.op("Round", [e.op("Div", [x, s_b])])
        if z_b is not None:
            t = e.op("Add", [t, z_b])
        t = e.op("Clip", [t, e.const("qmin", np.asarray(qmin, ft)), e.const("qmax", np.asarray(qmax, ft))])
        e.op("Cast", [t], out=y, to=zt)
        return f"{'int' if signed else 'uint'}{bits} -> Div/Round/Add/Clip/Cast formula"

    def _dequantize(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzDequantize(data, scale, zero_point?; axis) = DequantizeLinear (HORIZON.md section 3)."""
        self._ignore(n, a, {"axis", "bits"})
        x, s, z, y = n.input[0], _inp(n, 1), _inp(n, 2), n.output[0]
        if not s:
            raise _Failure("no scale input")
        per_axis, c = self._scale_layout(n, s)
        axis = int(a.get("axis", 1))
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
        if per_axis:
            s_b = self._broadcast_param(e, x, s, axis, c, None)
            z_b = self._broadcast_param(e, x, z, axis, c, ft) if z else None
        else:
            s_b = s
            z_b = e.op("Cast", [z], to=helper.np_dtype_to_tensor_dtype(np.dtype(ft))) if z else None
        if z_b is not None:
            t = e.op("Sub", [t, z_b])
        e.op("Mul", [t, s_b], out=y)
        return f"{'per-axis' if per_axis else 'per-tensor'} -> Cast/Sub/Mul formula"

    # ---- preprocessing -----------------------------------------------------------------------------
    def _preprocess(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzPreprocess(x, w, b?) = 1x1 convolution with group C: ``y[c] = w[c] * x[c] + b[c]``.

        Source: HORIZON.md section 3 and the hbdk4 frontend (conv2d with group = channel_group).
        """
        self._ignore(n, a, {"channel_group", "data_format", "input_type"})
        x, w, b, y = n.input[0], _inp(n, 1), _inp(n, 2), n.output[0]
        if not w:
            raise _Failure("no weight input")
        xs = self.shapes.shape(x)
        if xs is not None and len(xs) != 4:
            raise _Failure(f"input {x!r} has rank {len(xs)}; HzPreprocess is defined for rank-4 inputs")
        fmt = str(a.get("data_format", "NCHW")).upper()
        if fmt == "NHWC":
            wr = e.op("Reshape", [w, e.const("w_shape", np.asarray([1, 1, 1, -1], np.int64))])
            t = e.op("Mul", [x, wr], out=None if b else y)
            if b:
                br = e.op("Reshape", [b, e.const("b_shape", np.asarray([1, 1, 1, -1], np.int64))])
                e.op("Add", [t, br], out=y)
            return "NHWC -> Reshape + Mul/Add"
        if fmt != "NCHW":
            raise _Failure(f"data_format {fmt!r} is neither NCHW nor NHWC")
        c_x = xs[1] if xs is not None else None
        c_attr = int(a["channel_group"]) if "channel_group" in a else None
        if c_x is not None and c_attr is not None and c_x != c_attr:
            raise _Failure(f"channel_group {c_attr} but input {x!r} has {c_x} channels")
        wsize, bsize = self.shapes.size(w), (self.shapes.size(b) if b else None)
        c = c_x or c_attr or (wsize if wsize and wsize > 1 else None)
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
        return f"NCHW -> Reshape + 1x1 Conv (group {c})"

    # ---- float ops ---------------------------------------------------------------------------------
    def _swish(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzSwish = x * Sigmoid(x) (HORIZON.md section 3)."""
        self._ignore(n, a, set())
        x = n.input[0]
        e.op("Mul", [x, e.op("Sigmoid", [x])], out=n.output[0])
        return "-> Sigmoid + Mul"

    def _hardswish(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzHardSwish = x * HardSigmoid(x; alpha=1/6, beta=0.5), the ONNX HardSwish definition."""
        self._ignore(n, a, set())
        x = n.input[0]
        e.op("Mul", [x, e.op("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)], out=n.output[0])
        return "-> HardSigmoid + Mul"

    def _gelu(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
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

    def _softmax(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzSoftmax(axis=-1) = Softmax-13 (default axis from the hbdk4 frontend)."""
        self._ignore(n, a, {"axis"})
        x, y = n.input[0], n.output[0]
        axis = int(a.get("axis", -1))
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

    def _layernorm(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzLayerNorm(x, scale?, bias?; axis=-1, epsilon=1e-5) = LayerNormalization-17 over axes [axis, rank).

        Before opset 17 (or without scale) the formula ``(x - mean) / sqrt(var + eps) * scale + bias`` with
        ReduceMean over the same axes (axes attribute before opset 18, input from 18).
        """
        self._ignore(n, a, {"axis", "epsilon"})
        x, sc, bi, y = n.input[0], _inp(n, 1), _inp(n, 2), n.output[0]
        axis = int(a.get("axis", -1))
        eps = float(a.get("epsilon", 1e-5))
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

    def _rsqrt(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzRsqrt(epsilon=0, is_sqrt_add_reciprocal=0): 1/sqrt(x + eps), or 1/(sqrt(x) + eps) when the flag is 1.

        Source: HORIZON.md section 3 and the hbdk4 frontend (``HzRsqrt`` convertor: add/sqrt/reciprocal order).
        """
        self._ignore(n, a, {"epsilon", "is_sqrt_add_reciprocal"})
        x, y = n.input[0], n.output[0]
        eps = e.const("epsilon", np.asarray(float(a.get("epsilon", 0.0)), self._float_type(x)))
        if int(a.get("is_sqrt_add_reciprocal", 0)) == 0:
            e.op("Reciprocal", [e.op("Sqrt", [e.op("Add", [x, eps])])], out=y)
            return "-> Add + Sqrt + Reciprocal"
        e.op("Reciprocal", [e.op("Add", [e.op("Sqrt", [x]), eps])], out=y)
        return "is_sqrt_add_reciprocal=1 -> Sqrt + Add + Reciprocal"

    def _relux(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzReluX(clip_value) = Clip(x, 0, clip_value) (HORIZON.md section 3; data_format is irrelevant)."""
        self._ignore(n, a, {"clip_value", "data_format"})
        x, y = n.input[0], n.output[0]
        if "clip_value" not in a:
            raise _Failure("no clip_value attribute")
        hi = float(a["clip_value"])
        if self.opset >= 11:
            ft = self._float_type(x)
            e.op("Clip", [x, e.const("min", np.asarray(0.0, ft)), e.const("max", np.asarray(hi, ft))], out=y)
        else:
            e.op("Clip", [x], out=y, min=0.0, max=hi)
        return "-> Clip"

    def _pad(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzPad(x, value?; pads, mode="constant", data_format="NCHW") = Pad.

        ``pads`` as in ONNX Pad (all begins, then all ends). With data_format NHWC the pads are in NHWC axis
        order for an NCHW tensor (hbdk4 frontend), so they are permuted to NCHW. The pad value is the second
        input (hbdk4 frontend), else the ``value`` attribute, else 0.
        """
        self._ignore(n, a, {"pads", "mode", "value", "data_format"})
        x, v, y = n.input[0], _inp(n, 1), n.output[0]
        if "pads" not in a:
            raise _Failure("no pads attribute")
        pads = _ints(a["pads"])
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
        value: float | str = float(a.get("value", 0.0))
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

    def _space_to_depth(self, e: _Emitter, n: onnx.NodeProto, a: dict) -> str:
        """HzSpaceToDepth(block_height, block_width) = SpaceToDepth(blocksize) when square.

        The hbdk4 frontend's reshape [N,C,H/bh,bh,W/bw,bw] + transpose [0,3,5,1,2,4] is ONNX SpaceToDepth's.
        """
        self._ignore(n, a, {"block_height", "block_width"})
        if "block_height" not in a or "block_width" not in a:
            raise _Failure("block_height or block_width missing")
        bh, bw = int(a["block_height"]), int(a["block_width"])
        if bh != bw:
            raise _Failure(f"block {bh}x{bw} is not square; SpaceToDepth takes one blocksize")
        r = self.shapes.rank(n.input[0])
        if r is not None and r != 4:
            raise _Failure(f"input rank {r}; SpaceToDepth needs rank 4")
        e.op("SpaceToDepth", [n.input[0]], out=n.output[0], blocksize=bh)
        return "square block -> SpaceToDepth"

    # ---- report ------------------------------------------------------------------------------------
    def error(self) -> LoweringError | None:
        problems = list(self.failures.values()) + [
            (op, label, reason, False) for op, label, reason, _g in self.deferred.values()]
        if not problems:
            return None
        groups: dict[tuple[str, str], list[str]] = {}
        generic: dict[tuple[str, str], bool] = {}
        for op, label, reason, gen in problems:
            groups.setdefault((op, reason), []).append(label)
            generic[(op, reason)] = gen
        parts, failures = [], []
        for (op, reason), labels in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
            where = ""
            if not generic[(op, reason)]:
                shown = ", ".join(repr(x) for x in labels[:3])
                where = f" ({shown}{', ...' if len(labels) > 3 else ''})"
            parts.append(f"{op} x{len(labels)}{where}: {reason}")
            failures.append({"op_type": op, "count": len(labels), "reason": reason, "nodes": labels})
        n_ops = len({op for op, _ in groups})
        return LoweringError(f"{self.name}: cannot lower {n_ops} Horizon op type(s) to standard ONNX: "
                             + "; ".join(parts), failures)

    def notes(self) -> list[str]:
        out = [f"{op} x{k} {strategy}" if strategy.startswith("->") else f"{op} x{k}: {strategy}"
               for (op, strategy), k in sorted(self.strategies.items())]
        for (op, attr), k in sorted(self.ignored_attrs.items()):
            out.append(f"{op}: attribute {attr!r} ignored on {k} node(s) (no documented effect on the output)")
        return out


def lower_model(model: onnx.ModelProto, name: str = "") -> LoweringResult:
    """Lower every ``horizon``-domain node (subgraphs included) to standard ONNX ops.

    Tensor names keep their meaning: the standard node computing a Horizon node's output writes the same
    tensor name (and keeps the Horizon node's name); intermediate tensors, constants and helper nodes get
    fresh names starting with ``ga_lower/``. The ai.onnx opset version is not changed; the ``horizon``
    opset import is removed once no ``horizon`` node is left. Semantics (HORIZON.md section 3, hbdk4 frontend
    for defaults; ONNX operator specs for the targets):

    - ``HzCalibration(x)``: ``y = (clip(round(x/s) + zp, qmin, qmax) - zp) * s`` with ``s`` = ``scales``
      (else ``thresholds / qmax``, symmetric signed types only), ``zp`` = ``zero_point`` (default 0),
      qmin/qmax of ``qtype`` (intN ``[-2^(N-1), 2^(N-1)-1]``, uintN ``[0, 2^N-1]``; legacy ``bits`` N = intN),
      per-channel along ``axis`` (default 1) when there are several scales. QuantizeLinear+DequantizeLinear
      when the opset has the type (int8/uint8: 10 per-tensor, 13 per-axis; int16/uint16: 21), else Div, Round
      (half to even, as QuantizeLinear), Add, Clip, Sub, Mul. ``switch="OFF"`` and qtype float32: Identity;
      float16: Cast to float16 and back.
    - ``HzQuantize``/``HzDequantize``: QuantizeLinear/DequantizeLinear, or the same formula.
    - ``HzPreprocess(x, w, b?)``: NCHW: Reshape(w, [C,1,1,1]) + 1x1 Conv, group C, bias b; NHWC: Mul/Add
      with w, b reshaped to [1,1,1,C].
    - ``HzSwish``: Sigmoid + Mul; ``HzHardSwish``: HardSigmoid(alpha=1/6, beta=0.5) + Mul; ``HzGelu``: Gelu
      (opset >= 20) or its erf/tanh formula; ``HzSoftmax(axis=-1)``: Softmax; ``HzLayerNorm``:
      LayerNormalization (opset >= 17) or the ReduceMean formula; ``HzRsqrt``: Reciprocal(Sqrt(x + eps))
      (``is_sqrt_add_reciprocal=1``: Reciprocal(Sqrt(x) + eps)); ``HzReluX``: Clip(x, 0, clip_value);
      ``HzPad``: Pad; ``HzSpaceToDepth``: SpaceToDepth when the block is square.

    Parameters
    ----------
    model : onnx.ModelProto
        The stage model; not modified. Tensors are assumed float32 where their type is unknown.
    name : str, optional
        File name (or label) used in error messages.

    Returns
    -------
    LoweringResult
        The lowered copy, the count per lowered op type and notes.

    Raises
    ------
    LoweringError
        When any ``horizon`` node cannot be lowered; the message names every such op type with its count
        and the reason (fixed-point ops such as HzSQuantizedConv, unknown ops, unsupported attributes or
        opsets). Nothing is skipped silently.
    """
    label = name or model.graph.name or "model"
    m = onnx.ModelProto()
    m.CopyFrom(model)
    if not needs_lowering(m):
        return LoweringResult(model=m, lowered={}, notes=["no horizon node: nothing to lower"])
    if _ai_onnx_opset(m) is None:
        raise LoweringError(f"{label}: no ai.onnx opset import; the standard ops of the lowering need one")
    for f in m.functions:
        if any(n.domain == HZ_DOMAIN for n in f.node):
            raise LoweringError(f"{label}: model-local function {f.domain}::{f.name} holds horizon nodes; "
                                "lowering inside functions is not supported")
    low = _Lowerer(m, label)
    low.run()
    err = low.error()
    if err is not None:
        raise err
    notes = low.notes()
    if not needs_lowering(m) and not any(d == HZ_DOMAIN for d, _ in low.local):
        kept = [o for o in m.opset_import if o.domain != HZ_DOMAIN]
        if len(kept) != len(m.opset_import):
            del m.opset_import[:]
            m.opset_import.extend(kept)
            notes.append(f"opset import '{HZ_DOMAIN}' removed (no horizon node left); ai.onnx opset {low.opset} kept")
    others = Counter(f"{n.domain}::{n.op_type}" for n in _walk_nodes(m.graph)
                     if n.domain not in _STANDARD_DOMAINS and n.domain != HZ_DOMAIN)
    for op, k in sorted(others.items()):
        notes.append(f"{op} x{k}: not a Horizon op, left as is")
    return LoweringResult(model=m, lowered=dict(sorted(low.lowered.items())), notes=notes)


def _external_files(model: onnx.ModelProto, base: Path) -> set[Path]:
    out = set()
    for init in model.graph.initializer:
        if init.data_location == TensorProto.EXTERNAL:
            for kv in init.external_data:
                if kv.key == "location":
                    out.add((base / kv.value).resolve())
    return out


def lower_file(path: str | os.PathLike, out_path: str | os.PathLike) -> LoweringResult:
    """Load an ONNX file (with external data), lower it, check it and write it atomically.

    Parameters
    ----------
    path : path-like
        The stage model.
    out_path : path-like
        Where to write the lowered model (temporary file in the same directory, then ``os.replace``).
        Must not be the input file or one of its external data files.

    Returns
    -------
    LoweringResult
        As :func:`lower_model`.

    Raises
    ------
    ModelLoadError
        The input is missing, not a file, not ONNX, truncated, or its external data cannot be read.
    LoweringError
        Some node cannot be lowered; out_path is the input (or its external data) or is in a missing
        directory; the lowered model fails ``onnx.checker.check_model`` or is too large (> 2 GB) to write
        as one file.
    """
    p, out = Path(path), Path(out_path)
    if not p.exists():
        raise ModelLoadError(f"{p}: no such file")
    if not p.is_file():
        raise ModelLoadError(f"{p}: not a file")
    try:
        skeleton = onnx.load(p, load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        raise ModelLoadError(f"{p}: not an ONNX model or truncated ({e})") from e
    except OSError as e:
        raise ModelLoadError(f"{p}: cannot read ({e.strerror})") from e
    if skeleton.ir_version <= 0 or not skeleton.HasField("graph"):
        raise ModelLoadError(f"{p}: not an ONNX model (no IR version or no graph)")
    forbidden = {p.resolve()} | _external_files(skeleton, p.parent)
    if out.resolve() in forbidden or (out.exists() and any(f.exists() and os.path.samefile(out, f)
                                                           for f in forbidden)):
        raise LoweringError(f"{out}: refusing to write the lowered model over the input {p} or its data")
    if out.exists() and not out.is_file():
        raise LoweringError(f"{out}: exists and is not a file")
    if not out.parent.is_dir():
        raise LoweringError(f"{out}: directory {out.parent} does not exist")
    try:
        external_data_helper.load_external_data_for_model(skeleton, str(p.parent))
    except Exception as e:  # noqa: BLE001 - onnx raises several types for bad external data
        raise ModelLoadError(f"{p}: cannot read external data ({e})") from e
    result = lower_model(skeleton, name=str(p))
    if result.model.ByteSize() >= 2 ** 31 - 1:
        raise LoweringError(f"{p}: the lowered model is larger than 2 GB; writing external data is not supported")
    try:
        onnx.checker.check_model(result.model)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise LoweringError(f"{p}: the lowered model fails onnx.checker: {first}") from e
    data = result.model.SerializeToString()
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return result
