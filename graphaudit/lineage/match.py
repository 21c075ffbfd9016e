"""Tensor and node correspondence between two stages: anchors, then structural propagation.

The algorithm (README.md, "How alignment works"):

1. Anchors: graph inputs and outputs (by name, else by position), same-name tensors whose
   producers are compatible, weights with the same name or the same content hash.
2. Wrappers (QuantizeLinear/DequantizeLinear, HzCalibration, Cast, Identity, layout Transpose,
   HzPreprocess) are looked through: tensors are matched by their *root*.
3. Propagation: from matched tensors, consumers with the same op, the same input slot and
   consistent other inputs are matched, and their outputs with them (forward); producers of
   matched tensors with the same op are matched, and their inputs (backward).
4. When propagation stalls, nodes whose structural signature (op, weight shapes, key
   attributes, neighbourhood) is unique among the unmatched nodes of both stages are matched
   and propagation resumes. Nothing is guessed without a recorded confidence.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field

from ..stage import NodeInfo, StageGraph
from ..toolchains.ops import (ABSORBABLE_ACTIVATIONS, DECOMPOSED_TAILS, FIXED_POINT_TENSOR_SUFFIX, FOLDABLE_OPS,
                              op_class)
from .view import StageView

__all__ = ["TensorMatch", "Matching", "match_stages", "op_class", "ABSORBABLE_ACTIVATIONS", "BASES"]

#: How a tensor pair was established, strongest first: ``io`` (graph input/output), ``name`` (same name,
#: checked against the producers), ``hash`` (same weight content), ``structure`` (propagation through matched
#: nodes, rewrites and signatures).
BASES = ("io", "name", "hash", "structure")

#: Attributes that describe a node's computation; used in structural signatures.
_KEY_ATTRS = ("kernel_shape", "strides", "group", "dilations", "pads", "axis", "axes", "perm", "mode", "transA", "transB")


@dataclass
class TensorMatch:
    """Correspondence of one tensor of stage b to one tensor of stage a.

    ``kind`` is ``"exact"`` (same value expected), ``"quantized"`` (fake-quantized copy),
    ``"converted"`` (Cast), ``"layout"`` (transposed), ``"preprocessed"`` (behind HzPreprocess),
    ``"folded"`` (computed in a, a weight in b), ``"absorbed"`` (a's value is b's wrapper output
    after an activation absorbed into quantization), ``"rescaled"`` (behind an HzCalibration that also
    multiplies each channel: not the same value). ``confidence`` is in [0, 1];
    ``evidence`` says why; ``basis`` how the pair was established (one of :data:`BASES`).
    """

    a: str
    b: str
    kind: str
    confidence: float
    evidence: str
    basis: str = "structure"


@dataclass
class Matching:
    """Mutable state of a two-stage matching (roots only, plus node pairs)."""

    va: StageView
    vb: StageView
    a2b: dict[str, str] = field(default_factory=dict)
    b2a: dict[str, str] = field(default_factory=dict)
    info: dict[str, tuple[str, float, str, str]] = field(default_factory=dict)  # a root -> (kind, conf, evidence, basis)
    absorbed: dict[str, tuple[str, str]] = field(default_factory=dict)  # a tensor -> (b wrapper output, activation node id)
    node_a2b: dict[str, str] = field(default_factory=dict)
    node_b2a: dict[str, str] = field(default_factory=dict)
    node_conf: dict[str, tuple[float, str]] = field(default_factory=dict)  # a node -> (confidence, evidence)
    worklist: list[tuple[str, str]] = field(default_factory=list)

    @property
    def a(self) -> StageGraph:
        return self.va.stage

    @property
    def b(self) -> StageGraph:
        return self.vb.stage

    def map(self, ra: str, rb: str, kind: str, conf: float, evidence: str, basis: str = "structure") -> bool:
        """Record root ``ra`` (stage a) <-> root ``rb`` (stage b); False if either is taken."""
        if ra in self.a2b or rb in self.b2a or ra in self.absorbed:
            return False
        self.a2b[ra], self.b2a[rb] = rb, ra
        self.info[ra] = (kind, conf, evidence, basis)
        if not self.a.tensors[ra].is_param:
            self.worklist.append((ra, rb))
        return True

    def pair_nodes(self, na: str, nb: str, conf: float, evidence: str) -> None:
        self.node_a2b[na], self.node_b2a[nb] = nb, na
        self.node_conf[na] = (conf, evidence)


def _root_a(m: Matching, name: str) -> str:
    return m.va.root.get(name, name)


def _root_b(m: Matching, name: str) -> str:
    return m.vb.root.get(name, name)


def _seed_io(m: Matching) -> None:
    a, b = m.a, m.b
    for names_a, names_b, what in ((a.inputs, b.inputs, "graph input"), (a.outputs, b.outputs, "graph output")):
        common = [n for n in names_a if n in set(names_b)]
        for n in common:
            m.map(_root_a(m, n), _root_b(m, n), "exact", 1.0, f"{what} {n!r} in both", "io")
        rest_a = [n for n in names_a if n not in common]
        rest_b = [n for n in names_b if n not in common]
        if rest_a and len(rest_a) == len(rest_b):
            for na, nb in zip(rest_a, rest_b):
                sa, sb = a.tensors[na].shape, b.tensors[nb].shape
                if sa is None or sb is None or len(sa) == len(sb):
                    m.map(_root_a(m, na), _root_b(m, nb), "exact", 0.8, f"{what} at the same position ({na!r} -> {nb!r})",
                          "io")


def _quantize_output(m: Matching, rb: str) -> str | None:
    """Last tensor of the first QuantizeLinear->DequantizeLinear path hanging below root ``rb`` in b."""
    for wid in m.vb.tree.get(rb, []):
        node = m.b.nodes[wid]
        if m.vb.wrappers[wid] == "quantize" and node.op_type in ("DequantizeLinear", "HzCalibration", "HzDequantize"):
            return node.outputs[0]
    return None


def _name_pairs(m: Matching):
    """(a tensor, b tensor, kind) for tensors named alike: the same name, or b's name with the fixed-point
    suffix (``X_quantized`` in Horizon's quantized stage holds the integer form of ``X``)."""
    a, b = m.a, m.b
    for name, tb in b.tensors.items():
        if name in a.tensors:
            yield name, name, "exact"
        elif name.endswith(FIXED_POINT_TENSOR_SUFFIX) and name[: -len(FIXED_POINT_TENSOR_SUFFIX)] in a.tensors:
            yield name[: -len(FIXED_POINT_TENSOR_SUFFIX)], name, "quantized"


def _seed_names(m: Matching) -> None:
    """Pair tensors named alike, unless the producers say the value moved.

    A name is evidence, not proof: when b's producer was changed by a fold (other weights, more inputs) and
    a's tensor feeds a foldable follower that b no longer shows (BatchNormalization, an elementwise op with a
    constant, an activation), b's tensor holds the value after that follower, and is paired with it
    (hb_mapper keeps the pre-BatchNormalization name on the Conv that absorbed it; docs/HORIZON.md).
    """
    a, b = m.a, m.b
    for an, bn, kind in list(_name_pairs(m)):
        ta, tb = a.tensors[an], b.tensors[bn]
        if ta.is_param or tb.is_param or ta.kind == "missing" or tb.kind == "missing":
            continue
        ra, rb = _root_a(m, an), _root_b(m, bn)
        if ra in m.a2b or rb in m.b2a:
            continue
        pa, pb = a.producer(ra), b.producer(rb)
        if pa is None or pb is None:
            if pa is None and pb is None and a.tensors[ra].kind == "input" and b.tensors[rb].kind == "input":
                m.map(ra, rb, kind, 1.0, f"same name {bn!r}", "name")
            continue  # a value_info entry nothing computes is no tensor to pair
        if op_class(pa) == op_class(pb):
            absorbs = op_class(pb) in _ABSORBING_OPS and _changed(m, pa, pb)
            target, skipped = _skip_fused_followers(m, ra, rb) if absorbs else (ra, 0)
            if skipped:
                m.map(target, rb, kind, 0.9, f"{bn!r} in {b.name} is produced by a {pb.op_type} that absorbed "
                      f"{skipped} follower(s) of {an!r}: it holds the value of {target!r}", "structure")
            else:
                m.map(ra, rb, kind, 1.0, f"same name {bn!r}, both produced by {pa.op_type}", "name")
            continue
        q_out = _quantize_output(m, rb) if pa.op_type in ABSORBABLE_ACTIVATIONS else None
        if q_out is not None and pa.inputs and pa.inputs[0] and kind == "exact":
            # onnxruntime's QDQ quantizer renames the producer's output to the activation's name: b's name-alike is the pre-activation; a's value is the dequantized output.
            pre = _root_a(m, pa.inputs[0])
            m.absorbed[ra] = (q_out, pa.id)
            m.worklist.append((ra, rb))
            m.map(pre, rb, "exact", 0.9,
                  f"{bn!r} in {b.name} is produced by {pb.op_type}: the {pa.op_type} was absorbed into quantization, "
                  f"so it holds the pre-activation {pre!r}", "structure")
            continue
        why = _fusion_keeps_name(m, pa, pb)
        if why:
            target, skipped = (_skip_fused_followers(m, ra, rb) if why == "fused" and op_class(pb) in _ABSORBING_OPS
                               else (ra, 0))
            if skipped:  # e.g. ConvTranspose+Add+BatchNormalization -> ConvTranspose named like the Add output
                m.map(target, rb, kind, 0.85, f"{bn!r} in {b.name} is produced by a {pb.op_type} that absorbed "
                      f"{pa.op_type} and {skipped} follower(s) of {an!r}: it holds the value of {target!r}", "structure")
            else:
                m.map(ra, rb, kind, 0.9, f"same name {bn!r}, produced by {pa.op_type} in {a.name} and {pb.op_type} "
                      f"in {b.name} (fusion keeps the name)", "name")
        # else: a name whose producers explain no rewrite (hb_mapper moves a Softmax across a Reshape and the
        # name stays behind) is left to structural propagation


def _fusion_keeps_name(m: Matching, pa: NodeInfo, pb: NodeInfo, hops: int = 4) -> str:
    """Which rewrite explains why differently produced tensors share a name, so they can hold one value.

    ``"fused"`` when b's producer fused a's producer with ops before it (its op is found on a's data path within
    ``hops`` nodes above: Conv+Relu -> HzSQuantizedConv, Conv+BatchNormalization -> Conv); ``"decomposed"`` when
    one side writes the other's op as a chain ending in the other producer (HardSwish -> ... Mul/Div);
    ``"lut"`` when b's producer is a table lookup (HzLut) of a's single-input op; ``""`` when nothing does.
    """
    cb, ca = op_class(pb), op_class(pa)
    if pb.op_type.startswith(("HzLut", "HzSLut")):
        single = sum(1 for x in pa.inputs if x and _root_a(m, x) not in m.va.const_derived) == 1
        return "lut" if single else ""
    if ca in DECOMPOSED_TAILS.get(cb, ()) or cb in DECOMPOSED_TAILS.get(ca, ()):
        return "decomposed"
    frontier, seen = [pa], {pa.id}
    for _ in range(hops):
        nxt = []
        for n in frontier:
            for x in n.inputs:
                if not x or _root_a(m, x) in m.va.const_derived:
                    continue
                p = m.a.producer(_root_a(m, x))
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


def _changed(m: Matching, pa: NodeInfo, pb: NodeInfo) -> bool:
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
    return any(pa.attributes.get(k) != pb.attributes.get(k) for k in _KEY_ATTRS)


def _seed_params(m: Matching) -> None:
    a, b = m.a, m.b
    for name, ta in a.tensors.items():
        tb = b.tensors.get(name)
        if ta.is_param and tb is not None and tb.is_param:
            m.map(name, name, "exact", 1.0, f"weight {name!r} in both", "name")
    _match_params_by_hash(m, [n for n, t in a.tensors.items() if t.is_param and n not in m.a2b],
                          [n for n, t in b.tensors.items() if t.is_param and n not in m.b2a])


def _match_params_by_hash(m: Matching, cand_a: list[str], cand_b: list[str]) -> None:
    """Map unmatched weights whose (dtype, shape, content hash) is unique on both sides."""
    groups_a: dict[tuple, list[str]] = defaultdict(list)
    groups_b: dict[tuple, list[str]] = defaultdict(list)
    for n in cand_a:
        t = m.a.tensors[n]
        groups_a[(t.dtype, t.shape)].append(n)
    for n in cand_b:
        t = m.b.tensors[n]
        groups_b[(t.dtype, t.shape)].append(n)
    for key, names_a in groups_a.items():
        names_b = groups_b.get(key)
        if not names_b:
            continue
        by_hash_a: dict[str, list[str]] = defaultdict(list)
        by_hash_b: dict[str, list[str]] = defaultdict(list)
        for n in names_a:
            d = m.a.tensors[n].digest()
            if d:
                by_hash_a[d].append(n)
        for n in names_b:
            d = m.b.tensors[n].digest()
            if d:
                by_hash_b[d].append(n)
        for d, la in by_hash_a.items():
            lb = by_hash_b.get(d, [])
            if len(la) == 1 and len(lb) == 1:
                m.map(la[0], lb[0], "exact", 0.95, f"weights {la[0]!r} and {lb[0]!r} have the same content", "hash")


# --- structural propagation -------------------------------------------------------------------

def _input_ok(m: Matching, na: NodeInfo, nb: NodeInfo) -> tuple[bool, float]:
    """Whether every mapped data input of ``na`` corresponds to ``nb``'s input in the same slot.

    Returns (consistent, score). Unmapped inputs are allowed and score less.
    """
    score = 0.0
    for i in range(max(len(na.inputs), len(nb.inputs))):
        xa = na.inputs[i] if i < len(na.inputs) else ""
        xb = nb.inputs[i] if i < len(nb.inputs) else ""
        if not xa or not xb:
            continue  # optional input present on one side only (e.g. a bias added by a fold)
        ra, rb = _root_a(m, xa), _root_b(m, xb)
        pa, pb = m.a.tensors[ra].is_param, m.b.tensors[rb].is_param
        if pa and pb:
            # weights may be shared or de-duplicated by an optimizer: compare shapes, never reject
            sa, sb = m.a.tensors[ra].shape, m.b.tensors[rb].shape
            score += (1 if sa == sb else -1) + (1 if m.a2b.get(ra) == rb else 0)
            continue
        if ra in m.absorbed:
            if _reads_below(m, m.absorbed[ra][0], xb):
                score += 2
                continue
            return False, 0.0
        if ra in m.a2b:
            if m.a2b[ra] != rb:
                return False, 0.0
            score += 2
        elif rb in m.b2a:
            if _folded_before(m, ra) != m.b2a[rb]:
                return False, 0.0
            score += 1  # a foldable op before the node in a was folded into it in b
        elif pa != pb:
            score -= 0.5  # computed on one side, a weight on the other (constant folding)
    return True, score


def _folded_before(m: Matching, ra: str, limit: int = 4) -> str:
    """Step back from a's tensor over foldable producers (BatchNormalization, elementwise with constants) whose
    other inputs are constant: the tensor they were applied to (``ra`` itself when there are none)."""
    cur = ra
    for _ in range(limit):
        p = m.a.producer(cur)
        if p is None or p.op_type not in FOLDABLE_OPS or p.id in m.node_a2b:
            break
        data = [x for x in p.inputs if x and _root_a(m, x) not in m.va.const_derived]
        if len(data) != 1:
            break
        cur = _root_a(m, data[0])
    return cur


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


#: Ops with weights, into which a toolchain folds the constant followers of their output.
_ABSORBING_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}

