"""What a diff graph draws: the later stage's nodes annotated with their changes, errors and removed nodes.

The result is a :class:`networkx.DiGraph` of drawn items, independent of Graphviz, that
:mod:`graphaudit.render.diffgraph` focuses, collapses and writes as DOT.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..classify import CHANGE_KINDS, Change
from ..findings import Finding
from ..lineage import Alignment, StageView
from ..numeric.summary import TransitionSummary
from ..stage import StageGraph
from ..toolchains.ops import SHORT_OP_NAMES

if TYPE_CHECKING:  # networkx is imported where a graph is built (about 0.2 s of start-up)
    import networkx as nx

__all__ = ["KIND_ORDER", "DiffSource", "build_items"]

#: Kinds from most to least significant (a node with several changes shows the first).
KIND_ORDER = ("unmatched", "replaced", "fused", "modified", "inserted", "removed", "kept")
assert set(KIND_ORDER) == set(CHANGE_KINDS)


@dataclass
class DiffSource:
    """What a diff graph draws: the stages of a pipeline, their alignments and changes, and (optionally) the
    numeric results and findings of the report, passed in by the caller.

    Attributes
    ----------
    stages : list of StageGraph
        The pipeline, in order.
    alignments : list of Alignment
        ``alignments[i]``: ``stages[i] -> stages[i + 1]`` (``Lineage.alignments``).
    changes : list of list of Change
        The classified changes of each alignment.
    numeric : list of TransitionSummary, optional
        ``AuditReport.numeric``: shades nodes by error and marks the first divergence; None without a run.
    findings : list of Finding
        ``AuditReport.findings``: their nodes and tensors seed the automatic focus.
    """

    stages: list[StageGraph]
    alignments: list[Alignment]
    changes: list[list[Change]]
    numeric: list[TransitionSummary] | None = None
    findings: list[Finding] = field(default_factory=list)


@dataclass
class _Note:
    """Change annotation of one node of the drawn stage."""

    kind: str = "kept"
    lines: list[str] = field(default_factory=list)     # "fused: Conv+BatchNormalization -> Conv" ...
    short: list[str] = field(default_factory=list)     # the patterns (with "@<stage>" in a lineage view)
    origin: list[str] = field(default_factory=list)    # node ids of the earliest stage of the view


def _rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def _change_maps(changes: list[Change]) -> tuple[dict[str, Change], dict[str, Change]]:
    by_a: dict[str, Change] = {}
    by_b: dict[str, Change] = {}
    for c in changes:  # a node in two changes (a Relu absorbed into an inserted Q/DQ) takes the more significant
        for n in c.a_nodes:
            if n not in by_a or _rank(c.kind) < _rank(by_a[n].kind):
                by_a[n] = c
        for n in c.b_nodes:
            if n not in by_b or _rank(c.kind) < _rank(by_b[n].kind):
                by_b[n] = c
    return by_a, by_b


class _View:
    """The transitions ``lo .. hi-1`` of a pipeline, drawn on stage ``hi``."""

    def __init__(self, src: DiffSource, lo: int, hi: int, expand: bool):
        self.src, self.lo, self.hi, self.expand = src, lo, hi, expand
        self.stage = src.stages[hi]
        self.view: StageView = src.alignments[hi - 1].view_b
        self.maps = {t: _change_maps(src.changes[t]) for t in range(lo, hi)}
        self.order = {nid: k for k, nid in enumerate(self.stage.nodes)}
        self._notes: dict[str, _Note] = {}

    def label(self, t: int) -> str:
        return f"{self.src.stages[t].name} -> {self.src.stages[t + 1].name}"

    def note(self, nid: str) -> _Note:
        """Trace a node of the drawn stage back to stage ``lo``, collecting the non-kept changes."""
        if nid in self._notes:
            return self._notes[nid]
        note, cur, seen = _Note(), {nid}, set()
        for t in range(self.hi - 1, self.lo - 1, -1):
            by_b = self.maps[t][1]
            prev: set[str] = set()
            for x in sorted(cur):
                c = by_b.get(x)
                if c is None:
                    continue
                prev.update(c.a_nodes)
                if c.kind != "kept" and id(c) not in seen:
                    seen.add(id(c))
                    where = f"{self.label(t)}: " if self.hi - self.lo > 1 else ""
                    note.lines.append(f"{where}{c.kind}: {c.pattern}")
                    note.short.append(f"{c.pattern} @{self.src.stages[t + 1].name}" if where else c.pattern)
                    if _rank(c.kind) < _rank(note.kind):
                        note.kind = c.kind
            cur = prev
        note.origin = sorted(cur)
        self._notes[nid] = note
        return note

    def forward_nodes(self, t: int, nid: str) -> set[str]:
        """Nodes of the drawn stage that node ``nid`` of stage ``t`` became."""
        cur = {nid}
        for s in range(t, self.hi):
            by_a = self.maps[s][0]
            cur = {b for x in cur if x in by_a for b in by_a[x].b_nodes}
        return cur

    def forward_tensor(self, t: int, tensor: str) -> str | None:
        """The tensor of the drawn stage holding the value of ``tensor`` of stage ``t``."""
        cur: str | None = tensor
        for s in range(t, self.hi):
            cur = self.src.alignments[s].b_for(cur) if cur is not None else None
        return cur

    def drawn(self, nid: str) -> bool:
        n = self.stage.nodes[nid]
        if n.parent is not None or self.weightish(n.outputs[0] if n.outputs else ""):
            return False
        return self.expand or nid not in self.view.wrappers

    def weightish(self, tensor: str) -> bool:
        """A weight, a value computed from weights only, or one of those behind wrappers."""
        v = self.view
        return bool(tensor) and (tensor in v.const_derived or v.root.get(tensor, tensor) in v.const_derived)

    def source(self, tensor: str) -> tuple[str | None, tuple[str, ...]]:
        """(key of the drawn item producing ``tensor``, wrapper nodes collapsed on the way)."""
        st, v = self.stage, self.view
        if not tensor or tensor not in st.tensors or self.weightish(tensor):
            return None, ()
        chain: tuple[str, ...] = ()
        name = tensor
        if not self.expand:
            chain, name = v.chain(tensor), v.root.get(tensor, tensor)
        t = st.tensors[name]
        if t.producer is None:
            return (f"in:{name}" if name in st.inputs else None), chain
        p = st.nodes[t.producer]
        while p.parent is not None:
            p = st.nodes[p.parent]
        return f"n:{p.id}", chain


def _badge(v: _View, wrappers: tuple[str, ...]) -> tuple[str, str]:
    """(badge text, most significant change kind) of collapsed wrapper nodes."""
    ops = [v.stage.nodes[w].op_type for w in wrappers]
    text = "/".join(SHORT_OP_NAMES.get(op, op) for op in ops)
    notes = [v.note(w) for w in wrappers]
    kind = min((n.kind for n in notes), key=_rank, default="kept")
    if kind not in ("kept", "inserted", "removed"):  # e.g. a Relu absorbed into this quantization
        what = next(n.short[0] for n in notes if n.kind == kind and n.short)
        text += f" ({what.replace(' into quantization', '')})"
    return text, kind


def _add_edge(g: nx.DiGraph, v: _View, src: str, dst: str, tensor: str, wrappers: tuple[str, ...],
              dashed: bool = False) -> None:
    if src == dst:
        return
    if g.has_edge(src, dst):
        e = g.edges[src, dst]
        if tensor not in e["tensors"]:
            e["tensors"].append(tensor)
        if wrappers and not e["wrappers"]:
            e["wrappers"] = list(wrappers)
            e["badge"], e["badge_kind"] = _badge(v, wrappers)
        return
    badge, bkind = _badge(v, wrappers) if wrappers else ("", "kept")
    g.add_edge(src, dst, tensors=[tensor], wrappers=list(wrappers), badge=badge, badge_kind=bkind, dashed=dashed)


def _add_nodes(g: nx.DiGraph, v: _View) -> None:
    st = v.stage
    for name in st.inputs:
        g.add_node(f"in:{name}", kind="io", op="input", name=name, ids=[], lines=[], origin=[], order=-1,
                   weights=[], tensors=[name])
    for nid, n in st.nodes.items():
        if not v.drawn(nid):
            continue
        note = v.note(nid)
        weights = []
        for x in n.inputs:
            if x and v.weightish(x) and v.view.chain(x):
                text, kind = _badge(v, v.view.chain(x))
                weights.append((text, kind))
        g.add_node(f"n:{nid}", kind=note.kind, op=n.op_type, name=n.name or nid, ids=[nid], lines=note.lines,
                   short=note.short,
                   origin=note.origin, order=v.order[nid], weights=weights, tensors=[o for o in n.outputs if o])
        for x in n.inputs:
            src, chain = v.source(x)
            if src is not None:
                _add_edge(g, v, src, f"n:{nid}", v.view.root.get(x, x), chain)
    for k, name in enumerate(st.outputs):
        key = f"out:{name}"
        g.add_node(key, kind="io", op="output", name=name, ids=[], lines=[], origin=[], order=len(st.nodes) + k,
                   weights=[], tensors=[name])
        src, chain = v.source(name)
        if src is not None:
            _add_edge(g, v, src, key, name, chain)


def _add_ghosts(g: nx.DiGraph, v: _View) -> None:
    """Nodes removed (or unmatched without a counterpart) in the view's transitions, drawn dashed."""
    for t in range(v.lo, v.hi):
        st = v.src.stages[t]
        # a removed quantization wrapper (an HzCalibration the fixed-point stage consumed, a Q/DQ pair folded away)
        # is left out like the wrappers kept, unless --expand: 164 of 271 items of PP-OCR cls's lineage graph were
        # such ghosts; a removed Identity, Dropout or Cast is still drawn
        hidden = () if v.expand else {n for n, kind in v.src.alignments[t].view_a.wrappers.items()
                                      if kind == "quantize"}
        for c in v.src.changes[t]:
            if c.b_nodes or c.kind not in ("removed", "unmatched"):
                continue
            members = [n for n in c.a_nodes if st.nodes[n].parent is None and st.nodes[n].op_type != "Constant"
                       and n not in hidden]
            prefix = f"a{t}:" if v.hi - v.lo > 1 else "a:"
            where = f"{v.label(t)}: " if v.hi - v.lo > 1 else ""
            for nid in members:
                n = st.nodes[nid]
                g.add_node(prefix + nid, kind=c.kind, op=n.op_type, name=n.name or nid, ids=[nid],
                           lines=[f"{where}{c.kind}: {c.pattern}"], origin=[nid],
                           short=[f"{c.pattern} @{v.src.stages[t + 1].name}" if where else c.pattern],
                           order=10**9 + t * 10**6 + n.index,
                           weights=[], tensors=[o for o in n.outputs if o], ghost=True)
            for nid in members:
                n = st.nodes[nid]
                for x in n.inputs:
                    if not x or st.tensors[x].is_param:
                        continue
                    p = st.tensors[x].producer
                    if p in members:
                        _add_edge(g, v, prefix + p, prefix + nid, x, (), dashed=True)
                        continue
                    bx = v.forward_tensor(t, x)
                    src, _chain = v.source(bx) if bx else (None, ())
                    if src is not None and src in g:
                        _add_edge(g, v, src, prefix + nid, x, (), dashed=True)
                for o in n.outputs:
                    if not o:
                        continue
                    for cid, _k in st.tensors[o].consumers:
                        if cid in members:
                            continue
                        for b in v.forward_nodes(t, cid):
                            if f"n:{b}" in g:
                                _add_edge(g, v, prefix + nid, f"n:{b}", o, (), dashed=True)
                    if st.tensors[o].is_graph_output and f"out:{o}" in g:
                        _add_edge(g, v, prefix + nid, f"out:{o}", o, (), dashed=True)


