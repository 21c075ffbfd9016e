"""The in-memory model of one pipeline stage: `StageGraph`, its nodes and tensors."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Iterator

import os

import numpy as np
import onnx

from .digests import blake2b
from .errors import GraphAuditError

if TYPE_CHECKING:  # networkx is imported where a graph is built (about 0.2 s of start-up)
    import networkx as nx

__all__ = ["StageGraph", "NodeInfo", "TensorInfo", "node_graph", "PARAM_KINDS", "stage_arguments"]

#: The :attr:`TensorInfo.kind` values of weights (:attr:`TensorInfo.is_param`); hot loops test ``t.kind in
#: PARAM_KINDS`` instead of calling the property.
PARAM_KINDS = frozenset({"initializer", "constant"})


@dataclass(slots=True)
class NodeInfo:
    """One ONNX node.

    Attributes
    ----------
    id : str
        Stable, unique id inside the stage: the node name when it is non-empty and unique,
        else ``"<op_type>:<first output>"`` (outputs are unique in ONNX's SSA form), else
        ``"<op_type>#<index>"``. Nodes of subgraphs are prefixed ``"<parent id>/<attr>/"``.
    name : str
        The ONNX node name, possibly empty.
    op_type, domain : str
        Operator and its domain (``""`` is the default ``ai.onnx`` domain).
    inputs, outputs : tuple of str
        Tensor names; ``""`` marks an omitted optional input.
    attributes : dict
        Attribute name -> Python value (ints, floats, strings, lists; tensors as
        ``("tensor", dtype, shape, digest)`` and graphs as ``("graph", name)``).
    index : int
        Position in the (sub)graph's node list.
    parent : str or None
        Id of the If/Loop/Scan node owning the subgraph, ``None`` at top level.
    """

    id: str
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict[str, Any]
    index: int
    parent: str | None = None

    @property
    def qualified_op(self) -> str:
        """``op_type`` prefixed by its domain when the domain is not the default one."""
        if self.domain in ("", "ai.onnx"):
            return self.op_type
        return f"{self.domain}::{self.op_type}"


@dataclass(slots=True)
class TensorInfo:
    """One tensor (value) of a stage.

    Attributes
    ----------
    name : str
    dtype : str
        ONNX element type name (``"FLOAT"``, ``"INT8"``...), ``""`` when unknown.
    shape : tuple or None
        Dims as ints or symbolic strings (``"N"``) or ``None`` for an unknown dim; ``None`` if rank unknown.
    producer : str or None
        Id of the producing node; ``None`` for graph inputs and initializers.
    consumers : list of (node id, input index)
    kind : str
        ``"input"`` (graph input), ``"initializer"``, ``"constant"`` (output of a Constant
        node: weights of Paddle/keras exports), or ``"activation"``.
    is_graph_output : bool
    also_graph_input : bool
        For initializers also listed in ``graph.input`` (IR < 4 exports).
    """

    name: str
    dtype: str = ""
    shape: tuple | None = None
    producer: str | None = None
    consumers: list[tuple[str, int]] = field(default_factory=list)
    kind: str = "activation"
    is_graph_output: bool = False
    also_graph_input: bool = False
    nbytes: int | None = None
    _digest: str | None = field(default=None, repr=False)
    _reader: Callable[[], bytes] | None = field(default=None, repr=False)

    @property
    def is_param(self) -> bool:
        """True for weights: initializers and Constant node outputs."""
        return self.kind in PARAM_KINDS

    def digest(self) -> str | None:
        """Content hash (BLAKE2b-128 over dtype, shape and raw bytes) of a weight, computed lazily.

        Reads the bytes only on first call (from external data files when needed).
        Returns ``None`` for non-weights or when the bytes cannot be read
        (e.g. external data file missing).
        """
        if self._digest is None and self._reader is not None:
            try:
                raw = self._reader()
            except (OSError, ValueError):
                return None
            h = blake2b(digest_size=16)
            h.update(f"{self.dtype}{self.shape}".encode())
            h.update(raw)
            self._digest = h.hexdigest()
        return self._digest

    def value(self) -> "np.ndarray | None":
        """The weight as a numpy array (read on demand, external data included); ``None`` if unreadable."""
        if self._reader is None or not self.dtype or self.shape is None:
            return None
        try:
            np_dtype = onnx.helper.tensor_dtype_to_np_dtype(onnx.TensorProto.DataType.Value(self.dtype))
            return np.frombuffer(self._reader(), dtype=np_dtype).reshape(self.shape)
        except (OSError, ValueError, KeyError, TypeError):
            return None


_DOMAIN_OP = attrgetter("domain", "op_type")


def node_graph(nodes: dict[str, NodeInfo], tensors: dict[str, TensorInfo]) -> nx.MultiDiGraph:
    """One graph node per entry of ``nodes`` (attribute ``info``), one edge per (producer, consumer, key = tensor
    name) of a produced tensor (a node reading it twice has one edge), in the order of ``tensors`` and their
    consumers."""
    import networkx as nx

    g = nx.MultiDiGraph()
    g.add_nodes_from((nid, {"info": info}) for nid, info in nodes.items())
    g.add_edges_from((t.producer, consumer, tname, {}) for tname, t in tensors.items() if t.producer is not None
                     for consumer, _k in t.consumers)
    return g


@dataclass
class StageGraph:
    """One stage model as a graph.

    ``graph`` is a :class:`networkx.MultiDiGraph` with one graph node per ONNX node (key =
    :attr:`NodeInfo.id`, attribute ``info`` = the :class:`NodeInfo`) and one edge per
    (producer, consumer, tensor) with ``key`` = tensor name, in file order. Weights do not create edges
    (initializers have no producer node; Constant nodes do). It is built from ``nodes`` and ``tensors`` on first
    access (the alignment reads those tables, not the graph).

    Attributes
    ----------
    name : str
        Short display name (file stem or role).
    role : str
        One of :data:`graphaudit.toolchains.roles.ROLES`.
    path : str
    opsets : dict[str, int]
        Domain -> version from ``opset_import`` (``""`` = ai.onnx).
    ir_version : int
    producer_name : str
    inputs, outputs : list of str
        Graph input names (initializers excluded) and output names, in order.
    nodes : dict[str, NodeInfo]
        In topological (file) order, subgraph nodes after their parent.
    tensors : dict[str, TensorInfo]
    duplicate_initializers : dict[str, int]
        Initializer names one graph lists more than once -> how many times (subgraph names with their node
        prefix); the tensor holds the first of them, as onnxruntime computes with (rule S113).
    file_identity : tuple or None
        ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` of the file when its bytes were read
        (:func:`graphaudit.load.file_identity`); None for a stage not loaded from a file.
    """

    name: str
    role: str
    path: str
    opsets: dict[str, int]
    ir_version: int
    producer_name: str
    inputs: list[str]
    outputs: list[str]
    nodes: dict[str, NodeInfo]
    tensors: dict[str, TensorInfo]
    _graph: nx.MultiDiGraph | None = field(default=None, repr=False, compare=False)
    duplicate_initializers: dict[str, int] = field(default_factory=dict)
    file_identity: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def graph(self) -> nx.MultiDiGraph:
        """The stage as a networkx graph (see the class docstring), built on first access."""
        if self._graph is None:
            self._graph = node_graph(self.nodes, self.tensors)
        return self._graph

    def node(self, node_id: str) -> NodeInfo:
        """The node with this id (KeyError if absent)."""
        return self.nodes[node_id]

    def producer(self, tensor: str) -> NodeInfo | None:
        """Producer node of a tensor, or ``None`` for inputs, initializers and unknown names."""
        t = self.tensors.get(tensor)
        if t is None or t.producer is None:
            return None
        return self.nodes[t.producer]

    def top_nodes(self) -> Iterator[NodeInfo]:
        """Nodes of the main graph (not of subgraphs), in file order."""
        return (n for n in self.nodes.values() if n.parent is None)

    def weight_names(self) -> list[str]:
        """Names of the weights (:attr:`TensorInfo.is_param`: initializers and Constant outputs), in the order of
        ``tensors``. Listed once per stage (stages are not changed after loading) and shared: do not modify the
        list. The view and the matching read it instead of scanning every tensor (450,000 on a 200,000-node QDQ
        stage) for its kind each time."""
        names = self.__dict__.get("_weight_names")
        if names is None:
            names = self.__dict__["_weight_names"] = [n for n, t in self.tensors.items() if t.kind in PARAM_KINDS]
        return names

    def op_histogram(self) -> Counter:
        """Counter of qualified op types over all nodes, subgraphs included (keys in order of first occurrence).
        Counted once per stage (stages are not changed after loading); each call returns a new Counter."""
        hist = self.__dict__.get("_op_histogram")
        if hist is None:
            pairs = Counter(map(_DOMAIN_OP, self.nodes.values()))  # C-speed count of (domain, op_type)
            hist = Counter()
            for (domain, op_type), n in pairs.items():  # first-occurrence order, as counting qualified ops gives
                hist[op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"] += n
            self.__dict__["_op_histogram"] = hist
        return Counter(hist)

    def used_domains(self) -> Counter:
        """Counter of node domains actually used (``""`` normalised from ``ai.onnx``)."""
        return Counter("" if n.domain == "ai.onnx" else n.domain for n in self.nodes.values())


def stage_arguments(paths, what: str = "paths") -> list:
    """The stages a library call was given (``audit``'s ``paths``, ``lint_config``'s ``stages``) as a list: one
    path-like alone is a list of one; a list holds path-likes (a stage directory, stage files) or loaded
    StageGraphs, not both.

    Raises
    ------
    GraphAuditError
        Anything else (a mixed list, numbers, None, an empty list), naming ``what``.
    """
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    if not isinstance(paths, (list, tuple)) or not paths:
        raise GraphAuditError(f"{what}: expected a stage directory, stage files or loaded stages, got {paths!r:.80}")
    if not (all(isinstance(p, StageGraph) for p in paths) or all(isinstance(p, (str, os.PathLike)) for p in paths)):
        kinds = sorted({type(p).__name__ for p in paths})
        raise GraphAuditError(f"{what}: give either paths or loaded StageGraphs, not a mix of {', '.join(kinds)}")
    return list(paths)
