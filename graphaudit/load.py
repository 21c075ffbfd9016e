"""Read an ONNX file into a :class:`~graphaudit.stage.StageGraph` without loading weight bytes."""

from __future__ import annotations

import math
import os
from collections import Counter
from functools import lru_cache, partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from .errors import ModelLoadError
from .stage import NodeInfo, StageGraph, TensorInfo, node_graph

__all__ = ["load_stage", "dtype_name"]

_GRAPH_ATTR_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
_EXTERNAL, _STRING = onnx.TensorProto.EXTERNAL, onnx.TensorProto.STRING


def _text(v: str | bytes) -> str:
    """Protobuf strings that are not valid UTF-8 come back as bytes: decode them with replacement."""
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


@lru_cache(maxsize=None)
def dtype_name(elem_type: int) -> str:
    """ONNX ``TensorProto.DataType`` enum value -> name (``1`` -> ``"FLOAT"``), ``""`` if undefined."""
    if not elem_type:
        return ""
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"TYPE{elem_type}"


def _shape_of(type_proto: onnx.TypeProto) -> tuple[str, tuple | None]:
    if not type_proto.HasField("tensor_type"):
        return "", None
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return dtype_name(tt.elem_type), None
    dims: list[Any] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dtype_name(tt.elem_type), tuple(dims)


@lru_cache(maxsize=None)
def _itemsize(data_type: int) -> int | None:
    """Bytes per element of an ONNX element type, None when numpy has no such type."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return None


def _expected_nbytes(t: onnx.TensorProto, dims: tuple[int, ...] | None = None) -> int | None:
    """Bytes implied by dims (``t.dims`` unless given) and element type (None for strings, unknown types or bad
    dims)."""
    dims = tuple(t.dims) if dims is None else dims
    data_type = t.data_type
    itemsize = _itemsize(data_type)
    if itemsize is None or data_type == onnx.TensorProto.STRING or (dims and min(dims) < 0):
        return None
    return math.prod(dims) * itemsize


def _tensor_reader(t: onnx.TensorProto, base_dir: Path) -> Callable[[], bytes]:
    """A function returning the raw bytes of a weight, reading external data on demand.

    External data is read only from a regular file inside the model's directory, and never more
    than the bytes that dims x dtype imply (ValueError otherwise).
    """
    if t.data_location == onnx.TensorProto.EXTERNAL:
        info = {_text(e.key): _text(e.value) for e in t.external_data}
        expected = _expected_nbytes(t)

        def read_external() -> bytes:
            loc = info.get("location", "")
            target = (base_dir / loc).resolve()
            if base_dir.resolve() not in target.parents or not target.is_file():
                raise ValueError(f"external data location {loc!r} is not a file inside the model directory")
            try:
                offset = int(info.get("offset", 0) or 0)
                length = int(info["length"]) if info.get("length") else expected
            except ValueError as e:
                raise ValueError(f"bad external data offset/length for {t.name!r}") from e
            if length is None or expected is None or length != expected or offset < 0:
                raise ValueError(f"external data of {t.name!r}: length {length} does not match dims x dtype")
            with open(target, "rb") as fh:
                fh.seek(offset)
                return fh.read(length)

        return read_external

    return _inline_reader(t)


def _inline_reader(t: onnx.TensorProto) -> Callable[[], bytes]:
    """A function returning the raw bytes of a weight stored in the model (copied out of the protobuf only when
    called)."""

    def read() -> bytes:
        raw = t.raw_data
        return raw if raw else numpy_helper.to_array(t).tobytes()

    return read


def _read_initializer(initializers, index: int) -> bytes:
    """The raw bytes of the inline weight ``initializers[index]`` (a graph's ``initializer`` list; copied out of the
    protobuf only when called)."""
    t = initializers[index]
    raw = t.raw_data
    return raw if raw else numpy_helper.to_array(t).tobytes()


def _tensor_nbytes(t: onnx.TensorProto, dims: tuple[int, ...] | None = None) -> int | None:
    if t.data_location == onnx.TensorProto.EXTERNAL:
        length = {_text(e.key): _text(e.value) for e in t.external_data}.get("length")
        try:
            return int(length) if length else _expected_nbytes(t, dims)
        except ValueError:
            return None
    return _expected_nbytes(t, dims)


def _attr_value(a: onnx.AttributeProto) -> Any:
    if a.type == onnx.AttributeProto.TENSOR:
        return ("tensor", dtype_name(a.t.data_type), tuple(a.t.dims))
    if a.type == onnx.AttributeProto.GRAPH:
        return ("graph", _text(a.g.name))
    if a.type == onnx.AttributeProto.GRAPHS:
        return [("graph", _text(g.name)) for g in a.graphs]
    if a.type == onnx.AttributeProto.SPARSE_TENSOR:
        return ("sparse_tensor", tuple(a.sparse_tensor.dims))
    if a.ref_attr_name:  # a reference to a function's attribute: no value of its own (invalid outside a function)
        return ("ref_attr", _text(a.ref_attr_name))
    try:
        v = onnx.helper.get_attribute_value(a)
    except ValueError:  # an attribute type onnx does not define (UNDEFINED or a future enum value)
        return ("undefined", int(a.type))
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The value of a Constant node as a TensorProto (ONNX Constant spec: value, value_float(s), value_int(s))."""
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return a.t
        if a.name in ("value_float", "value_floats", "value_int", "value_ints"):
            arr = np.asarray(onnx.helper.get_attribute_value(a),
                             dtype=np.float32 if "float" in a.name else np.int64)
            return numpy_helper.from_array(arr)
    return None