def _num(x) -> float | None:
    """A metric of a :class:`TransitionSummary` (floats, or "inf"/"-inf"/"nan" strings) as a float."""
    try:
        return None if x is None else float(x)
    except (TypeError, ValueError):
        return None


def _worse(cos: float, old: float | None) -> bool:
    """Cosine ``cos`` is worse than ``old`` (NaN, from an all-zero tensor against a non-zero one, is worst)."""
    if old is None or math.isnan(cos):
        return old is None or not math.isnan(old)
    return not math.isnan(old) and cos < old


def _add_numeric(g: nx.DiGraph, v: _View) -> None:
    """Attach per-node error (worst cosine over the view's transitions) and the first divergence."""
    numeric = v.src.numeric
    if not numeric:
        return
    first_done = False
    by_pair = {(nd.a, nd.b): nd for nd in numeric if nd is not None}  # a stage the runtime refused leaves a gap
    for t in range(v.lo, v.hi):
        nd = by_pair.get((v.src.stages[t].name, v.src.stages[t + 1].name))
        if nd is None:
            continue
        g.graph["numeric"] = True
        g.graph.setdefault("threshold", nd.threshold)
        fd = nd.first_divergence
        for te in nd.tensors + ([fd] if fd is not None else []):
            bt = v.forward_tensor(t + 1, te.b_tensor)
            key, _chain = v.source(bt) if bt else (None, ())
            if key is None or key not in g:
                continue
            err = {"cosine": _num(te.cosine), "sqnr_db": _num(te.sqnr_db), "tensor": te.b_tensor,
                   "transition": v.label(t), "change": te.change}
            old = g.nodes[key].get("error")
            if err["cosine"] is not None and (old is None or _worse(err["cosine"], old["cosine"])):
                g.nodes[key]["error"] = err
            if te is fd and not first_done:
                g.nodes[key]["first_divergence"] = err
                g.graph["first_divergence"] = key
                first_done = True