#: Ops that a toolchain folds into the preceding Conv/Gemm/MatMul when their other inputs are constant.
_FUSIBLE_FOLLOWERS = {"BatchNormalization", "Add", "Sub", "Mul", "Div", "Relu", "Clip", "LeakyRelu"}


def _consumer_ops(view: StageView, root: str) -> list[str]:
    return sorted(op_class(view.stage.nodes[c]) for c, _i, _t in view.consumers.get(root, []))


def _skip_fused_followers(m: Matching, ra: str, rb: str) -> tuple[str, int]:
    """The a tensor that b's output ``rb`` corresponds to, skipping followers fused into b's producer.

    Starting at ``ra``: while the consumers of the a tensor differ (by op class) from the
    consumers of ``rb`` and the a tensor's only consumer is a fusible follower (BatchNormalization,
    an elementwise op with a constant operand, an activation) whose op b does not show after
    ``rb``, step over that follower. Returns (a tensor, number of followers skipped).
    """
    ops_b = _consumer_ops(m.vb, rb)
    cur, skipped = ra, 0
    while skipped < 4:
        cons = m.va.consumers.get(cur, [])
        if _consumer_ops(m.va, cur) == ops_b or len(cons) != 1:
            break
        f = m.a.nodes[cons[0][0]]
        others = [x for k, x in enumerate(f.inputs) if x and k != cons[0][1]]
        if (f.op_type not in _FUSIBLE_FOLLOWERS or op_class(f) in ops_b or f.id in m.node_a2b
                or any(m.va.root.get(x, x) not in m.va.const_derived for x in others)
                or not f.outputs or _root_a(m, f.outputs[0]) in m.a2b):
            break
        cur, skipped = _root_a(m, f.outputs[0]), skipped + 1
    return cur, skipped


