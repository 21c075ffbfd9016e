"""Annotated diff graph of a stage pair or of the whole lineage, as DOT, SVG or PNG (Graphviz).

Usage::

    from graphaudit.render.diffgraph import build_diff_graph, DiffGraph, DiffSource, GraphvizMissingError
    src = DiffSource(stages, alignments, changes, numeric=report.numeric, findings=report.findings)
    g = build_diff_graph(src, pair=0, focus=None, radius=2, expand=False, max_nodes=300)
    g.dot_source()          # DOT text, always
    g.svg()                 # SVG text; GraphvizMissingError when `dot` is not installed
    g.write("out.svg")      # .dot/.gv, .svg or .png, written atomically
    g.node_count, g.kind_counts, g.focused, g.collapsed

What is drawn: the nodes of the later stage (``stages[pair + 1]``; the last stage for the lineage
view, ``pair=None``), filled by change kind (kept nodes plain), with the nodes an earlier stage lost
drawn dashed. Wrapper nodes (QuantizeLinear/DequantizeLinear, HzCalibration, Cast, layout Transpose,
Identity, HzPreprocess) are collapsed into a badge on the edge of the tensor they wrap (on the node,
prefixed ``w:``, for weights) unless ``expand``. When numeric results are given (``DiffSource.numeric``,
from :func:`graphaudit.measure.measure`), each node gets a row shaded by the SQNR of its output and the first
divergence is outlined in red.

SVG hooks for embedding pages: every drawn node has ``id="<prefix><key>"`` (prefix ``ga<pair>-`` or
``ga-lineage-``; key ``n:<node id>`` for nodes of the drawn stage, ``a:<node id>`` / ``a<t>:<node id>``
for removed nodes of an earlier stage, ``in:<tensor>`` / ``out:<tensor>`` for graph inputs and outputs,
``chain:<first key>`` for collapsed chains) and ``class="ga-node ga-<kind>"`` (plus ``ga-first-divergence``,
``ga-focus``); Graphviz writes them on the node's ``<g>`` element, after its own ``node`` class, with
the key in the ``<title>`` child and a tooltip (op type, node name, change pattern, origin, error) in
``xlink:title``. The legend is ``id="<prefix>legend"``, ``class="ga-legend"``. Graphviz writes ``-`` in
ids and classes as the character reference ``&#45;``: parse the SVG (an inline ``<svg>`` in HTML is
decoded by the browser, so ``querySelectorAll(".ga-fused")`` works) rather than searching its text.
"""

from __future__ import annotations

import math
import os
import shutil
from collections import Counter
from pathlib import Path

import graphviz
import networkx as nx
from graphviz.quoting import a_list, quote

from ..errors import GraphAuditError, GraphvizMissingError
from ..fileio import atomic_write
from .diffmodel import KIND_ORDER, DiffSource, build_items
from .text import printable
from .diffstyle import FIRST_DIVERGENCE_COLOR, KIND_COLORS, SQNR_BANDS, legend_label, node_label, node_tooltip
from .graphview import collapse_chains, neighbourhood

__all__ = ["build_diff_graph", "DiffGraph", "DiffSource", "GraphvizMissingError", "GraphvizFailedError", "KIND_COLORS", "SQNR_BANDS", "INSTALL_HINT",
           "DEFAULT_MAX_NODES", "RANKDIRS", "MIN_CHAIN", "SEEDS_PER_PATTERN", "WORST_REGIONS",
           "picture_format"]

#: How to get the ``dot`` program.
INSTALL_HINT = ("install Graphviz (Debian/Ubuntu: sudo apt-get install graphviz; Fedora: sudo dnf install graphviz; "
                "macOS: brew install graphviz; conda: conda install -c conda-forge graphviz), or write a .dot file")

#: Drawn nodes above which the view focuses on the findings automatically.
DEFAULT_MAX_NODES = 300

#: Layout directions of the diff graph (Graphviz ``rankdir``): top to bottom (default), left to right.
RANKDIRS = ("TB", "LR")