def build_items(src: DiffSource, pair: int | None, expand: bool = False) -> nx.DiGraph:
    """The drawn items of a diff graph, before focus and collapse.

    Parameters
    ----------
    src : DiffSource
    pair : int or None
        ``i`` draws transition ``stages[i] -> stages[i + 1]`` on stage ``i + 1``; ``None`` draws every
        transition on the last stage (the combined lineage view).
    expand : bool
        Draw wrapper nodes (Q/DQ, HzCalibration, Cast, layout Transpose, Identity, HzPreprocess) as
        nodes instead of badges on their tensor's edge.

    Returns
    -------
    networkx.DiGraph
        Keys ``"n:<node id>"`` (nodes of the drawn stage), ``"a:<node id>"`` / ``"a<t>:<node id>"``
        (removed nodes of an earlier stage, attribute ``ghost``), ``"in:<tensor>"``, ``"out:<tensor>"``.
        Node attributes: ``kind``, ``op``, ``name``, ``ids``, ``lines`` (changes), ``origin``,
        ``short`` (the patterns, for labels), ``order``, ``weights`` (badges of weight wrappers), ``tensors``,
        optionally ``error``
        (``{"cosine", "sqnr_db", "tensor", "transition", "change"}``) and ``first_divergence``.
        Edge attributes: ``tensors``, ``wrappers``, ``badge``, ``badge_kind``, ``dashed``.
        Graph attributes: ``numeric`` (bool), ``first_divergence`` (key), ``threshold``, ``title``,
        ``stage`` (the drawn stage's name), ``change_counts`` (Counter of change kinds of the transitions).
    """
    import networkx as nx

    n_pairs = len(src.stages) - 1
    lo, hi = (0, n_pairs) if pair is None else (pair, pair + 1)
    v = _View(src, lo, hi, expand)
    g = nx.DiGraph(numeric=False, first_divergence=None, stage=v.stage.name,
                   title=(" -> ".join(s.name for s in src.stages) if pair is None else v.label(pair)))
    g.graph["change_counts"] = Counter(c.kind for t in range(lo, hi) for c in src.changes[t])
    _add_nodes(g, v)
    _add_ghosts(g, v)
    _add_numeric(g, v)
    return g