def _try_pair(m: Matching, na: NodeInfo, nb: NodeInfo, conf: float, evidence: str) -> None:
    """Pair two nodes and map their outputs and inputs; an output steps over a's followers that b's node
    absorbed only when b's node was changed (a fold changes its weights)."""
    m.pair_nodes(na.id, nb.id, conf, evidence)
    changed = _changed(m, na, nb)
    for i, (xa, xb) in enumerate(zip(na.outputs, nb.outputs)):
        if not xa or not xb:
            continue
        ra, rb = _root_a(m, xa), _root_b(m, xb)
        if rb in m.b2a or ra in m.a2b:
            continue
        target, skipped = _skip_fused_followers(m, ra, rb) if changed else (ra, 0)
        ev = f"output {i} of matched {na.op_type} {na.name or na.id!r}"
        if skipped:
            ev += f", after {skipped} follower(s) fused into it in {m.b.name}"
        m.map(target, rb, "exact", conf * (0.95 if skipped else 1.0), ev)
    for xa, xb in zip(na.inputs, nb.inputs):
        if not xa or not xb:
            continue
        ra, rb = _root_a(m, xa), _root_b(m, xb)
        ta, tb = m.a.tensors[ra], m.b.tensors[rb]
        if ra in m.a2b or rb in m.b2a or ra in m.absorbed:
            continue
        if ta.is_param and tb.is_param:
            m.map(ra, rb, "exact", conf, f"weight in the same slot of matched {na.op_type} {na.name or na.id!r}")
        elif not ta.is_param and tb.is_param:
            m.map(ra, rb, "folded", conf, f"computed in {m.a.name}, constant-folded to weight {rb!r} in {m.b.name}")
        elif not ta.is_param and not tb.is_param:
            m.map(ra, rb, "exact", conf * 0.95, f"input of matched {na.op_type} {na.name or na.id!r}")