#: Shortest chain of kept nodes that is collapsed into one node.
MIN_CHAIN = 3

#: Worst isolated changes (per transition) that the automatic focus centres on.
WORST_REGIONS = 5

#: Instances of one change pattern that the automatic focus centres on.
SEEDS_PER_PATTERN = 3

def _resolve(g: nx.DiGraph, name: str) -> list[str]:
    """Keys of drawn items that a node or tensor name designates (exact key, node id/name, origin, tensor)."""
    for key in (name, f"n:{name}", f"a:{name}", f"in:{name}", f"out:{name}"):
        if key in g:
            return [key]
    hits = [k for k, d in g.nodes(data=True) if name in d.get("ids", ()) or d.get("name") == name]
    hits = hits or [k for k, d in g.nodes(data=True) if name in d.get("tensors", ())]
    hits = hits or [u for u, _v, d in g.edges(data=True) if name in d.get("tensors", ())]
    hits = hits or [k for k, d in g.nodes(data=True) if name in d.get("origin", ())]
    if not hits:  # a name given in another case: accepted when it designates exactly one name
        folded = {n for n in _names(g) if n.lower() == name.lower()}
        if len(folded) == 1:
            return _resolve(g, folded.pop())
    return sorted(set(hits))


def _names(g: nx.DiGraph) -> set[str]:
    """Every node id, node name, origin node and tensor name of the drawn items (what --focus accepts)."""
    out: set[str] = set()
    for _k, d in g.nodes(data=True):
        out.update(x for x in (*d.get("ids", ()), d.get("name"), *d.get("tensors", ()), *d.get("origin", ())) if x)
    for _u, _v, d in g.edges(data=True):
        out.update(d.get("tensors", ()))
    return out


def _pattern_counts(g: nx.DiGraph) -> Counter:
    """Drawn nodes per change (first change line) among changed nodes."""
    return Counter(f'{d["kind"]}: {d["short"][0]}' for _k, d in g.nodes(data=True)
                   if d.get("kind") in KIND_ORDER and d["kind"] != "kept" and d.get("short"))


def _auto_seeds(g: nx.DiGraph, src: DiffSource, pair: int | None) -> list[str]:
    """Focus seeds by priority: first divergence, worst errors, worst isolated changes, findings' locations,
    then a few instances of each change pattern by kind."""
    seeds: list[str] = []
    if g.graph.get("first_divergence"):
        seeds.append(g.graph["first_divergence"])
    thr = g.graph.get("threshold") or 1.0
    errs = [(d["error"]["cosine"], k) for k, d in g.nodes(data=True)
            if d.get("error") and d["error"].get("cosine") is not None and not d["error"]["cosine"] >= thr]
    errs = [(-2.0 if math.isnan(c) else c, k) for c, k in errs]
    seeds += [k for _c, k in sorted(errs)[:20]]
    numeric = src.numeric or []
    st = src.stages
    for i in (range(len(st) - 1) if pair is None else [pair]):
        pair_names = (st[i].name, st[i + 1].name) if i + 1 < len(st) else None
        match = [t for t in numeric if t is not None and (t.a, t.b) == pair_names]  # a refused stage leaves a gap
        regions = match[0].worst_regions if match else []
        for r in regions[:WORST_REGIONS]:  # the changes that lose most on their own (isolated error)
            hits = [f"n:{x}" for x in r.b_nodes if f"n:{x}" in g]
            hits += [k for a_t, _b_t in r.outputs for k in _resolve(g, a_t)[:1]]
            seeds += hits[:2]
    names = {s.name for s in st} if pair is None else {st[pair].name, st[pair + 1].name,
                                                       f"{st[pair].name} -> {st[pair + 1].name}"}
    for f in src.findings:
        if f.stage in names or f.stage == "":
            for where in ("node", "tensor"):
                if isinstance(f.location.get(where), str):
                    seeds += _resolve(g, f.location[where])[:3]
    changed = sorted((KIND_ORDER.index(d["kind"]), d.get("order", 0), k) for k, d in g.nodes(data=True)
                     if d.get("kind") in KIND_ORDER and d["kind"] != "kept")
    per_pattern: Counter = Counter()
    for _r, _o, k in changed:  # a few instances of each change pattern, not 1,000 copies of one fusion
        pattern = (g.nodes[k].get("short") or [g.nodes[k]["kind"]])[0]
        per_pattern[pattern] += 1
        if per_pattern[pattern] <= SEEDS_PER_PATTERN:
            seeds.append(k)
    return list(dict.fromkeys(seeds))


