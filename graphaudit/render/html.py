"""Self-contained HTML report: summary, stages, findings, changes, error chart and the diff graph as inline SVG."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ..fileio import check_output_path, write_atomic
from ..report import AuditReport

__all__ = ["GraphPanel", "ErrorChart", "diff_graph_panels", "error_chart", "render_html", "write_html",
           "GRAPHVIZ_HINT"]

#: Shown in place of a diff graph when Graphviz's ``dot`` program is missing.
GRAPHVIZ_HINT = ("Graphviz's `dot` program was not found, so the diff graph could not be drawn. Install Graphviz "
                 "(Debian/Ubuntu: `apt-get install graphviz`; macOS: `brew install graphviz`; see "
                 "https://graphviz.org/download/) and run graphaudit again.")

#: SQNR values above this (and "inf": identical tensors) are drawn at this height in the error chart, in dB.
SQNR_CAP_DB = 150.0


@dataclass
class GraphPanel:
    """One drawn diff graph (a stage pair) as the HTML report embeds it.

    Attributes
    ----------
    title : str
        ``"a -> b"``.
    svg : str
        The SVG document without XML prolog, ``""`` when it could not be drawn.
    node_count : int
        Nodes drawn (``DiffGraph.node_count``).
    kind_counts : dict
        Drawn nodes per change kind.
    message : str
        Why the graph is missing (Graphviz not installed), or a note on what was left out.
    """

    title: str
    svg: str = ""
    node_count: int = 0
    kind_counts: dict[str, int] = field(default_factory=dict)
    message: str = ""


@dataclass
class ErrorChart:
    """Per-tensor error along the test stage's topological order, ready to draw as SVG.

    Coordinates are in the chart's own viewBox units (``width`` x ``height``); y is SQNR in dB,
    values above :data:`SQNR_CAP_DB` (and ``"inf"``) drawn at the cap.

    Attributes
    ----------
    accumulated : list of dict
        ``{"x", "y", "order", "b_tensor", "cosine", "sqnr_db", "change"}`` per compared tensor, by order.
    isolated : list of dict
        Same keys, one per measured change output found among the compared tensors.
    divergence_x : float or None
        x of the first divergence.
    """

    width: int
    height: int
    left: int
    top: int
    plot_w: int
    plot_h: int
    accumulated: list[dict[str, Any]]
    isolated: list[dict[str, Any]]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]
    divergence_x: float | None = None

    @property
    def polyline(self) -> str:
        """The ``points`` attribute of the accumulated-error line."""
        return " ".join(f"{p['x']:.1f},{p['y']:.1f}" for p in self.accumulated)


def _sqnr(v: Any) -> float | None:
    """SQNR from the report (float, ``"inf"`` or None) as a float, capped at :data:`SQNR_CAP_DB`."""
    if v is None:
        return None
    x = float(v)
    if math.isnan(x):
        return None
    return min(x, SQNR_CAP_DB)


def error_chart(numeric: dict[str, Any], width: int = 900, height: int = 260) -> ErrorChart | None:
    """Lay out the error chart of one ``numeric`` entry of a report (schema 1.1).

    Accumulated error: every compared tensor (``numeric["tensors"]``) at its ``order`` (position of its
    producer in the test stage's topological order) with its SQNR (dB). Isolated error: every measured
    change (``numeric["regions"]``; reports of schema < 1.3 keep only ``worst_regions``) at the order of its
    output tensor.

    Returns
    -------
    ErrorChart or None
        None when no tensor has a finite or infinite SQNR.
    """
    pts = [t for t in numeric.get("tensors", []) if _sqnr(t.get("sqnr_db")) is not None]
    if not pts:
        return None
    pts.sort(key=lambda t: t["order"])
    order_of = {t["b_tensor"]: t["order"] for t in pts}
    iso = []
    for r in numeric.get("regions", numeric.get("worst_regions", [])):
        for _a, b in r.get("outputs", [])[:1]:
            if b in order_of and _sqnr(r.get("sqnr_db")) is not None:
                iso.append({**r, "b_tensor": b, "order": order_of[b]})
    ys = [_sqnr(t["sqnr_db"]) for t in pts] + [_sqnr(r["sqnr_db"]) for r in iso]
    y_lo, y_hi = min(0.0, min(ys)), max(ys)
    y_hi = y_hi + max(5.0, 0.05 * (y_hi - y_lo))
    x_lo, x_hi = pts[0]["order"], pts[-1]["order"]
    left, top, right, bottom = 56, 12, 16, 40
    pw, ph = width - left - right, height - top - bottom

    def sx(o: float) -> float:
        return left + (pw * (o - x_lo) / (x_hi - x_lo) if x_hi > x_lo else pw / 2)

    def sy(v: float) -> float:
        return top + ph * (1 - (v - y_lo) / (y_hi - y_lo))

    def point(t: dict, y: float) -> dict:
        return {"x": sx(t["order"]), "y": sy(y), "order": t["order"], "b_tensor": t["b_tensor"],
                "cosine": t.get("cosine"), "sqnr_db": t.get("sqnr_db"), "change": t.get("change", "")
                or f"{t.get('kind', '')}: {t.get('pattern', '')}"}

    step = _nice_step((y_hi - y_lo) / 5)
    y_ticks = [(sy(v), f"{v:g}") for v in _frange(math.ceil(y_lo / step) * step, y_hi, step)]
    xstep = _nice_step(max(1.0, (x_hi - x_lo) / 8))
    x_ticks = [(sx(v), f"{int(v)}") for v in _frange(math.ceil(x_lo / xstep) * xstep, x_hi, xstep)]
    fd = numeric.get("first_divergence")
    div_x = sx(fd["order"]) if fd and fd.get("order") is not None and fd["b_tensor"] in order_of else None
    return ErrorChart(width, height, left, top, pw, ph, [point(t, _sqnr(t["sqnr_db"])) for t in pts],
                      [point(r, _sqnr(r["sqnr_db"])) for r in iso], y_ticks, x_ticks, div_x)


def _nice_step(raw: float) -> float:
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _frange(start: float, stop: float, step: float) -> list[float]:
    out, v = [], start
    while v <= stop + 1e-9 and len(out) < 50:
        out.append(round(v, 10))
        v += step
    return out


_PROLOG = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?(<!--.*?-->\s*)*", re.S)


def diff_graph_panels(au, max_nodes: int = 300) -> list[GraphPanel]:
    """Draw the diff graph of every stage pair of an audit (``graphaudit.render.diffgraph``).

    Parameters
    ----------
    au : graphaudit.pipeline.Audit
    max_nodes : int
        Largest number of nodes drawn per pair (the diff graph keeps the changed regions first).

    Returns
    -------
    list of GraphPanel
        One per stage pair; when Graphviz's ``dot`` is missing each panel carries :data:`GRAPHVIZ_HINT`
        instead of an SVG (the report still renders).
    """
    from .diffgraph import GraphvizFailedError, GraphvizMissingError, build_diff_graph

    panels = []
    for i, (a, b) in enumerate(zip(au.stages, au.stages[1:])):
        g = build_diff_graph(au, pair=i, focus=None, radius=2, expand=False, max_nodes=max_nodes)
        panel = GraphPanel(f"{a.name} -> {b.name}", node_count=g.node_count, kind_counts=dict(g.kind_counts))
        try:
            panel.svg = _PROLOG.sub("", g.svg(), count=1)
        except GraphvizMissingError:
            panel.message = GRAPHVIZ_HINT
        except GraphvizFailedError as e:  # the rest of the report is still worth having
            panel.message = str(e)
        panels.append(panel)
    return panels


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("graphaudit.render", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = _num
    env.filters["pct"] = lambda x: "-" if x is None else f"{100 * x:.1f}%"
    return env


def _num(x: Any, spec: str = ".4g") -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return format(x, spec)


def _static(name: str) -> str:
    return (resources.files("graphaudit.render") / "static" / name).read_text(encoding="utf-8")


def render_html(reports: list[AuditReport], panels: list[list[GraphPanel]] | None = None) -> str:
    """Render reports (one per pipeline) as one self-contained HTML page.

    The page has no external reference (CSS and JavaScript are inlined, a Content-Security-Policy
    forbids network access), so it works offline.

    Parameters
    ----------
    reports : list of AuditReport
    panels : list of list of GraphPanel, optional
        Per report, the diff graphs of its stage pairs (:func:`diff_graph_panels`); None: no graphs.

    Returns
    -------
    str
        The HTML document.
    """
    panels = panels if panels is not None else [[] for _ in reports]
    if len(panels) != len(reports):
        raise ValueError("render_html: one list of graph panels per report")
    sections = []
    for i, (rep, pans) in enumerate(zip(reports, panels)):
        numeric = [{"data": n, "chart": error_chart(n)} for n in rep.numeric or []]
        sev = {s: sum(f.severity == s for f in rep.findings) for s in ("error", "warning", "info")}
        bad = sorted({f.code for f in rep.findings if f.code.startswith("P") and f.severity == "error"})
        sections.append({"id": f"p{i}", "report": rep, "numeric": numeric, "severity": sev, "contract_errors": bad,
                         "panels": [{"panel": p, "svg": Markup(p.svg)} for p in pans]})
    return _env().get_template("report.html.j2").render(
        sections=sections, version=reports[0].tool_version if reports else "", sqnr_cap=f"{SQNR_CAP_DB:g}",
        css=Markup(_static("report.css")), js=Markup(_static("report.js")))


def write_html(reports: list[AuditReport], path: str | os.PathLike, panels: list[list[GraphPanel]] | None = None,
               protect: list[Path] | None = None) -> Path:
    """Render (:func:`render_html`) and write the page atomically to ``path``.

    Raises
    ------
    GraphAuditError
        ``path`` is one of the user's inputs or inside an input directory, its directory is
        missing, or it cannot be written.
    """
    check_output_path(path, protect)  # before the rendering work
    return write_atomic(path, render_html(reports, panels), protect)