def _forward(m: Matching, ra: str, rb: str) -> None:
    cons_a = m.va.consumers.get(ra, [])
    cons_b = m.vb.consumers.get(rb, [])
    if ra in m.absorbed:
        cons_b = [c for c in cons_b if _reads_below(m, m.absorbed[ra][0], c[2])]
    elif m.absorbed:
        below = [out for out, _ in m.absorbed.values() if _root_b(m, out) == rb]
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
            ok, s = _input_ok(m, na, nb)
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
        _try_pair(m, na, m.b.nodes[best[1]], conf, ev)


def _backward(m: Matching, ra: str, rb: str) -> None:
    if ra in m.absorbed:
        return
    pa, pb = m.a.producer(ra), m.b.producer(rb)
    if pa is None or pb is None or pa.id in m.node_a2b or pb.id in m.node_b2a:
        return
    if pa.id in m.va.wrappers or pb.id in m.vb.wrappers or op_class(pa) != op_class(pb):
        return
    if ra not in pa.outputs or rb not in pb.outputs or pa.outputs.index(ra) != pb.outputs.index(rb):
        return
    ok, _ = _input_ok(m, pa, pb)
    if ok:
        _try_pair(m, pa, pb, m.info[ra][1] * 0.95, f"producers of matched tensors {ra!r} / {rb!r}, same op")