def _dot_name(key: str) -> str:
    """A node key as a DOT node name: control characters escaped (not XML in the SVG), and a trailing backslash
    kept off the closing quote (DOT would read it as an escaped quote)."""
    s = _short(printable(key))
    return s + "\u200b" if s.endswith("\\") else s


#: Graphviz refuses quoted strings over 16,384 characters: longer names are cut and made unique by a hash.
MAX_DOT_STRING = 4000


def _short(s: str) -> str:
    if len(s) <= MAX_DOT_STRING:
        return s
    import hashlib

    return s[:MAX_DOT_STRING - 20] + "\u2026#" + hashlib.sha1(s.encode("utf-8", "replace")).hexdigest()[:12]


def _dot_text(text: str, limit: int = 500) -> str:
    """Tooltip text for DOT: control characters escaped, backslashes literal (an escString), at most ``limit``."""
    t = printable(text)
    return (t if len(t) <= limit else t[:limit - 1] + "\u2026").replace("\\", "\\\\")


class GraphvizFailedError(GraphAuditError):
    """Graphviz ``dot`` ran but failed (or wrote nothing) on a diff graph; the message holds its first error line."""


class DiffGraph:
    """A laid-out-ready diff graph (see the module docstring for what is drawn).

    Attributes
    ----------
    node_count : int
        Graph nodes drawn (after focus and collapse), legend excluded.
    kind_counts : dict[str, int]
        Nodes drawn per kind: the change kinds, ``"collapsed"`` (chain nodes) and ``"io"`` (graph
        inputs/outputs); the values sum to ``node_count``.
    focused : bool
        Whether the automatic focus engaged (the graph had more than ``max_nodes`` nodes).
    collapsed : int
        Kept nodes collapsed into chain nodes.
    total_nodes : int
        Nodes before focus and collapse.
    graph : networkx.DiGraph
        The drawn items (see :func:`graphaudit.render.diffmodel.build_items`).
    id_prefix : str
        Prefix of the SVG ids (:meth:`element_id`).
    rankdir : str
        Layout direction, ``"TB"`` or ``"LR"``.
    """

    def __init__(self, items: nx.DiGraph, focused: bool, collapsed: int, total: int, id_prefix: str,
                 focus_keys: set[str], expand: bool, note: str = "", rankdir: str = "TB"):
        self.graph = items
        self.rankdir = rankdir
        self.focused = focused
        self.collapsed = collapsed
        self.total_nodes = total
        self.node_count = items.number_of_nodes()
        self.kind_counts: dict[str, int] = dict(Counter(d["kind"] for _k, d in items.nodes(data=True)))
        self._prefix = id_prefix
        self.id_prefix = id_prefix
        self._focus_keys = focus_keys
        self._expand = expand
        self._note = note
        self._dot: graphviz.Digraph | None = None

    def element_id(self, key: str) -> str:
        """The SVG ``id`` of a drawn item (its key in :attr:`graph`), as the page holding the SVG sees it."""
        return _short(printable(f"{self._prefix}{key}"))

    def _digraph(self) -> graphviz.Digraph:
        if self._dot is not None:
            return self._dot
        g, p = self.graph, self._prefix
        counts = Counter(self.kind_counts)
        title = g.graph.get("title", "")
        changes = g.graph.get("change_counts", Counter())
        summary = ", ".join(f"{changes[k]} {k}" for k in KIND_ORDER if changes.get(k) and k != "kept")
        label = f"{title}: {summary + ' changes' if summary else 'no changes'} (drawn on {g.graph.get('stage')})" + (
            f"\n{self._note}" if self._note else "")
        dot = graphviz.Digraph(name="diff", graph_attr={
            "rankdir": self.rankdir, "label": label, "labelloc": "t", "fontname": "Helvetica", "fontsize": "12",
            "nodesep": "0.25", "ranksep": "0.35", "tooltip": title}, node_attr={
            "fontname": "Helvetica", "fontsize": "10", "shape": "box", "style": "rounded,filled",
            "margin": "0.05,0.03"},
            edge_attr={"fontname": "Helvetica", "fontsize": "8", "arrowsize": "0.6", "color": "#606060"})
        with dot.subgraph(name="legend_rank") as lg:
            lg.attr(rank="source")
            badges = Counter(d["badge_kind"] for _u, _v, d in g.edges(data=True) if d.get("badge"))
            badges.update(k for _n, d in g.nodes(data=True) for _t, k in d.get("weights", []))
            first_div = any(d.get("first_divergence") for _k, d in g.nodes(data=True))
            lg.node("legend", label=legend_label(counts, badges, bool(g.graph.get("numeric")), self._expand, first_div),
                    shape="plain",
                    style="", id=f"{p}legend", **{"class": "ga-legend"})
        for key, d in sorted(g.nodes(data=True), key=lambda kd: kd[1].get("order", 0)):
            kind = d["kind"]
            fill, stroke = KIND_COLORS.get(kind, KIND_COLORS["kept"])
            cls = ["ga-node", f"ga-{kind}"]
            esc_id = self.element_id(key).replace("\\", "\\\\")  # escString: backslashes literal
            attrs = {"fillcolor": fill, "color": stroke, "id": esc_id, "tooltip": _dot_text(node_tooltip(key, d))}
            if kind == "io":
                attrs.update(shape="ellipse", style="filled")
            if d.get("ghost"):
                attrs["style"] = "rounded,filled,dashed"
            if kind not in ("kept", "io", "collapsed"):
                attrs["penwidth"] = "1.5"
            if d.get("first_divergence"):
                cls.append("ga-first-divergence")
                attrs.update(color=FIRST_DIVERGENCE_COLOR, penwidth="3.5")
            if key in self._focus_keys:
                cls.append("ga-focus")
                attrs["peripheries"] = "2"
            attrs["class"] = " ".join(cls)
            dot.node(_dot_name(key), label=node_label(d), **attrs)
        for u, v, d in g.edges(data=True):
            attrs = {"tooltip": _dot_text(", ".join(d["tensors"][:4]) + (f" [{d['badge']}]" if d.get("badge") else ""))}
            if d.get("dashed"):
                attrs["style"] = "dashed"
            if d.get("badge"):
                stroke = KIND_COLORS.get(d["badge_kind"], KIND_COLORS["kept"])[1]
                attrs.update(label=d["badge"], fontcolor=stroke, color=stroke, penwidth="1.6")
            # names hold ':' (keys like "n:<id>"): quote them whole, not as node:port
            dot.body.append(f"\t{quote(_dot_name(u))} -> {quote(_dot_name(v))} [{a_list(kwargs=attrs)}]\n")
        self._dot = dot
        return dot

    def dot_source(self) -> str:
        """The graph in the DOT language (needs no Graphviz installation)."""
        return self._digraph().source

    def _pipe(self, fmt: str) -> bytes:
        if shutil.which("dot") is None:
            raise GraphvizMissingError(f"the Graphviz `dot` program is not on PATH, so no {fmt.upper()} can be "
                                       f"drawn: {INSTALL_HINT}")
        try:
            out = self._digraph().pipe(format=fmt, quiet=True)
        except graphviz.ExecutableNotFound as e:
            raise GraphvizMissingError(f"the Graphviz `dot` program could not be run: {INSTALL_HINT}") from e
        except (graphviz.CalledProcessError, OSError) as e:
            err = getattr(e, "stderr", None) or b""
            first = next((ln.strip() for ln in err.decode(errors="replace").splitlines() if ln.strip()), "")
            detail = " ".join(first.split())[:200] or str(getattr(e, "returncode", e))
            raise GraphvizFailedError(f"Graphviz `dot` failed on the diff graph ({detail})") from e
        if not out:
            raise GraphvizFailedError(f"Graphviz `dot` produced no {fmt.upper()} for the diff graph")
        return out

    def svg(self) -> str:
        """The graph laid out by Graphviz ``dot``, as SVG text.

        Raises
        ------
        GraphvizMissingError
            ``dot`` is not installed (the message says how to install Graphviz).
        GraphvizFailedError
            ``dot`` failed or wrote nothing (one line).
        """
        return self._pipe("svg").decode("utf-8")

    def png(self) -> bytes:
        """The graph as PNG bytes (see :meth:`svg` for the errors)."""
        return self._pipe("png")

    def write(self, path: str | os.PathLike) -> Path:
        """Write the graph by suffix: ``.dot``/``.gv`` (DOT), ``.svg`` or ``.png``, atomically.

        Raises
        ------
        GraphvizMissingError
            SVG/PNG asked for and ``dot`` is not installed.
        GraphAuditError
            Unknown suffix, or the file cannot be written.
        """
        p = Path(path)
        fmt = picture_format(p)
        data: bytes | str = self.dot_source() if fmt == "dot" else (self.svg() if fmt == "svg" else self.png())
        if not p.parent.is_dir():
            raise GraphAuditError(f"{p}: {p.parent} is not an existing directory")
        try:
            atomic_write(p, data)
        except OSError as e:
            raise GraphAuditError(f"{p}: cannot write ({e.strerror})") from e
        return p