class _Builder:
    def __init__(self, model: onnx.ModelProto, path: Path):
        self.model = model
        self.path = path
        self.base_dir = path.parent
        self.nodes: dict[str, NodeInfo] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self.used_ids: set[str] = set()
        #: Initializer names listed more than once in one graph -> how many times (:meth:`_duplicates`).
        self.duplicates: dict[str, int] = {}
        #: The tensors in canonical order (:func:`_canonical_order`), filled as the nodes are read: the main graph's
        #: inputs, then each node's inputs and outputs in node order, subgraph nodes after their parent.
        self.order: dict[str, TensorInfo] = {}
        #: Set when a node writes a tensor that an earlier node (or itself) reads: only then can there be a cycle.
        self.out_of_order = False

    def tensor(self, name: str) -> TensorInfo:
        t = self.tensors.get(name)
        if t is None:
            t = self.tensors[name] = TensorInfo(name=name)
        return t

    def node_id(self, name: str, op_type: str, outputs: tuple[str, ...], index: int, prefix: str) -> str:
        candidates = []
        if name:
            candidates.append(prefix + name)
        first_out = next((o for o in outputs if o), "")
        if first_out:
            candidates.append(f"{prefix}{op_type}:{first_out}")
        candidates.append(f"{prefix}{op_type}#{index}")
        for c in candidates:
            if c not in self.used_ids:
                self.used_ids.add(c)
                return c
        k = 1
        while f"{candidates[-1]}.{k}" in self.used_ids:
            k += 1
        self.used_ids.add(f"{candidates[-1]}.{k}")
        return f"{candidates[-1]}.{k}"

    def add_graph(self, g: onnx.GraphProto, parent: str | None, prefix: str, depth: int = 0) -> None:
        if depth > 64:
            raise ModelLoadError(f"{self.path}: subgraphs nested more than 64 deep")
        before = len(self.tensors)
        self._initializers(g)
        if len(self.tensors) - before != len(g.initializer):  # a name listed twice, or one seen before (subgraph)
            self._duplicates(g, prefix)
        for sp in g.sparse_initializer:
            t = self.tensor(_text(sp.values.name))
            t.kind = "initializer"
            t.dtype = dtype_name(sp.values.data_type)
            t.shape = tuple(int(d) for d in sp.dims)
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            t = self.tensor(_text(vi.name))
            dtype, shape = _shape_of(vi.type)
            if t.kind not in ("initializer", "constant"):
                t.dtype = t.dtype or dtype
                if shape is not None and t.shape is None:
                    t.shape = shape
        for vi in g.input:
            t = self.tensors[_text(vi.name)]
            if t.kind == "initializer":
                t.also_graph_input = True
            elif parent is None:
                t.kind = "input"
        if parent is None:
            order, tensors = self.order, self.tensors
            for vi in g.input:
                name = _text(vi.name)
                if name not in order:
                    order[name] = tensors[name]
        if parent is None:
            for vo in g.output:
                self.tensors[_text(vo.name)].is_graph_output = True
        self.add_nodes(g, parent, prefix, depth)

    def _initializers(self, g: onnx.GraphProto) -> None:
        """One weight per initializer of ``g``: dtype, dims, bytes implied, a reader of its bytes (not read)."""
        tensors, base_dir = self.tensors, self.base_dir
        # (data_type, dims) -> (dtype name, bytes implied): a QDQ stage's 100,000s of scalar scales and zero points
        # share a handful of keys
        known: dict[tuple[int, tuple[int, ...]], tuple[str, int | None]] = {}
        # an inline weight's reader is the list and its index, not a closure holding the protobuf message (whose
        # Python object would stay alive, one per weight: 250,000 on a 200,000-node QDQ stage)
        initializers = g.initializer
        for index, init in enumerate(initializers):
            name = init.name
            if type(name) is not str:
                name = _text(name)
            data_type, dims = init.data_type, tuple(init.dims)  # int64 dims: Python ints already
            key = (data_type, dims)
            found = known.get(key)
            if found is None:
                size = _itemsize(data_type)
                found = known[key] = (dtype_name(data_type),
                                      None if size is None or data_type == _STRING or (dims and min(dims) < 0)
                                      else math.prod(dims) * size)
            dtype, nbytes = found
            if init.data_location == _EXTERNAL:
                nbytes, reader = _tensor_nbytes(init, dims), _tensor_reader(init, base_dir)
            else:  # the common case, inline: _expected_nbytes without its call
                reader = partial(_read_initializer, initializers, index)
            t = tensors.get(name)
            if t is None:
                tensors[name] = TensorInfo(name, dtype, dims, None, [], "initializer", False, False, nbytes, None,
                                           reader)
            else:  # already read by a node of an outer graph, or listed twice
                t.kind, t.dtype, t.shape, t.nbytes, t._reader = "initializer", dtype, dims, nbytes, reader

    def _duplicates(self, g: onnx.GraphProto, prefix: str) -> None:
        """Names ``g.initializer`` lists more than once (ONNX requires unique names; onnx.checker refuses them): record
        them in :attr:`duplicates` and keep the *first* of each, as onnxruntime does (1.32.0, measured: it warns
        "the model will use the latest encountered initializer" but computes with the first; tests/test_load.py).
        Only names are read (weight bytes are not), and only when :meth:`add_graph` saw fewer new tensors than
        initializers."""
        counts = Counter(_text(i.name) for i in g.initializer)
        dup = {name: k for name, k in counts.items() if k > 1}
        if not dup:
            return
        for name, k in dup.items():
            self.duplicates[prefix + name] = k
        first = {}
        for init in g.initializer:
            first.setdefault(_text(init.name), init)
        # _initializers reads only ``.initializer``: the first proto of each duplicated name overwrites the last
        self._initializers(SimpleNamespace(initializer=[first[name] for name in dup]))

    def add_nodes(self, g: onnx.GraphProto, parent: str | None, prefix: str, depth: int) -> None:
        """The nodes of ``g`` (and of their subgraphs) with their tensors' producer and consumers."""
        tensors, nodes, used, order = self.tensors, self.nodes, self.used_ids, self.order
        get = tensors.get
        for i, n in enumerate(g.node):
            name, op_type, domain = n.name, n.op_type, n.domain
            inputs, outputs = tuple(n.input), tuple(n.output)
            try:  # protobuf gives bytes for a string that is not UTF-8: join refuses them, at C speed
                "".join((name, op_type, domain, *inputs, *outputs))
            except TypeError:
                name, op_type, domain = _text(name), _text(op_type), _text(domain)
                inputs, outputs = tuple(_text(x) for x in inputs), tuple(_text(x) for x in outputs)
            nid = prefix + name if prefix else name
            if name and nid not in used:
                used.add(nid)
            else:
                nid = self.node_id(name, op_type, outputs, i, prefix)
            attributes = n.attribute
            attrs = {_text(a.name): _attr_value(a) for a in attributes} if attributes else {}
            # a read tensor's name as the node's input is the table's key object, not protobuf's new copy of it:
            # the later passes' lookups then compare strings by identity, and no name is held twice
            ins = []
            k = 0
            for x in inputs:
                if x:
                    t = get(x)
                    if t is None:
                        t = tensors[x] = order[x] = TensorInfo(x, "", None, None, [])
                    else:
                        x = t.name
                        if x not in order:
                            order[x] = t
                    t.consumers.append((nid, k))
                ins.append(x)
                k += 1
            nodes[nid] = NodeInfo(nid, name, op_type, domain, tuple(ins), outputs, attrs, i, parent)
            for x in outputs:
                if not x:
                    continue
                if op_type != "Constant" and x not in tensors:  # the common case: a new tensor this node computes
                    tensors[x] = order[x] = TensorInfo(x, "", None, nid, [])
                else:
                    self._produce(n, nid, x, op_type, domain, parent)
                    if x not in order:
                        order[x] = tensors[x]
            if attributes:
                self._subgraphs(attributes, nid, depth)

    def _produce(self, n: onnx.NodeProto, nid: str, x: str, op_type: str, domain: str, parent: str | None) -> None:
        """Record node ``nid`` as the producer of tensor ``x`` (a Constant's output holds its value)."""
        t = self.tensor(x)
        if t.consumers:  # read before it is written: file order is not topological (or a node reads itself)
            self.out_of_order = True
        if t.producer is not None or t.kind in ("initializer", "input"):
            if parent is not None:
                return  # sibling subgraphs may reuse names; the first producer stands for them
            raise ModelLoadError(f"{self.path}: tensor {x!r} is produced twice (by node {nid!r} and before)")
        t.producer = nid
        if op_type == "Constant" and domain in ("", "ai.onnx"):
            value = _constant_tensor(n)
            t.kind = "constant"
            if value is not None:
                t.dtype = dtype_name(value.data_type)
                t.shape = tuple(int(d) for d in value.dims)
                t.nbytes = _tensor_nbytes(value)
                t._reader = _tensor_reader(value, self.base_dir)

    def _subgraphs(self, attributes, nid: str, depth: int) -> None:
        for a in attributes:
            if a.type == onnx.AttributeProto.GRAPH:
                self.add_graph(a.g, nid, f"{nid}/{_text(a.name)}/", depth + 1)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for j, sg in enumerate(a.graphs):
                    self.add_graph(sg, nid, f"{nid}/{_text(a.name)}[{j}]/", depth + 1)