def _sese(view: StageView, start: str, done: dict[str, str], depth: int) -> tuple[list[str], str] | None:
    """Small single-entry single-exit subgraph below root ``start``.

    Collects unmatched core nodes reachable from ``start`` in at most ``depth`` steps whose
    non-constant inputs all come from ``start`` or from inside; returns (node ids, exit tensor)
    when exactly one tensor leaves the set, else None.
    """
    st = view.stage
    inside: list[str] = []
    produced = {start}
    frontier = [start]
    for _ in range(depth):
        nxt = []
        for t in frontier:
            for cid, _i, _x in view.consumers.get(t, []):
                n = st.nodes[cid]
                if cid in inside or cid in done or n.parent is not None:
                    continue
                if all(not x or view.root.get(x, x) in produced or view.root.get(x, x) in view.const_derived
                       for x in n.inputs):
                    inside.append(cid)
                    for o in n.outputs:
                        if o:
                            produced.add(o)
                            nxt.append(o)
        frontier = nxt
    if not inside:
        return None
    exits = []
    for cid in inside:
        for o in st.nodes[cid].outputs:
            if o and (st.tensors[o].is_graph_output or any(c not in inside for c, _i, _x in view.consumers.get(o, []))):
                exits.append(o)
    if len(exits) != 1:
        return None
    # every consumer of start must be inside, or the region is not single-entry
    if any(c not in inside for c, _i, _x in view.consumers.get(start, [])):
        return None
    return inside, exits[0]


