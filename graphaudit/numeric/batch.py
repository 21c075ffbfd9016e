"""Regions of a stage extracted once and run together: many disconnected subgraphs in one onnxruntime session."""

from __future__ import annotations

import numpy as np
import onnx

from .backends import make_session
from .schedule import cores

__all__ = ["ModelIndex", "RegionBatch", "region_nodes"]


class ModelIndex:
    """Producer of every tensor and the initializers of a model, indexed once for many extractions.

    Parameters
    ----------
    model : onnx.ModelProto
        Not modified; its nodes and initializers are referenced, not copied, until a region is built.
    """

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.producers = {o: n for n in model.graph.node for o in n.output if o}
        self.inits = {i.name: i for i in model.graph.initializer}
        self.order = {id(n): k for k, n in enumerate(model.graph.node)}

    def extract(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> onnx.ModelProto | None:
        """The part of the model computing ``outputs`` from ``inputs`` and weights, as a model whose graph inputs
        are typed from the arrays; None when the cut is not closed (same result as
        :func:`graphaudit.numeric.runner.extract_submodel`)."""
        found = region_nodes(self, set(inputs), outputs)
        if found is None:
            return None
        nodes, used = found
        g = onnx.helper.make_graph(nodes, "region", [_value_info(k, v) for k, v in inputs.items()],
                                   [onnx.ValueInfoProto(name=o) for o in outputs], [self.inits[k] for k in sorted(used)])
        return _model(g, self.model)


def region_nodes(index: ModelIndex, inputs: set[str], outputs: list[str]
                 ) -> tuple[list[onnx.NodeProto], set[str]] | None:
    """The nodes (in file order) computing ``outputs`` from ``inputs`` and the initializers they read, or None when
    an output depends on a tensor that is neither an input nor a weight (the cut is not closed)."""
    nodes: dict[int, onnx.NodeProto] = {}
    used: set[str] = set()
    stack, visited = list(outputs), set()
    while stack:
        t = stack.pop()
        if t in visited or t in inputs:
            continue
        visited.add(t)
        if t in index.inits:
            used.add(t)
            continue
        n = index.producers.get(t)
        if n is None:
            return None
        if id(n) not in nodes:
            nodes[id(n)] = n
            stack.extend(x for x in n.input if x)
    return sorted(nodes.values(), key=lambda n: index.order[id(n)]), used


def _value_info(name: str, v: np.ndarray) -> onnx.ValueInfoProto:
    """A region input typed from an array: its dtype and rank, every dim left open (typed from the first sample,
    a later sample of another size, as a stage with dynamic height or width takes, failed in the session: the
    region was measured on the samples before it only)."""
    return onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), [None] * v.ndim)


def _model(g: onnx.GraphProto, like: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.helper.make_model(g, opset_imports=list(like.opset_import))
    m.ir_version = like.ir_version
    return m


def _batchable(nodes: list[onnx.NodeProto]) -> bool:
    """Nodes that can be renamed into a batch: no Loop (its trip count is data: a region holding one is not measured
    alone at all) and no subgraph attribute (an If/Scan body reads outer tensors by name)."""
    return all(n.op_type != "Loop" and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                               for a in n.attribute) for n in nodes)


class RegionBatch:
    """Many regions of one model in one session: region ``j``'s tensors are renamed ``r<j>|<name>`` (weights keep
    their names and are stored once), so regions that share a boundary tensor or overlap stay independent: each
    computes exactly what it computes alone, from its own inputs.

    Attributes
    ----------
    members : list of int
        Region indices in the batch.
    session
        The onnxruntime session (one intra-op thread per node, like the per-region sessions; the parallel executor
        runs independent regions side by side on up to 4 cores).
    """

    def __init__(self, members: list[int], session, outputs: dict[int, list[str]], inputs: dict[int, list[str]]):
        self.members, self.session, self._outputs, self._inputs = members, session, outputs, inputs
        self._names = [f"r{j}|{o}" for j in members for o in outputs[j]]

    @classmethod
    def build(cls, index: ModelIndex, feeds: dict[int, dict[str, np.ndarray]], outputs: dict[int, list[str]],
              runtime: str) -> "RegionBatch | None":
        """The batch of the regions that can join it (closed cut, :func:`_batchable`), typed from the first
        sample's feeds; None when fewer than two regions can join or the runtime refuses the model."""
        nodes, inits, ins, outs, members = [], set(), [], [], []
        for j in sorted(feeds):
            found = region_nodes(index, set(feeds[j]), outputs[j])
            if found is None or not _batchable(found[0]):
                continue
            members.append(j)
            inits |= found[1]
            ins.extend(_value_info(f"r{j}|{k}", v) for k, v in feeds[j].items())
            outs.extend(onnx.ValueInfoProto(name=f"r{j}|{o}") for o in outputs[j])
            nodes.extend(_renamed(n, f"r{j}|", found[1]) for n in found[0])
        if len(members) < 2:
            return None
        g = onnx.helper.make_graph(nodes, "regions", ins, outs, [index.inits[k] for k in sorted(inits)])
        try:
            # no arena: a transition has several batches, and each arena would keep its run's outputs for good.
            # The regions are independent subgraphs: the parallel executor runs them on every core (a batch runs
            # alone, in the reduce step); on PP-OCR cls's 179 regions 0.19-0.32 s instead of 0.29-0.62 s for 16
            # samples, CPU 0.09-0.14 s instead of 0.15-0.25 s (loaded 2-core machine)
            sess = make_session(_model(g, index.model).SerializeToString(), runtime, threads=1, arena=False,
                                parallel=min(4, cores()))
        except Exception:  # noqa: BLE001 - the regions then run alone, each refused or not on its own
            return None
        return cls(members, sess, {j: outputs[j] for j in members}, {j: list(feeds[j]) for j in members})

    def run(self, feeds: dict[int, dict[str, np.ndarray]]) -> dict[int, list[np.ndarray]]:
        """One sample of every member: their outputs (in the order given to :meth:`build`) by region index.

        Raises
        ------
        Exception
            Whatever onnxruntime raises (a region's feeds that do not fit it).
        """
        got = self.session.run(self._names, {f"r{j}|{k}": feeds[j][k] for j in self.members for k in self._inputs[j]})
        out, k = {}, 0
        for j in self.members:
            out[j] = got[k:k + len(self._outputs[j])]
            k += len(self._outputs[j])
        return out


def _renamed(n: onnx.NodeProto, prefix: str, weights: set[str]) -> onnx.NodeProto:
    m = onnx.NodeProto()
    m.CopyFrom(n)
    m.name = prefix + n.name if n.name else ""
    for k, x in enumerate(n.input):
        if x and x not in weights:
            m.input[k] = prefix + x
    for k, x in enumerate(n.output):
        if x:
            m.output[k] = prefix + x
    return m