def _canonical_order(b: _Builder) -> dict[str, TensorInfo]:
    """The builder's tensors in an order set by the graph's inputs and nodes alone: the graph inputs, then each node's
    inputs and outputs in node (file) order (:attr:`_Builder.order`, filled as the nodes were read), then what no
    node reads or writes, by name.

    ONNX gives the order of ``graph.initializer`` and ``graph.value_info`` no meaning, and toolchains do not keep it:
    two hb_mapper 1.24.3 runs on the same model and calibration data write byte-different files that differ only in
    that order. Everything downstream iterates the tensor table, so its order must not come from those lists, or the
    same conversion aligns differently from one build to the next.
    """
    out, tensors = b.order, b.tensors
    if len(out) < len(tensors):
        for name in sorted(k for k in tensors if k not in out):
            out[name] = tensors[name]
    return out


def _validate(b: _Builder) -> None:
    """Reject graphs no toolchain can have written: reads of undefined tensors, cycles."""
    for name, t in b.tensors.items():
        if t.producer is None and t.kind == "activation" and t.consumers:
            top_level = [c for c, _k in t.consumers if b.nodes[c].parent is None]
            if top_level:
                raise ModelLoadError(f"{b.path}: node {top_level[0]!r} reads tensor {name!r}, which no node, "
                                     "input or initializer defines")
            t.kind = "missing"  # an outer-scope name read inside a subgraph that we could not resolve
    # file order is topological in valid ONNX (subgraph nodes follow their parent): then there is no cycle, and
    # networkx's search runs only for the files that are not in that order (every edge runs from a producer to a
    # consumer read after it was produced unless _Builder._produce saw the tensor read already)
    if not b.out_of_order:
        return
    import networkx as nx  # only here: importing it costs about 0.1 s of every run

    g = node_graph(b.nodes, b.tensors)
    if not nx.is_directed_acyclic_graph(g):
        cycle = nx.find_cycle(g)
        raise ModelLoadError(f"{b.path}: the graph has a cycle through node {cycle[0][0]!r}")


