"""How a toolchain's rewrites show between two stages: folds into weighted ops, fused followers, decompositions.

Each function compares producers or consumers of stage a and stage b under a :class:`Matching`; none changes it.
The op facts (which ops fold, fuse, decompose) are in :mod:`graphaudit.toolchains.ops`.
"""

from __future__ import annotations

from ..stage import NodeInfo
from ..toolchains.ops import DECOMPOSED_TAILS, FOLDABLE_OPS, FUSIBLE_FOLLOWERS, is_table_lookup, op_class
from .matching import Matching
from .view import StageView

__all__ = ["KEY_ATTRS", "node_changed", "fusion_keeps_name", "consumer_ops", "skip_fused_followers", "folded_before"]

#: Attributes that describe a node's computation: compared by :func:`node_changed`, hashed into structural
#: signatures.
KEY_ATTRS = ("kernel_shape", "strides", "group", "dilations", "pads", "axis", "axes", "perm", "mode", "transA", "transB")


def fusion_keeps_name(m: Matching, pa: NodeInfo, pb: NodeInfo, hops: int = 4) -> str:
    """Which rewrite explains why differently produced tensors share a name, so they can hold one value.

    ``"fused"`` when b's producer fused a's producer with ops before it (its op is found on a's data path within
    ``hops`` nodes above: Conv+Relu -> HzSQuantizedConv, Conv+BatchNormalization -> Conv); ``"decomposed"`` when
    one side writes the other's op as a chain ending in the other producer (HardSwish -> ... Mul/Div);
    ``"lut"`` when b's producer is a table lookup (HzLut) of a's single-input op; ``""`` when nothing does.
    """
    cb, ca = op_class(pb), op_class(pa)
    if is_table_lookup(pb):
        single = sum(1 for x in pa.inputs if x and m.root_a(x) not in m.va.const_derived) == 1
        return "lut" if single else ""
    if ca in DECOMPOSED_TAILS.get(cb, ()) or cb in DECOMPOSED_TAILS.get(ca, ()):
        return "decomposed"
    frontier, seen = [pa], {pa.id}
    for _ in range(hops):
        nxt = []
        for n in frontier:
            for x in n.inputs:
                if not x or m.root_a(x) in m.va.const_derived:
                    continue
                p = m.a.producer(m.root_a(x))
                if p is None or p.id in seen:
                    continue
                if op_class(p) == cb:
                    return "fused"
                seen.add(p.id)
                nxt.append(p)
        frontier = nxt
    return ""


def _weight_roots(view: StageView, node: NodeInfo) -> list[tuple[int, str]]:
    return [(i, view.root.get(x, x)) for i, x in enumerate(node.inputs) if x and view.is_param_root(x)]


def node_changed(m: Matching, pa: NodeInfo, pb: NodeInfo) -> bool:
    """True when b's producer computes something else than a's: other op, other key attributes, more or
    fewer weights, or weights of other shape or content (content hashed only when shapes agree)."""
    if op_class(pa) != op_class(pb):
        return True
    wa, wb = _weight_roots(m.va, pa), _weight_roots(m.vb, pb)
    if [i for i, _ in wa] != [i for i, _ in wb]:
        return True
    for (_i, xa), (_j, xb) in zip(wa, wb):
        ta, tb = m.a.tensors[xa], m.b.tensors[xb]
        if ta.shape != tb.shape or ta.dtype != tb.dtype:
            return True
        da, db = ta.digest(), tb.digest()
        if da and db and da != db:
            return True
    return any(pa.attributes.get(k) != pb.attributes.get(k) for k in KEY_ATTRS)


def consumer_ops(view: StageView, root: str) -> list[str]:
    """Sorted op classes of the nodes that read ``root`` (through its wrappers, wrappers excluded)."""
    return sorted(op_class(view.stage.nodes[c]) for c, _i, _t in view.consumers.get(root, []))


def skip_fused_followers(m: Matching, ra: str, rb: str) -> tuple[str, int]:
    """The a tensor that b's output ``rb`` corresponds to, skipping followers fused into b's producer.

    Starting at ``ra``: while the consumers of the a tensor differ (by op class) from the
    consumers of ``rb`` and the a tensor's only consumer is a fusible follower (BatchNormalization,
    an elementwise op with a constant operand, an activation) whose op b does not show after
    ``rb``, step over that follower. Returns (a tensor, number of followers skipped).
    """
    ops_b = consumer_ops(m.vb, rb)
    cur, skipped = ra, 0
    while skipped < 4:
        cons = m.va.consumers.get(cur, [])
        if consumer_ops(m.va, cur) == ops_b or len(cons) != 1:
            break
        f = m.a.nodes[cons[0][0]]
        others = [x for k, x in enumerate(f.inputs) if x and k != cons[0][1]]
        if (f.op_type not in FUSIBLE_FOLLOWERS or op_class(f) in ops_b or f.id in m.node_a2b
                or any(m.va.root.get(x, x) not in m.va.const_derived for x in others)
                or not f.outputs or m.root_a(f.outputs[0]) in m.a2b):
            break
        cur, skipped = m.root_a(f.outputs[0]), skipped + 1
    return cur, skipped


def folded_before(m: Matching, ra: str, limit: int = 4) -> str:
    """Step back from a's tensor over foldable producers (BatchNormalization, elementwise with constants) whose
    other inputs are constant: the tensor they were applied to (``ra`` itself when there are none)."""
    cur = ra
    for _ in range(limit):
        p = m.a.producer(cur)
        if p is None or p.op_type not in FOLDABLE_OPS or p.id in m.node_a2b:
            break
        data = [x for x in p.inputs if x and m.root_a(x) not in m.va.const_derived]
        if len(data) != 1:
            break
        cur = m.root_a(data[0])
    return cur
