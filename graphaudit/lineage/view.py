"""Wrapper-transparent view of a stage: which nodes merely wrap a value, and each tensor's root."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..stage import NodeInfo, StageGraph
from ..toolchains.ops import wrapper_kind

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
        """Compute the view in one pass over the nodes in file order (topological in valid ONNX)."""
        v = cls(stage)
        nodes, tensors = stage.nodes, stage.tensors
        wrappers = v.wrappers
        for node in nodes.values():
            k = wrapper_kind(stage, node)
            if k is not None:
                wrappers[node.id] = k
        root, depth, kinds, none = v.root, v.depth, v.kinds, frozenset()
        for name, t in tensors.items():
            if name in root:
                continue
            pid = t.producer
            if pid is None or pid not in wrappers:  # its own root (what _resolve finds at once)
                root[name], depth[name], kinds[name] = name, 0, none
                continue
            node = nodes[pid]
            inp = node.inputs[0]
            if node.outputs[0] == name and inp in root and inp != name:  # input resolved before (file order)
                root[name], v.via[name], depth[name] = root[inp], pid, depth[inp] + 1
                kinds[name] = kinds[inp] | {wrappers[pid]}
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
        for nid in wrappers:
            out = nodes[nid].outputs[0]
            v.tree.setdefault(root[out], []).append(nid)
        v.const_derived = {n for n, t in tensors.items() if t.is_param}
        for node in nodes.values():
            if node.parent is None and node.inputs and all(not x or x in v.const_derived for x in node.inputs):
                v.const_derived.update(o for o in node.outputs if o)
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