#: The largest single-file ONNX model: protobuf refuses to serialize or parse a message of 2 GiB or more (its sizes
#: are int32); onnx.checker.MAXIMUM_PROTOBUF, and the reason for external data in onnx docs/ExternalData.md.
MAX_MODEL_BYTES = 2**31 - 1


def load_stage(path: str | os.PathLike, role: str = "custom", name: str | None = None) -> StageGraph:
    """Load one ONNX file as a :class:`StageGraph`.

    Weight bytes are not read (the protobuf is parsed without external data); weight content
    hashes are computed lazily by :meth:`TensorInfo.digest`.

    Parameters
    ----------
    path : path-like
        The ``.onnx`` file.
    role : str
        Stage role (see :data:`graphaudit.toolchains.roles.ROLES`).
    name : str, optional
        Display name; defaults to the file stem.

    Raises
    ------
    ModelLoadError
        The path is missing or not a regular file, larger than :data:`MAX_MODEL_BYTES` (refused before reading),
        or the file is not a readable ONNX model (not protobuf, truncated, no graph), or the graph is inconsistent (a tensor produced
        twice, a read of an undefined tensor, a cycle).
    """
    p = Path(path)
    try:
        if not p.exists():
            raise ModelLoadError(f"{p}: no such file")
        if not p.is_file():
            raise ModelLoadError(f"{p}: not a file")
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_MODEL_BYTES:  # refused from its size: reading it whole would cost its size in memory first
                raise ModelLoadError(f"{p}: {size:,} bytes, more than protobuf's limit of {MAX_MODEL_BYTES:,} bytes "
                                     "(2 GiB) for one message: not a single-file ONNX model (a model this large keeps "
                                     "its weights in external data files)")
            data = fh.read()
            identity = file_identity(os.fstat(fh.fileno()))
    except OSError as e:
        raise ModelLoadError(f"{p}: cannot read ({e.strerror})") from e
    if not data:
        raise ModelLoadError(f"{p}: empty file, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        raise ModelLoadError(f"{p}: not an ONNX model or truncated ({e})") from e
    del data
    if model.ir_version <= 0 or not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelLoadError(f"{p}: not an ONNX model (no IR version or empty graph)")
    b = _Builder(model, p)
    b.add_graph(model.graph, None, "")
    _validate(b)
    b.tensors = _canonical_order(b)
    opsets = {("" if _text(o.domain) == "ai.onnx" else _text(o.domain)): int(o.version) for o in model.opset_import}
    inputs = [_text(vi.name) for vi in model.graph.input if b.tensors[_text(vi.name)].kind == "input"]
    outputs = [_text(vo.name) for vo in model.graph.output]
    return StageGraph(name=name or p.name.removesuffix(".onnx"), role=role, path=str(p),
                      opsets=opsets, ir_version=int(model.ir_version), producer_name=_text(model.producer_name),
                      inputs=inputs, outputs=outputs, nodes=b.nodes, tensors=b.tensors,
                      duplicate_initializers=b.duplicates, file_identity=identity)


def file_identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What identifies a file's content without reading it: device, inode, size, modification and change times (ns).
    Any write changes the change time (POSIX), so equal identities before and after reading mean the same bytes
    were read, short of two writes within one tick of the file system's clock."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
