"""Pairwise alignment of two stages: tensor map, node regions, wrapper differences, coverage."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import StagesUnrelatedError
from ..stage import PARAM_KINDS, StageGraph
from ..toolchains.ops import op_class
from .match import match_stages
from .matching import Matching, TensorMatch
from .view import StageView

__all__ = ["Region", "WrapperDiff", "Alignment", "align"]

_WRAPPER_MATCH_KIND = {"quantize": "quantized", "convert": "converted", "layout": "layout",
                       "preprocess": "preprocessed", "identity": "exact", "rescale": "rescaled"}


@dataclass(slots=True)
class Region:
    """Nodes of stage a and of stage b that lie between the same matched tensors.

    ``a_nodes`` / ``b_nodes`` are node ids in file order; ``inputs`` / ``outputs`` are the
    boundary tensors of stage a (roots) that the region reads / writes, ``b_inputs`` /
    ``b_outputs`` the same for stage b.
    """

    a_nodes: list[str]
    b_nodes: list[str]
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    b_inputs: list[str] = field(default_factory=list)
    b_outputs: list[str] = field(default_factory=list)


@dataclass
class WrapperDiff:
    """Wrapper nodes (QDQ, HzCalibration, Cast, Identity, layout Transpose, HzPreprocess) on one value.

    ``a_root`` / ``b_root`` are the wrapped tensors (``None`` when the value has no
    counterpart); ``kept`` pairs (a wrapper, b wrapper), ``removed`` lists a-only wrappers,
    ``inserted`` b-only wrappers.
    """

    a_root: str | None
    b_root: str | None
    kept: list[tuple[str, str]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    inserted: list[str] = field(default_factory=list)


@dataclass
class Alignment:
    """Alignment of stage ``a`` (earlier) with stage ``b`` (later).

    Attributes
    ----------
    tensor_map : dict[str, TensorMatch]
        b tensor -> its a counterpart, for every b tensor that has one (wrapper outputs included).
    a_to_b : dict[str, list[str]]
        a tensor -> b tensors mapped to it.
    node_pairs : dict[str, str]
        a node id -> b node id, for nodes matched one to one by structure or name.
    node_confidence : dict[str, tuple[float, str]]
        a node id -> (confidence, evidence) of its pairing.
    regions : list[Region]
    wrappers : list[WrapperDiff]
    absorbed : dict[str, tuple[str, str]]
        a tensor -> (b wrapper output holding its value, a activation node id) for activations
        absorbed into quantization (onnxruntime's QDQ quantizer renames the producer's output to the activation's name).
    """

    a: StageGraph
    b: StageGraph
    tensor_map: dict[str, TensorMatch]
    a_to_b: dict[str, list[str]]
    node_pairs: dict[str, str]
    node_confidence: dict[str, tuple[float, str]]
    regions: list[Region]
    wrappers: list[WrapperDiff]
    absorbed: dict[str, tuple[str, str]]
    view_a: StageView = field(repr=False, default=None)  # type: ignore[assignment]
    view_b: StageView = field(repr=False, default=None)  # type: ignore[assignment]
    _by_activation: dict[str, str] | None = field(init=False, repr=False, default=None, compare=False)

    def absorbed_output(self, node_id: str) -> str | None:
        """The a tensor written by activation node ``node_id`` when that activation was absorbed into quantization
        (the inverse of :attr:`absorbed`, built once), else None."""
        if self._by_activation is None:
            self._by_activation = {act: t for t, (_out, act) in self.absorbed.items()}
        return self._by_activation.get(node_id)

    def b_for(self, a_tensor: str) -> str | None:
        """The b tensor that b's consumers read in place of ``a_tensor``, or None.

        Preference: the output of an absorbed activation's quantization; else the deepest
        quantized (fake-quantized) copy; else the exact value; else any counterpart.
        """
        if a_tensor in self.absorbed:
            return self.absorbed[a_tensor][0]
        cands = [c for c in self.a_to_b.get(a_tensor, []) if c in self.tensor_map]
        if not cands:
            return None
        quantized = [c for c in cands if self.tensor_map[c].kind == "quantized"]
        if quantized:
            return max(quantized, key=lambda c: self.view_b.depth.get(c, 0) if self.view_b else 0)
        for c in cands:
            if self.tensor_map[c].kind == "exact":
                return c
        return cands[0]


def _find(parent: list[int], x: int) -> int:
    """Root of ``x`` in a union-find forest over integer ids (path halving)."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def _union(parent: list[int], x: int, y: int) -> None:
    rx, ry = _find(parent, x), _find(parent, y)
    if rx != ry:
        parent[max(rx, ry)] = min(rx, ry)


def _id(ids: dict[str, int], key: str, parent: list[int]) -> int:
    """The integer id of ``key``, a new one (its own root) when it has none yet."""
    i = ids.get(key)
    if i is None:
        i = ids[key] = len(parent)
        parent.append(i)
    return i


def _group_nodes(view: StageView, mapped: set[str], ids: dict[str, int], parent: list[int]) -> None:
    """Union core nodes (integer ids ``ids``) connected through tensors that have no counterpart (unmapped roots)."""
    st = view.stage
    for n in view.core_nodes():
        i = ids[n.id]
        for out in n.outputs:
            if not out or out in mapped:
                continue
            for cid, _idx, _t in view.consumers.get(out, ()):
                if st.nodes[cid].parent is None:
                    _union(parent, i, ids[cid])


def _kind_of(kinds: frozenset, base: str) -> str:
    if not kinds:
        return base
    wk = next((k for k in ("rescale", "quantize", "layout", "convert", "preprocess") if k in kinds), "identity")
    return _WRAPPER_MATCH_KIND[wk] if base == "exact" else base


#: Wrapper kinds whose output holds its input's value (up to quantization noise or dtype).
_SAME_VALUE = frozenset({"identity", "quantize", "convert"})


def _tensor_map(m: Matching, wrappers: list[WrapperDiff]) -> tuple[dict[str, TensorMatch], dict[str, list[str]]]:
    """b tensor -> a counterpart. Roots map through the matching; a wrapper output maps to the output of
    the nearest wrapper above it that both stages keep (e.g. HzPreprocess), else to the a root, with the
    kind of the wrappers in between (quantized, converted, layout, preprocessed)."""
    va, vb = m.va, m.vb
    a_nodes, b_nodes = va.stage.nodes, vb.stage.nodes
    kept_b = {xb: xa for w in wrappers for xa, xb in w.kept}
    # the roots first (their match kind is the matching's), then each wrapper output as its wrapper is reached;
    # anchor: wrapper output -> (a tensor, wrapper kinds since that anchor, base kind, confidence, evidence, basis),
    # a root's anchor read from the matching when a wrapper asks for it (most roots have none below them)
    none = frozenset()
    info, b2a = m.info, m.b2a
    tmap: dict[str, TensorMatch] = {}
    for rb, ra in b2a.items():
        kind, conf, ev, basis = info[ra]
        tmap[rb] = TensorMatch(ra, rb, kind, conf, ev, basis)
    anchor: dict[str, tuple[str, frozenset, str, float, str, str]] = {}
    a_via, b_via = va.via, vb.via
    grown: dict[tuple[frozenset, str], frozenset] = {}  # (kinds, kind) -> kinds | {kind}: one set per pair
    kind_of: dict[tuple[frozenset, str], str] = {}  # (wrapper kinds, base kind) -> match kind (_kind_of)
    for nid, wkind in vb.wrappers.items():  # file order is topological: inputs are resolved before outputs
        node = b_nodes[nid]
        out = node.outputs[0]
        if b_via.get(out) != nid:
            continue
        xa = kept_b.get(nid) if kept_b else None
        if xa is not None and a_via.get(a_nodes[xa].outputs[0]) == xa:
            a_t, ev = a_nodes[xa].outputs[0], f"output of {node.op_type} kept in both stages"
            anchor[out] = (a_t, none, "exact", 0.95, ev, "structure")
            tmap[out] = TensorMatch(a_t, out, "exact", 0.95, ev, "structure")
            continue
        inp = node.inputs[0]
        up = anchor.get(inp)
        if up is None:
            ra = b2a.get(inp)
            if ra is None:
                continue
            a_t, kinds = ra, none
            base, conf, ev, basis = info[ra]
        else:
            a_t, kinds, base, conf, ev, basis = up
        k = grown.get((kinds, wkind))
        if k is None:
            k = grown[(kinds, wkind)] = kinds | {wkind}
        ev = f"{ev}; behind {node.op_type}"
        anchor[out] = (a_t, k, base, conf, ev, basis)
        match_kind = kind_of.get((k, base))
        if match_kind is None:
            match_kind = kind_of[(k, base)] = _kind_of(k, base)
        tmap[out] = TensorMatch(a_t, out, match_kind, conf, ev, basis)
    for ra, (out_b, act) in m.absorbed.items():
        tmap[out_b] = TensorMatch(ra, out_b, "absorbed", 0.9,
                                  f"{a_nodes[act].op_type} {act!r} absorbed into quantization; value is the dequantized output",
                                  "structure")
    a_to_b: dict[str, list[str]] = {}
    for name, tm in tmap.items():
        lst = a_to_b.get(tm.a)
        if lst is None:
            a_to_b[tm.a] = [name]
        else:
            lst.append(name)
    # a-side wrapper outputs (e.g. an Identity removed in b) map through their root too, when the wrappers in
    # between keep the value (a layout Transpose or an HzPreprocess does not: MTCNN ONet's NHWC preprocessing
    # transposes, removed by hb_mapper's optimizer, would pair the normalized value with the raw graph input)
    a_root, a_kinds, a2b = va.root, va.kinds, m.a2b
    # a tensor whose root is another one is behind a wrapper (none when a has no wrapper: no scan of its tensors)
    for name in list(filter(a_via.__contains__, va.stage.tensors)) if a_via else ():
        ra = a_root.get(name, name)
        if name != ra and ra in a2b and name not in a_to_b and a_kinds.get(name, none) <= _SAME_VALUE:
            a_to_b[name] = [a2b[ra]]
    return tmap, a_to_b


def _wrapper_diffs(m: Matching) -> list[WrapperDiff]:
    diffs: list[WrapperDiff] = []
    seen_b: set[str] = set()
    for ra, wa in m.va.tree.items():
        rb = m.a2b.get(ra)
        wb = m.vb.tree.get(rb, []) if rb is not None else []
        if rb is not None:
            seen_b.add(rb)
        diffs.append(_diff_chains(m, ra, rb, wa, wb))
    for rb, wb in m.vb.tree.items():
        if rb in seen_b:
            continue
        diffs.append(_diff_chains(m, m.b2a.get(rb), rb, [], wb))
    return [d for d in diffs if d.kept or d.removed or d.inserted]


def _diff_chains(m: Matching, ra: str | None, rb: str | None, wa: list[str], wb: list[str]) -> WrapperDiff:
    """Pair a's and b's wrappers on one value by (op class, depth on the chain), then by op class alone
    (HzPreprocess pairs with the quantized stage's HzSQuantizedPreprocess)."""
    d = WrapperDiff(ra, rb)
    if not wa or not wb:  # nothing to pair: every wrapper is removed or inserted
        d.removed, d.inserted = list(wa), list(wb)
        return d
    by_depth: dict[tuple[str, int], list[str]] = defaultdict(list)
    by_op: dict[str, list[str]] = defaultdict(list)
    for y in reversed(wb):
        nb = m.b.nodes[y]
        by_depth[(op_class(nb), m.vb.depth.get(nb.outputs[0], 0))].append(y)
        by_op[op_class(nb)].append(y)
    used: set[str] = set()

    def take(stack: list[str]) -> str | None:
        while stack:
            y = stack.pop()
            if y not in used:
                return y
        return None

    for x in wa:
        na = m.a.nodes[x]
        hit = take(by_depth[(op_class(na), m.va.depth.get(na.outputs[0], 0))]) or take(by_op[op_class(na)])
        if hit is None:
            d.removed.append(x)
        else:
            used.add(hit)
            d.kept.append((x, hit))
    d.inserted = [y for y in wb if y not in used]
    return d


def _regions(m: Matching) -> list[Region]:
    """Core nodes of a and b grouped by union-find over integer ids (a's core nodes first, then b's, in file order):
    nodes joined by unmapped tensors, matched node pairs, and an a node with the b producer of its mapped output."""
    a_core = [n.id for n in m.va.core_nodes()]
    b_core = [n.id for n in m.vb.core_nodes()]
    ids_a = {nid: i for i, nid in enumerate(a_core)}
    ids_b = {nid: i for i, nid in enumerate(b_core, len(a_core))}
    parent = list(range(len(a_core) + len(b_core)))
    _group_nodes(m.va, set(m.a2b) | set(m.absorbed), ids_a, parent)
    _group_nodes(m.vb, set(m.b2a), ids_b, parent)
    absorbed_nodes = {act for _out, act in m.absorbed.values()}
    for na, nb in m.node_a2b.items():  # a pair outside the core (a subgraph's producer) joins as an extra id
        _union(parent, _id(ids_a, na, parent), _id(ids_b, nb, parent))
    a_nodes, a2b, b_wrappers = m.a.nodes, m.a2b, m.vb.wrappers
    for n_id in a_core:
        if n_id in absorbed_nodes:
            continue
        for out in a_nodes[n_id].outputs:
            rb = a2b.get(out)
            if rb is None:
                continue
            pb = m.b.producer(rb)
            if pb is not None and pb.id not in b_wrappers and pb.parent is None:
                _union(parent, ids_a[n_id], ids_b[pb.id])
    groups: dict[int, Region] = {}  # union-find root -> its region, in order of first node
    for i, n_id in enumerate(a_core):
        r = i if parent[i] == i else _find(parent, i)  # a node alone in its group is its own root
        g = groups.get(r)
        if g is None:
            g = groups[r] = Region([], [])
        g.a_nodes.append(n_id)
    for i, n_id in enumerate(b_core, len(a_core)):
        r = i if parent[i] == i else _find(parent, i)
        g = groups.get(r)
        if g is None:
            g = groups[r] = Region([], [])
        g.b_nodes.append(n_id)
    regions = list(groups.values())
    for r, (ins, outs) in zip(regions, _boundaries(m.va, [r.a_nodes for r in regions])):
        r.inputs, r.outputs = ins, outs
    for r, (ins, outs) in zip(regions, _boundaries(m.vb, [r.b_nodes for r in regions])):
        r.b_inputs, r.b_outputs = ins, outs
    return regions


def _boundaries(view: StageView, groups: list[list[str]]) -> list[tuple[list[str], list[str]]]:
    """(input roots, output tensors) of each group of node ids of ``view``'s stage, in first-seen order: the
    non-weight roots a node of the group reads that no node of the group writes, and the tensors it writes that
    are graph outputs or read outside the group. One call per stage (the regions of the 100k-node pair: 75,000)."""
    nodes, tensors, root, consumers = view.stage.nodes, view.stage.tensors, view.root, view.consumers
    root_of, consumers_of = root.get, consumers.get
    out = []
    for node_ids in groups:
        inside = set(node_ids)
        ins: dict[str, None] = {}  # ordered sets: first-seen order
        outs: dict[str, None] = {}
        for nid in node_ids:
            n = nodes[nid]
            for x in n.inputs:
                if not x:
                    continue
                r = root_of(x, x)
                t = tensors[r]
                p = t.producer
                if (p is None or p not in inside) and t.kind not in PARAM_KINDS and r not in ins:
                    ins[r] = None
            for x in n.outputs:
                if not x or x in outs:
                    continue
                if tensors[x].is_graph_output:
                    outs[x] = None
                    continue
                for c, _i, _t in consumers_of(x, ()):
                    if c not in inside:
                        outs[x] = None
                        break
        out.append((list(ins), list(outs)))
    return out


def _core_count(view: StageView) -> int:
    return sum(1 for n in view.core_nodes() if n.op_type != "Constant")


def align(a: StageGraph, b: StageGraph, check_related: bool = True) -> Alignment:
    """Align stage ``a`` (earlier in the pipeline) with stage ``b`` (later).

    Parameters
    ----------
    a, b : StageGraph
    check_related : bool
        Raise :class:`StagesUnrelatedError` when the two stages share no structure.

    Returns
    -------
    Alignment

    Raises
    ------
    StagesUnrelatedError
        Fewer than 5% of the compute nodes (and none beyond the graph inputs/outputs) could
        be matched one to one: the two files are not stages of one pipeline.
    """
    va, vb = StageView.of(a), StageView.of(b)
    m = match_stages(va, vb)
    if check_related:
        smaller = min(_core_count(va), _core_count(vb))
        paired = sum(1 for n in m.node_a2b if a.nodes[n].op_type != "Constant")
        if smaller and paired < max(1, 0.05 * smaller):
            raise StagesUnrelatedError(
                f"{a.path} and {b.path}: the stages share no structure ({paired} of {smaller} nodes could be matched); "
                "are they stages of the same model, given in pipeline order?")
    wrappers = _wrapper_diffs(m)
    tmap, a_to_b = _tensor_map(m, wrappers)
    return Alignment(a=a, b=b, tensor_map=tmap, a_to_b=a_to_b, node_pairs=dict(m.node_a2b),
                     node_confidence=dict(m.node_conf), regions=_regions(m), wrappers=wrappers,
                     absorbed=dict(m.absorbed), view_a=va, view_b=vb)
