"""Structural propagation of a matching: from matched tensors to the consumers and producers that correspond.

From each matched root pair on the worklist: consumers with the same op, the same input slot and consistent
other inputs are paired, and their outputs with them (forward); producers with the same op are paired, and their
inputs (backward); small single-entry single-exit rewrites are crossed when neither applies (hop).
"""

from __future__ import annotations

from typing import Iterator

from ..stage import PARAM_KINDS, NodeInfo
from ..toolchains.ops import op_class
from .matching import Matching
from .rewrites import consumer_ops, folded_before, node_changed, skip_fused_followers
from .view import StageView

__all__ = ["input_ok", "try_pair", "propagate"]


def input_ok(m: Matching, na: NodeInfo, nb: NodeInfo) -> tuple[bool, float]:
    """Whether every mapped data input of ``na`` corresponds to ``nb``'s input in the same slot.

    Returns (consistent, score). Unmapped inputs are allowed and score less.
    """
    score = 0.0
    ins_a, ins_b = na.inputs, nb.inputs
    la, lb = len(ins_a), len(ins_b)
    root_a, root_b, tensors_a, tensors_b = m.va.root, m.vb.root, m.va.stage.tensors, m.vb.stage.tensors
    a2b, b2a, absorbed = m.a2b, m.b2a, m.absorbed
    for i in range(la if la > lb else lb):
        xa = ins_a[i] if i < la else ""
        xb = ins_b[i] if i < lb else ""
        if not xa or not xb:
            continue  # optional input present on one side only (e.g. a bias added by a fold)
        ra, rb = root_a.get(xa, xa), root_b.get(xb, xb)
        ta, tb = tensors_a[ra], tensors_b[rb]
        pa, pb = ta.kind in PARAM_KINDS, tb.kind in PARAM_KINDS
        if pa and pb:
            # weights may be shared or de-duplicated by an optimizer: compare shapes, never reject
            score += (1 if ta.shape == tb.shape else -1) + (1 if a2b.get(ra) == rb else 0)
            continue
        if ra in absorbed:
            if _reads_below(m, absorbed[ra][0], xb):
                score += 2
                continue
            return False, 0.0
        if ra in a2b:
            if a2b[ra] != rb:
                return False, 0.0
            score += 2
        elif rb in b2a:
            if folded_before(m, ra) != b2a[rb]:
                return False, 0.0
            score += 1  # a foldable op before the node in a was folded into it in b
        elif pa != pb:
            score -= 0.5  # computed on one side, a weight on the other (constant folding)
    return True, score


def _reads_below(m: Matching, out_b: str, xb: str) -> bool:
    """True when b tensor ``xb`` is ``out_b`` or lies below it on a wrapper chain."""
    cur = xb
    while True:
        if cur == out_b:
            return True
        if cur not in m.vb.via:
            return False
        cur = m.b.nodes[m.vb.via[cur]].inputs[0]


def _attr_score(na: NodeInfo, nb: NodeInfo) -> float:
    keys = set(na.attributes) | set(nb.attributes)
    if not keys:
        return 0.0
    same = sum(1 for k in keys if na.attributes.get(k) == nb.attributes.get(k))
    return same / len(keys)


def try_pair(m: Matching, na: NodeInfo, nb: NodeInfo, conf: float, evidence: str) -> None:
    """Pair two nodes and map their outputs and inputs; an output steps over a's followers that b's node
    absorbed only when b's node was changed (a fold changes its weights)."""
    m.pair_nodes(na.id, nb.id, conf, evidence)
    root_a, root_b, a2b, b2a = m.va.root, m.vb.root, m.a2b, m.b2a
    changed = None  # node_changed may hash weights: asked only when an output is left to map
    for i, (xa, xb) in enumerate(zip(na.outputs, nb.outputs)):
        if not xa or not xb:
            continue
        ra, rb = root_a.get(xa, xa), root_b.get(xb, xb)
        if rb in b2a or ra in a2b:
            continue
        if changed is None:
            changed = node_changed(m, na, nb)
        target, skipped = skip_fused_followers(m, ra, rb) if changed else (ra, 0)
        ev = f"output {i} of matched {na.op_type} {na.name or na.id!r}"
        if skipped:
            ev += f", after {skipped} follower(s) fused into it in {m.b.name}"
        m.map(target, rb, "exact", conf * (0.95 if skipped else 1.0), ev)
    tensors_a, tensors_b, absorbed = m.va.stage.tensors, m.vb.stage.tensors, m.absorbed
    for xa, xb in zip(na.inputs, nb.inputs):
        if not xa or not xb:
            continue
        ra, rb = root_a.get(xa, xa), root_b.get(xb, xb)
        if ra in a2b or rb in b2a or ra in absorbed:
            continue
        pa, pb = tensors_a[ra].kind in PARAM_KINDS, tensors_b[rb].kind in PARAM_KINDS  # TensorInfo.is_param
        if pa and pb:
            m.map(ra, rb, "exact", conf, f"weight in the same slot of matched {na.op_type} {na.name or na.id!r}")
        elif not pa and pb:
            m.map(ra, rb, "folded", conf, f"computed in {m.a.name}, constant-folded to weight {rb!r} in {m.b.name}")
        elif not pa and not pb:
            m.map(ra, rb, "exact", conf * 0.95, f"input of matched {na.op_type} {na.name or na.id!r}")


