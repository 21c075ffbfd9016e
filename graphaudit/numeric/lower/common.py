"""Shared pieces of the lowering: constants, result type, shape tracking, node emission."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...toolchains.ops import HORIZON_DOMAIN

__all__ = ["LoweringResult", "needs_lowering", "NAME_PREFIX", "LOWERABLE_OPS"]

#: Prefix of every tensor, initializer and helper node name that lowering creates.
NAME_PREFIX = "ga_lower/"

#: Horizon op types with a lowering (docs/HORIZON.md section 3); every other ``horizon`` op raises LoweringError.
LOWERABLE_OPS = frozenset({"HzCalibration", "HzQuantize", "HzDequantize", "HzPreprocess", "HzSwish", "HzHardSwish",
                           "HzGelu", "HzSoftmax", "HzLayerNorm", "HzRsqrt", "HzReluX", "HzPad", "HzSpaceToDepth"})

#: Passes of lowering + shape inference before nodes still waiting for a rank are reported as failures.
_MAX_PASSES = 16

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
    verified : dict
        What :func:`graphaudit.numeric.lower.verify.verify_lowered` proved before the file was written (empty
        from :func:`lower_model` alone).
    """

    model: onnx.ModelProto
    lowered: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    verified: dict = field(default_factory=dict)  # what verify_lowered proved (lower_file fills it)


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


class _Attrs(dict):
    """Attribute name -> Python value of one node (strings decoded), with typed readers.

    Every numeric attribute the lowering reads goes through :meth:`ints`, :meth:`floats`, :meth:`int` or
    :meth:`float`: a value of another type (a string, a tensor, a graph), a non-integral or non-finite value
    where integers are expected, an integer outside int64, or a list where one value is expected raises
    :class:`_Failure` naming the attribute (the driver adds the node), so a malformed attribute becomes a
    LoweringError and never a ValueError/TypeError/OverflowError.
    """

    def _bad(self, name: str, expected: str) -> _Failure:
        v = self[name]
        if isinstance(v, (str, int, float, list, tuple)):
            shown = repr(v)
            shown = f"{shown[:57]}..." if len(shown) > 60 else shown
        else:  # a tensor, graph, type proto: its repr is many lines
            shown = f"a {type(v).__name__}"
        return _Failure(f"attribute {name!r} is {shown}, expected {expected}")

    def _values(self, name: str) -> list:
        v = self.get(name)
        if v is None:
            return []
        return list(v) if isinstance(v, (list, tuple)) else [v]

    def floats(self, name: str) -> list[float]:
        """The attribute as a list of floats ([] when absent); ints are taken as floats."""
        out = []
        for x in self._values(name):
            if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
                raise self._bad(name, "numbers")
            out.append(float(x))
        return out

    def ints(self, name: str) -> list[int]:
        """The attribute as a list of int64 values ([] when absent); integral floats are taken as ints."""
        out = []
        for x in self._values(name):
            if isinstance(x, (float, np.floating)) and np.isfinite(x) and float(x).is_integer():
                x = int(x)
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
                raise self._bad(name, "integers")
            if not -2 ** 63 <= int(x) < 2 ** 63:
                raise self._bad(name, "integers within int64")
            out.append(int(x))
        return out

    def float(self, name: str, default: float) -> float:
        """One float (a scalar or a one-element list; not NaN), ``default`` when absent."""
        if name not in self:
            return default
        v = self.floats(name)
        if len(v) != 1 or np.isnan(v[0]):
            raise self._bad(name, "one number")
        return v[0]

    def int(self, name: str, default: int) -> int:
        """One integer (a scalar or a one-element list), ``default`` when absent."""
        if name not in self:
            return default
        v = self.ints(name)
        if len(v) != 1:
            raise self._bad(name, "one integer")
        return v[0]


def _attrs(node: onnx.NodeProto) -> _Attrs:
    """Attribute name -> Python value (strings decoded), with the typed readers of :class:`_Attrs`."""
    return _Attrs((a.name, _text(helper.get_attribute_value(a))) for a in node.attribute)


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
    return any(n.domain == HORIZON_DOMAIN and (n.domain, n.op_type) not in local for n in _walk_nodes(model.graph))


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

    def __init__(self, low: Any, node: onnx.NodeProto):  # low: core._Lowerer (fresh names, constants mode)
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

