"""Links between the HTML report and its diff graphs: which SVG element a node or tensor name designates, where a
graph opens, and the graph a verdict line, finding or chart point of a transition points into."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..numeric.summary import TransitionSummary

if TYPE_CHECKING:  # the diff graph is handed in by the caller
    from .diffgraph import DiffGraph

__all__ = ["graph_index", "add_measured_tensors", "start_element", "Linker", "NodeLink"]


def graph_index(g: "DiffGraph") -> dict[str, str]:
    """Every name a drawn item answers to, mapped to its SVG element id.

    In order of precedence: the names and ids of the drawn stage's nodes, the nodes of the earlier stage they come
    from (``origin``), the members of collapsed chains, then the tensors the items produce and the tensors of their
    out-edges (wrapped tensors show on the edge). A name drawn twice keeps its first item.
    """
    items = g.graph
    out: dict[str, str] = {}
    nodes = sorted(items.nodes(data=True), key=lambda kd: kd[1].get("order", 0))
    passes = (lambda d: [d.get("name"), *d.get("ids", ())],
              lambda d: list(d.get("origin", ())),
              lambda d: [m.split(":", 1)[1] for m in d.get("members", ())],
              lambda d: list(d.get("tensors", ())))
    for names in passes:
        for key, d in nodes:
            for n in names(d):
                if n:
                    out.setdefault(n, g.element_id(key))
    for u, _v, d in items.edges(data=True):
        for t in d.get("tensors", ()):
            out.setdefault(t, g.element_id(u))
    return out


def add_measured_tensors(index: dict[str, str], numeric: TransitionSummary | None) -> dict[str, str]:
    """Add the tensors the numeric comparison names (also those behind wrappers, which the graph draws as badges):
    each leads to the element of the node computing it (``b_node``)."""
    for t in (numeric.tensors + numeric.outputs) if numeric is not None else []:
        if t.b_node in index:
            for name in (t.b_tensor, t.a_tensor):
                index.setdefault(name, index[t.b_node])
    return index


def start_element(g: "DiffGraph", index: dict[str, str], numeric: TransitionSummary | None) -> tuple[str, str]:
    """(SVG element id, why) the graph opens on: the first divergence of the transition (its ``b_node``), else the
    change that loses most on its own (``worst_regions[0]``, when it loses anything), else ``("", "")`` (nothing
    special: the page opens on the graph's inputs)."""
    if numeric is not None and numeric.first_divergence is not None:
        fd = numeric.first_divergence
        for name in (fd.b_node, fd.b_tensor):
            if name and name in index:
                return index[name], f"first divergence {name}"
    key = g.graph.graph.get("first_divergence")
    if key and key in g.graph:
        return g.element_id(key), "first divergence"
    for r in (numeric.worst_regions if numeric is not None else [])[:1]:
        if r.sqnr_db in ("inf", None):  # the worst change alone loses nothing: nothing special to open on
            break
        for name in [*r.b_nodes, *(b for _a, b in r.outputs)]:
            if name in index:
                sq = r.sqnr_db if isinstance(r.sqnr_db, str) or r.sqnr_db is None else f"{r.sqnr_db:.1f}"
                return index[name], f"worst change measured alone: {r.kind} {r.pattern} at {name} (SQNR {sq} dB)"
    return "", ""


@dataclass
class NodeLink:
    """A name on the page that opens a diff graph on its element."""

    panel: str  # DOM id of the graph panel
    element: str  # SVG element id


class Linker:
    """Resolves a node or tensor name of a report line to the diff graph of its transition.

    Parameters
    ----------
    section : str
        DOM id of the pipeline's section (``"p0"``); panel ``i`` is ``"<section>-g<i>"``.
    panels : list
        The section's :class:`graphaudit.render.html.GraphPanel` objects (``title``, ``a``, ``b``, ``index``).
    """

    def __init__(self, section: str, panels: list) -> None:
        self.panels = [(f"{section}-g{i}", p) for i, p in enumerate(panels) if p.svg]

    def panel_of(self, scope: str) -> str:
        """DOM id of the panel of transition ``"a -> b"``, ``""`` if not drawn."""
        return next((pid for pid, p in self.panels if p.title == scope), "")

    def __call__(self, name: str, scope: str = "", stage: str = "") -> NodeLink | None:
        """The panel and element of ``name``: in the graph of transition ``scope`` when it is drawn, else in the
        panels drawn on ``stage``, then those starting from it, then any; None when no drawn graph holds it (a page
        from report.json alone, a node left out by the automatic focus)."""
        ranked = [pp for pp in self.panels if pp[1].title == scope] or sorted(
            self.panels, key=lambda pp: (pp[1].b != stage, pp[1].a != stage))
        for pid, p in ranked:
            if name in p.index:
                return NodeLink(pid, p.index[name])
        return None