def _forward(m: Matching, ra: str, rb: str) -> None:
    cons_a = m.va.consumers.get(ra, [])
    cons_b = m.vb.consumers.get(rb, [])
    if ra in m.absorbed:
        cons_b = [c for c in cons_b if _reads_below(m, m.absorbed[ra][0], c[2])]
    elif rb in m.absorbed_below:
        below = m.absorbed_below[rb]
        cons_b = [c for c in cons_b if not any(_reads_below(m, out, c[2]) for out in below)]
    if not cons_a or not cons_b:
        return
    for cid_a, idx_a, _ in cons_a:
        if cid_a in m.node_a2b:
            continue
        na = m.a.nodes[cid_a]
        cands = []
        for cid_b, idx_b, _ in cons_b:
            if cid_b in m.node_b2a or idx_b != idx_a:
                continue
            nb = m.b.nodes[cid_b]
            if op_class(na) != op_class(nb):
                continue
            ok, s = input_ok(m, na, nb)
            if not ok:
                continue
            s += _attr_score(na, nb) + (2.0 if na.name and na.name == nb.name else 0.0)
            cands.append((s, cid_b))
        if not cands:
            continue
        cands.sort(key=lambda c: -c[0])
        best = cands[0]
        if len(cands) == 1:
            conf, ev = 0.95, f"only {na.op_type} reading the matched tensor {ra!r} in slot {idx_a}"
        elif best[0] > cands[1][0]:
            conf, ev = 0.85, f"best of {len(cands)} {na.op_type} consumers of {ra!r} by inputs, attributes and name"
        else:
            continue  # tie: leave to the signature pass
        if na.name and na.name == m.b.nodes[best[1]].name:
            conf = 1.0
        try_pair(m, na, m.b.nodes[best[1]], conf, ev)


def _backward(m: Matching, ra: str, rb: str) -> None:
    if ra in m.absorbed:
        return
    va, vb = m.va, m.vb
    ta, tb = va.stage.tensors.get(ra), vb.stage.tensors.get(rb)  # the producers (StageGraph.producer), inline
    ida = ta.producer if ta is not None else None
    idb = tb.producer if tb is not None else None
    if ida is None or idb is None or ida in m.node_a2b or idb in m.node_b2a:
        return
    pa, pb = va.stage.nodes[ida], vb.stage.nodes[idb]
    if pa.id in m.va.wrappers or pb.id in m.vb.wrappers or op_class(pa) != op_class(pb):
        return
    if ra not in pa.outputs or rb not in pb.outputs or pa.outputs.index(ra) != pb.outputs.index(rb):
        return
    ok, _ = input_ok(m, pa, pb)
    if ok:  # the same node name is as strong here as when _forward reaches the pair: which comes first is order
        conf = 1.0 if pa.name and pa.name == pb.name else m.info[ra][1] * 0.95
        try_pair(m, pa, pb, conf, f"producers of matched tensors {ra!r} / {rb!r}, same op")


