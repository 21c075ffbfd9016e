"""Wrapper-transparent view of a stage: which nodes merely wrap a value, and each tensor's root."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..stage import NodeInfo, StageGraph
from ..toolchains.ops import WRAPPER_KINDS, norm_domain, wrapper_kind

__all__ = ["StageView"]


@dataclass
class StageView:
    """Roots and wrapper trees of one stage.

    Attributes
    ----------
    stage : StageGraph
    wrappers : dict[str, str]
        Wrapper node id -> wrapper kind (:func:`graphaudit.toolchains.ops.wrapper_kind`).
    root : dict[str, str]
        Tensor -> root tensor: follow producers back through wrappers (a tensor not produced
        by a wrapper is its own root).
    via : dict[str, str]
        Wrapper output tensor -> the wrapper node producing it (walk these to get a chain).
    depth : dict[str, int]
        Tensor -> number of wrappers between its root and it.
    kinds : dict[str, frozenset]
        Tensor -> wrapper kinds between its root and it.
    consumers : dict[str, list[tuple[str, int, str]]]
        Root -> (consumer node id, input index, tensor actually read) over the whole wrapper
        tree of the root, wrappers excluded.
    tree : dict[str, list[str]]
        Root -> wrapper node ids hanging below it, in file order.
    """

    stage: StageGraph
    wrappers: dict[str, str] = field(default_factory=dict)
    root: dict[str, str] = field(default_factory=dict)
    via: dict[str, str] = field(default_factory=dict)
    depth: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, frozenset] = field(default_factory=dict)
    consumers: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)
    tree: dict[str, list[str]] = field(default_factory=dict)
    const_derived: set[str] = field(default_factory=set)
    _core: list[NodeInfo] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, stage: StageGraph) -> "StageView":
        """The view of ``stage``, built once and kept on the stage (stages are not changed after loading): the
        alignments of both neighbouring transitions and the structure checks share it."""
        view = stage.__dict__.get("_stage_view")
        if view is None:
            view = cls.build(stage)
            stage.__dict__["_stage_view"] = view
        return view

    @classmethod
    def build(cls, stage: StageGraph) -> "StageView":
        """Compute the view in passes over the nodes in file order (topological in valid ONNX)."""
        v = cls(stage)
        nodes, tensors = stage.nodes, stage.tensors
        v.wrappers = wrappers = _wrappers(stage)
        # a tensor no wrapper writes is its own root (what _resolve finds at once); a wrapper's outputs are resolved
        # in file order, each through its input's root when that is known already
        written = {o for nid in wrappers for o in nodes[nid].outputs if o and tensors[o].producer == nid}
        none = frozenset()
        v.root = root = {name: name for name in tensors if name not in written}
        v.depth, v.kinds = depth, kinds = dict.fromkeys(root, 0), dict.fromkeys(root, none)
        via = v.via
        for nid, kind in wrappers.items():
            node = nodes[nid]
            for name in node.outputs:
                if name not in written or name in root:
                    continue
                inp = node.inputs[0]
                if node.outputs[0] == name and inp in root and inp != name:  # input resolved before (file order)
                    root[name], via[name], depth[name] = root[inp], nid, depth[inp] + 1
                    kinds[name] = kinds[inp] | {kind}
                else:
                    v._resolve(name)
        core = {nid for nid, n in nodes.items() if n.parent is None and nid not in wrappers}
        consumers = v.consumers
        for name, t in tensors.items():
            r = None
            for cid, idx in t.consumers:
                if cid in core:
                    if r is None:
                        r = root[name]
                        lst = consumers.get(r)
                        if lst is None:
                            lst = consumers[r] = []
                    lst.append((cid, idx, name))
        tree = v.tree
        for nid in wrappers:
            r = root[nodes[nid].outputs[0]]
            lst = tree.get(r)
            if lst is None:
                tree[r] = [nid]
            else:
                lst.append(nid)
        v.const_derived = cd = {n for n, t in tensors.items() if t.kind == "initializer" or t.kind == "constant"}
        for node in nodes.values():  # every non-empty input derived from weights (TensorInfo.is_param)
            if node.parent is None and node.inputs and cd.issuperset(filter(None, node.inputs)):
                cd.update(o for o in node.outputs if o)
        return v

    def _resolve(self, name: str) -> str:
        """Root of ``name``, filling root/via/depth/kinds for every tensor on the way (iterative, O(chain))."""
        if name in self.root:
            return self.root[name]
        path: list[tuple[str, str]] = []
        cur = name
        seen = set()
        while cur not in self.root:
            t = self.stage.tensors.get(cur)
            pid = t.producer if t is not None else None
            node = self.stage.nodes[pid] if pid is not None else None
            if node is None or pid not in self.wrappers or not node.outputs or node.outputs[0] != cur or cur in seen:
                self.root[cur], self.depth[cur], self.kinds[cur] = cur, 0, frozenset()
                break
            seen.add(cur)
            path.append((cur, pid))
            cur = node.inputs[0]
        base = self.root[cur]
        depth, kinds = self.depth[cur], self.kinds[cur]
        for tensor, pid in reversed(path):
            depth, kinds = depth + 1, kinds | {self.wrappers[pid]}
            self.root[tensor], self.via[tensor], self.depth[tensor], self.kinds[tensor] = base, pid, depth, kinds
        return self.root[name]

    def chain(self, name: str) -> tuple[str, ...]:
        """Wrapper node ids between the root of ``name`` and ``name`` (root first)."""
        out = []
        cur = name
        while cur in self.via:
            out.append(self.via[cur])
            cur = self.stage.nodes[self.via[cur]].inputs[0]
        return tuple(reversed(out))

    def is_param_root(self, name: str) -> bool:
        """True when the tensor's root is a weight (initializer or Constant output)."""
        t = self.stage.tensors.get(self.root.get(name, name))
        return t is not None and t.is_param

    def core_nodes(self) -> list[NodeInfo]:
        """Non-wrapper nodes of the main graph, in file order (computed once)."""
        if self._core is None:
            self._core = [n for n in self.stage.nodes.values() if n.id not in self.wrappers and n.parent is None]
        return self._core


def _wrappers(stage: StageGraph) -> dict[str, str]:
    """Wrapper node id -> kind (:func:`wrapper_kind`), in file order; asked only of nodes whose op is a wrapper op."""
    out: dict[str, str] = {}
    listed: dict[tuple[str, str], bool] = {}  # (domain, op_type) -> a wrapper op of WRAPPER_KINDS
    for nid, node in stage.nodes.items():
        key = (node.domain, node.op_type)
        is_op = listed.get(key)
        if is_op is None:
            is_op = listed[key] = (norm_domain(node.domain), node.op_type) in WRAPPER_KINDS
        if is_op:
            k = wrapper_kind(stage, node)
            if k is not None:
                out[nid] = k
    return out