def _hop(m: Matching, ra: str, rb: str) -> None:
    """Cross a rewritten piece (e.g. HardSwish -> HardSigmoid+Mul) when direct consumer matching failed.

    Finds single-entry single-exit subgraphs below ``ra`` and ``rb`` (up to 3 steps) whose exit
    tensors feed the same ops, and maps the exits.
    """
    if ra in m.absorbed or any(c in m.node_a2b for c, _i, _x in m.va.consumers.get(ra, [])):
        return
    for da in (1, 2, 3):
        sa = _sese(m.va, ra, m.node_a2b, da)
        if sa is None:
            continue
        ops_a = _consumer_ops(m.va, sa[1])
        for db in (1, 2, 3):
            sb = _sese(m.vb, rb, m.node_b2a, db)
            if sb is None:
                continue
            ea, eb = _root_a(m, sa[1]), _root_b(m, sb[1])
            if ea in m.a2b or eb in m.b2a:
                continue
            ta, tb = m.a.tensors[ea], m.b.tensors[eb]
            same_io = ta.is_graph_output and tb.is_graph_output
            if (ops_a and ops_a == _consumer_ops(m.vb, eb)) or same_io:
                a_ops = "+".join(m.a.nodes[x].op_type for x in sa[0])
                b_ops = "+".join(m.b.nodes[x].op_type for x in sb[0])
                m.map(ea, eb, "exact", 0.75, f"single-entry single-exit rewrite {a_ops} -> {b_ops} below {ra!r}")
                return