def picture_format(path: str | os.PathLike) -> str:
    """The format a path asks for by its suffix: ``"dot"``, ``"svg"`` or ``"png"``.

    Raises
    ------
    GraphAuditError
        Any other suffix.
    """
    p = Path(path)
    fmt = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png"}.get(p.suffix.lower())
    if fmt is None:
        raise GraphAuditError(f"{p}: unknown picture format {p.suffix or '(no suffix)'!r}; use .svg, .png, .dot or .gv")
    return fmt


def _restrict(items: nx.DiGraph, keep: set[str]) -> nx.DiGraph:
    """The subgraph on ``keep``, each node noting how many of its inputs/outputs were left out (``hidden``)."""
    sub = items.subgraph(keep).copy()
    for k in sub:
        n_in = sum(1 for u in items.predecessors(k) if u not in keep)
        n_out = sum(1 for u in items.successors(k) if u not in keep)
        if n_in or n_out:
            sub.nodes[k]["hidden"] = (n_in, n_out)
    return sub


def _focus_keys(items: nx.DiGraph, focus: str) -> list[str]:
    """The drawn items ``--focus`` names; GraphAuditError (with close names) when none."""
    keys = _resolve(items, focus)
    if not keys:
        import difflib

        close = difflib.get_close_matches(focus, sorted(_names(items)), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise GraphAuditError(f"--focus {focus}: no node or tensor of that name in {items.graph['title']}{hint}")
    return keys


def build_diff_graph(src: DiffSource, pair: int | None = 0, focus: str | None = None, radius: int = 2,
                     expand: bool = False, max_nodes: int = DEFAULT_MAX_NODES,
                     id_prefix: str | None = None, rankdir: str = "TB") -> DiffGraph:
    """Build the annotated diff graph of one stage pair, or the combined lineage view.

    Parameters
    ----------
    src : DiffSource
        Stages, alignments and changes; the report's numeric results (when data were run) and findings.
    pair : int or None
        ``i`` draws the transition ``stages[i] -> stages[i + 1]``; ``None`` the lineage view over all stages
        (each node of the last stage with every change it went through; error = its worst over the transitions).
    focus : str, optional
        A node (id or name, of either stage) or tensor name: draw only what lies within ``radius`` edges of it.
    radius : int
        Hops around the focus (and around each finding when the focus is automatic).
    expand : bool
        Draw wrapper nodes instead of collapsing them into badges.
    max_nodes : int
        Above this many drawn nodes, kept chains are collapsed and the view focuses on the findings
        (the first divergence, the 20 worst errors below the threshold, the :data:`WORST_REGIONS` changes
        with the lowest isolated SQNR, the findings' locations, then
        :data:`SEEDS_PER_PATTERN` instances of each change pattern), at most ``max_nodes`` nodes.
    id_prefix : str, optional
        Prefix of the SVG ids (default ``"ga<pair>-"`` or ``"ga-lineage-"``).
    rankdir : str
        ``"TB"`` (top to bottom, the default) or ``"LR"`` (left to right): Graphviz's ``rankdir``.

    Returns
    -------
    DiffGraph

    Raises
    ------
    GraphAuditError
        ``pair`` out of range, ``radius`` or ``max_nodes`` negative, ``focus`` names nothing in the view, ``rankdir``
        not one of :data:`RANKDIRS`.
    """
    if rankdir not in RANKDIRS:
        raise GraphAuditError(f"--rankdir {rankdir}: use one of {', '.join(RANKDIRS)}")
    n_pairs = len(src.stages) - 1
    if pair is not None and not 0 <= pair < n_pairs:
        raise GraphAuditError(f"--pair {pair}: the pipeline has {n_pairs} stage pair(s) (0..{n_pairs - 1})")
    if radius < 0 or max_nodes < 1:
        raise GraphAuditError(f"--radius {radius}, --max-nodes {max_nodes}: need radius >= 0 and max-nodes >= 1")
    items = build_items(src, pair, expand)
    total = items.number_of_nodes()
    prefix = id_prefix if id_prefix is not None else ("ga-lineage-" if pair is None else f"ga{pair}-")
    if focus is not None:
        keys = _focus_keys(items, focus)
        keep = neighbourhood(items, keys, radius, limit=max_nodes)
        return DiffGraph(_restrict(items, keep), False, 0, total, prefix, set(keys), expand,
                         f"focus {focus}, radius {radius}: {len(keep)} of {total} nodes", rankdir)
    collapsed, focused, note = 0, False, ""
    seeds: list[str] = []
    if total > max_nodes:
        seeds = _auto_seeds(items, src, pair)
        protect = set(seeds[:max_nodes])
        kept = {k for k, d in items.nodes(data=True) if d["kind"] == "kept" and k not in protect}
        items, collapsed = collapse_chains(items, kept, MIN_CHAIN)
    if items.number_of_nodes() > max_nodes:
        if seeds:
            keep = neighbourhood(items, seeds, radius, limit=max_nodes)
        else:  # nothing changed or diverged: the beginning of the graph
            keep = set(sorted(items, key=lambda k: items.nodes[k].get("order", 0))[:max_nodes])
        every = _pattern_counts(items)
        items = _restrict(items, keep)
        focused = True
        n_seeds = sum(1 for s in seeds if s in keep)
        shown = _pattern_counts(items)
        patterns = "\n".join(f"{pat}: {shown.get(pat, 0)} of {n} nodes shown" for pat, n in every.most_common(4))
        note = (f"automatic focus: {len(keep)} of {total} nodes, within {radius} edges of {n_seeds} changed or "
                f"diverging nodes (the first {SEEDS_PER_PATTERN} of each change pattern; use --focus)"
                + (f"\n{patterns}" if patterns else ""))
    if collapsed:
        note += ("; " if note else "") + f"{collapsed} kept nodes collapsed into chains"
    return DiffGraph(items, focused, collapsed, total, prefix, set(), expand, note, rankdir)