def _sese_levels(view: StageView, start: str, done: dict[str, str], depth: int = 3) -> Iterator[
        tuple[list[str], str] | None]:
    """Small single-entry single-exit subgraphs below root ``start``, one per number of steps 1 .. ``depth``.

    At step k: the unmatched core nodes reachable from ``start`` in at most k steps whose non-constant inputs all
    come from ``start`` or from inside; yields (node ids, exit tensor) when exactly one tensor leaves the set, else
    None. Lazy: one traversal, each step taken when the next subgraph is asked for.
    """
    st, consumers, root, const_derived = view.stage, view.consumers, view.root, view.const_derived
    nodes = st.nodes
    inside: list[str] = []
    produced = {start}
    frontier = [start]
    for _ in range(depth):
        nxt = []
        for t in frontier:
            for cid, _i, _x in consumers.get(t, ()):
                n = nodes[cid]
                if cid in inside or cid in done or n.parent is not None:
                    continue
                if all(not x or root.get(x, x) in produced or root.get(x, x) in const_derived for x in n.inputs):
                    inside.append(cid)
                    for o in n.outputs:
                        if o:
                            produced.add(o)
                            nxt.append(o)
        frontier = nxt
        yield _single_exit(view, start, inside)


def _enters(view: StageView, start: str, done: dict[str, str]) -> bool:
    """Whether :func:`_sese_levels` takes any node at its first step below ``start`` (an unmatched core consumer
    whose non-constant inputs all come from ``start``); when it takes none, every level it yields is None."""
    nodes, root, const_derived = view.stage.nodes, view.root, view.const_derived
    for cid, _i, _x in view.consumers.get(start, ()):
        n = nodes[cid]
        if cid in done or n.parent is not None:
            continue
        if all(not x or root.get(x, x) == start or root.get(x, x) in const_derived for x in n.inputs):
            return True
    return False


def _single_exit(view: StageView, start: str, inside: list[str]) -> tuple[list[str], str] | None:
    """(a copy of ``inside``, its one exit tensor) when exactly one tensor leaves ``inside`` and every consumer of
    ``start`` is inside, else None."""
    if not inside:
        return None
    st, consumers = view.stage, view.consumers
    exits = []
    for cid in inside:
        for o in st.nodes[cid].outputs:
            if o and (st.tensors[o].is_graph_output or any(c not in inside for c, _i, _x in consumers.get(o, ()))):
                exits.append(o)
    if len(exits) != 1:
        return None
    # every consumer of start must be inside, or the region is not single-entry
    if any(c not in inside for c, _i, _x in consumers.get(start, ())):
        return None
    return list(inside), exits[0]


def _hop(m: Matching, ra: str, rb: str) -> None:
    """Cross a rewritten piece (e.g. HardSwish -> HardSigmoid+Mul) when direct consumer matching failed.

    Finds single-entry single-exit subgraphs below ``ra`` and ``rb`` (up to 3 steps) whose exit
    tensors feed the same ops, and maps the exits.
    """
    if ra in m.absorbed or any(c in m.node_a2b for c, _i, _x in m.va.consumers.get(ra, [])):
        return
    if not _enters(m.vb, rb, m.node_b2a):  # b has no subgraph below rb at any depth: nothing to pair a's with
        return
    levels_b = _sese_levels(m.vb, rb, m.node_b2a)
    sbs: list[tuple[list[str], str] | None] = []  # b's subgraph per depth, the same for every depth of a's
    for sa in _sese_levels(m.va, ra, m.node_a2b):
        if sa is None:
            continue
        ops_a = consumer_ops(m.va, sa[1])
        for db in (1, 2, 3):
            if len(sbs) < db:
                sbs.append(next(levels_b))
            sb = sbs[db - 1]
            if sb is None:
                continue
            ea, eb = m.root_a(sa[1]), m.root_b(sb[1])
            if ea in m.a2b or eb in m.b2a:
                continue
            ta, tb = m.a.tensors[ea], m.b.tensors[eb]
            same_io = ta.is_graph_output and tb.is_graph_output
            if (ops_a and ops_a == consumer_ops(m.vb, eb)) or same_io:
                a_ops = "+".join(m.a.nodes[x].op_type for x in sa[0])
                b_ops = "+".join(m.b.nodes[x].op_type for x in sb[0])
                m.map(ea, eb, "exact", 0.75, f"single-entry single-exit rewrite {a_ops} -> {b_ops} below {ra!r}")
                return


def propagate(m: Matching) -> None:
    """Work the matching's worklist of root pairs until empty: forward, backward and hop from each pair
    (every new pair joins the worklist)."""
    while m.worklist:
        ra, rb = m.worklist.pop()
        _forward(m, ra, rb)
        _backward(m, ra, rb)
        _hop(m, ra, rb)