def _propagate(m: Matching) -> None:
    while m.worklist:
        ra, rb = m.worklist.pop()
        _forward(m, ra, rb)
        _backward(m, ra, rb)
        _hop(m, ra, rb)


# --- structural signatures (resume when propagation stalls) ------------------------------------

def _base_signature(view: StageView, n: NodeInfo) -> str:
    """Op class, shapes of weights of rank >= 2 (biases and BN folds change 1-D ones), key attributes."""
    st = view.stage
    params = []
    for x in n.inputs:
        if x and view.is_param_root(x):
            shape = st.tensors[view.root[x]].shape
            if shape is not None and len(shape) >= 2:
                params.append(shape)
        elif x:
            params.append("~")
    attrs = tuple((k, repr(n.attributes.get(k))) for k in _KEY_ATTRS if k in n.attributes)
    return f"{op_class(n)}|{params}|{attrs}"


def _signatures(view: StageView, skip: set[str], rounds: int = 2) -> dict[str, str]:
    """Weisfeiler-Lehman style signatures of the core nodes not in ``skip``.

    Round 0 is op class, weight shapes and key attributes; each round hashes in the sorted
    signatures of data predecessors and successors (looking through wrappers).
    """
    st = view.stage
    nodes = [n for n in view.core_nodes() if n.id not in skip and not (n.op_type == "Constant")]
    sig = {n.id: _base_signature(view, n) for n in nodes}
    for _ in range(rounds):
        new = {}
        for n in nodes:
            preds = []
            for x in n.inputs:
                if x and not view.is_param_root(x):
                    p = st.producer(view.root[x])
                    preds.append(sig.get(p.id, p.op_type) if p is not None else "input")
            succs = []
            for x in n.outputs:
                for cid, _i, _t in view.consumers.get(x, []):
                    succs.append(sig.get(cid, st.nodes[cid].op_type))
            h = hashlib.blake2b(digest_size=12)
            h.update(sig[n.id].encode())
            h.update(repr(preds).encode())
            h.update(repr(sorted(succs)).encode())
            new[n.id] = h.hexdigest()
        sig = new
    return sig


def _seed_signatures(m: Matching) -> int:
    """Match core nodes whose signature is unique among unmatched nodes on both sides."""
    added = 0
    left_a = any(n.id not in m.node_a2b and n.op_type != "Constant" for n in m.va.core_nodes())
    left_b = any(n.id not in m.node_b2a and n.op_type != "Constant" for n in m.vb.core_nodes())
    if not (left_a and left_b):
        return 0
    for rounds in (2, 1, 0):
        sa = _signatures(m.va, set(m.node_a2b), rounds)
        sb = _signatures(m.vb, set(m.node_b2a), rounds)
        inv_a: dict[str, list[str]] = defaultdict(list)
        inv_b: dict[str, list[str]] = defaultdict(list)
        for k, s in sa.items():
            inv_a[s].append(k)
        for k, s in sb.items():
            inv_b[s].append(k)
        for s, la in inv_a.items():
            lb = inv_b.get(s, [])
            if len(la) != 1 or len(lb) != 1 or la[0] in m.node_a2b or lb[0] in m.node_b2a:
                continue
            na, nb = m.a.nodes[la[0]], m.b.nodes[lb[0]]
            ok, _ = _input_ok(m, na, nb)
            if not ok:
                continue
            _try_pair(m, na, nb, 0.7 + 0.1 * rounds,
                      f"unique structural signature ({na.op_type}, weight shapes, attributes, {rounds}-hop neighbourhood)")
            added += 1
        if added:
            return added
    return added


def match_stages(va: StageView, vb: StageView) -> Matching:
    """Compute tensor and node correspondences between stage a (earlier) and b (later).

    Returns the :class:`Matching` (roots only; wrapper outputs are derived by the caller).
    Pure: reads the views, writes nothing.
    """
    m = Matching(va, vb)
    _seed_io(m)
    _seed_params(m)
    _seed_names(m)
    _propagate(m)
    for _ in range(50):
        if not _seed_signatures(m):
            break
        _propagate(m)
    return m
