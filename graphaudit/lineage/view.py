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
        Tensor -> root tensor: follow producers back through wrappers. Only tensors that a wrapper writes are
        keys; every other tensor is its own root (read it as ``root.get(name, name)``): on a QDQ stage most tensors
        are weights and quantization parameters, and the three tables of them cost a third of the view.
    via : dict[str, str]
        Wrapper output tensor -> the wrapper node producing it (walk these to get a chain).
    depth : dict[str, int]
        Tensor -> number of wrappers between its root and it (keys as ``root``; 0 for the others:
        ``depth.get(name, 0)``).
    kinds : dict[str, frozenset]
        Tensor -> wrapper kinds between its root and it (keys as ``root``; empty for the others).
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
    _written: set[str] = field(default_factory=set, repr=False)  # tensors a wrapper writes (the keys ``root`` may have)

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
        # pass 1 over the nodes: wrappers (asked only of nodes whose op is a wrapper op) and the tensors they write,
        # the core nodes, and the tensors derived from weights alone (every non-empty input derived from weights,
        # TensorInfo.is_param)
        wrappers, written, core_list = v.wrappers, v._written, []
        v.const_derived = cd = set(stage.weight_names())
        issuperset, listed = cd.issuperset, {}  # listed: (domain, op_type) -> a wrapper op of WRAPPER_KINDS
        for nid, node in nodes.items():
            key = (node.domain, node.op_type)
            is_op = listed.get(key)
            if is_op is None:
                is_op = listed[key] = (norm_domain(node.domain), node.op_type) in WRAPPER_KINDS
            kind = wrapper_kind(stage, node) if is_op else None
            if kind is not None:
                wrappers[nid] = kind
                outs = node.outputs
                if len(outs) == 1:  # the common case, without a generator (wrapper_kind: the first output is named)
                    if tensors[outs[0]].producer == nid:
                        written.add(outs[0])
                else:
                    written.update(o for o in outs if o and tensors[o].producer == nid)
            if node.parent is None:
                if kind is None:
                    core_list.append(node)
                if node.inputs and issuperset(filter(None, node.inputs)):
                    cd.update(o for o in node.outputs if o)
        v._core = core_list
        # pass 2, over the wrappers: a tensor no wrapper writes is its own root (no entry); a wrapper's outputs are
        # resolved in file order, each through its input's root when that is known already; the tree of each root
        none = frozenset()
        root, depth, kinds, via, tree = v.root, v.depth, v.kinds, v.via, v.tree
        grown: dict[tuple[frozenset, str], frozenset] = {}  # (kinds, kind) -> kinds | {kind}: one set per pair
        for nid, kind in wrappers.items():
            node = nodes[nid]
            outputs = node.outputs
            for name in outputs:
                if name not in written or name in root:
                    continue
                inp = node.inputs[0]
                if outputs[0] == name and inp != name:
                    r = root.get(inp)
                    if r is not None:  # input resolved before (file order)
                        d, below = depth[inp] + 1, kinds[inp]
                    elif inp not in written:  # its own root
                        r, d, below = inp, 1, none
                    if r is not None:
                        root[name], via[name], depth[name] = r, nid, d
                        k = grown.get((below, kind))
                        if k is None:
                            k = grown[(below, kind)] = below | {kind}
                        kinds[name] = k
                        continue
                v._resolve(name)
            out = outputs[0]
            r = root.get(out, out)  # final: a wrapper's outputs are resolved above
            lst = tree.get(r)
            if lst is None:
                tree[r] = [nid]
            else:
                lst.append(nid)
        # pass 3, over the tensors: the core consumers of each root, in tensor order
        core = {n.id for n in core_list}
        consumers = v.consumers
        root_of = root.get
        for name, t in tensors.items():
            r = None
            for cid, idx in t.consumers:
                if cid in core:
                    if r is None:
                        r = root_of(name, name)
                        lst = consumers.get(r)
                        if lst is None:
                            lst = consumers[r] = []
                    lst.append((cid, idx, name))
        return v

    def _resolve(self, name: str) -> str:
        """Root of ``name``, filling root/via/depth/kinds for every wrapper output on the way (iterative,
        O(chain))."""
        root, written = self.root, self._written
        if name in root:
            return root[name]
        if name not in written:
            return name
        path: list[tuple[str, str]] = []
        cur = name
        seen = set()
        while cur in written and cur not in root:
            t = self.stage.tensors.get(cur)
            pid = t.producer if t is not None else None
            node = self.stage.nodes[pid] if pid is not None else None
            if node is None or pid not in self.wrappers or not node.outputs or node.outputs[0] != cur or cur in seen:
                root[cur], self.depth[cur], self.kinds[cur] = cur, 0, frozenset()
                break
            seen.add(cur)
            path.append((cur, pid))
            cur = node.inputs[0]
        base = root.get(cur, cur)
        depth, kinds = self.depth.get(cur, 0), self.kinds.get(cur, frozenset())
        for tensor, pid in reversed(path):
            depth, kinds = depth + 1, kinds | {self.wrappers[pid]}
            root[tensor], self.via[tensor], self.depth[tensor], self.kinds[tensor] = base, pid, depth, kinds
        return root[name]

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
