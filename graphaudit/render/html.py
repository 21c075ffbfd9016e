"""Self-contained HTML report: summary, stages, findings, changes, error charts (Plotly) and the diff graphs as inline
SVG; rebuilt from a ``report.json`` alone by :func:`html_from_json`."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ..errors import GraphAuditError
from ..fileio import check_output_path, write_atomic
from ..report import AuditReport
from .chart import SQNR_CAP_DB, chart_json, error_chart, plotly_js
from .diffmodel import DiffSource
from .graphlinks import Linker, add_measured_tensors, graph_index, start_element
from .styles import cosine_order
from .stagechart import stage_chart

__all__ = ["GraphPanel", "diff_graph_panels", "render_html", "write_html", "html_from_json", "GRAPHVIZ_HINT"]

#: Shown in place of a diff graph when Graphviz's ``dot`` program is missing.
GRAPHVIZ_HINT = ("Graphviz's `dot` program was not found, so the diff graph could not be drawn. Install Graphviz "
                 "(Debian/Ubuntu: `apt-get install graphviz`; macOS: `brew install graphviz`; see "
                 "https://graphviz.org/download/) and run graphaudit again.")


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
    a, b : str
        The stage names of the pair.
    index : dict
        Node, origin and tensor names to SVG element ids (:func:`graphaudit.render.graphlinks.graph_index`).
    start, start_why : str
        The element the view opens centred on (the first divergence, else the worst change measured alone; ``""``:
        the top of the graph) and what it is.
    """

    title: str
    svg: str = ""
    node_count: int = 0
    kind_counts: dict[str, int] = field(default_factory=dict)
    message: str = ""
    a: str = ""
    b: str = ""
    index: dict[str, str] = field(default_factory=dict)
    start: str = ""
    start_why: str = ""


_PROLOG = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?(<!--.*?-->\s*)*", re.S)


def diff_graph_panels(src: DiffSource, max_nodes: int = 300, rankdir: str = "TB") -> list[GraphPanel]:
    """Draw the diff graph of every stage pair of a pipeline (``graphaudit.render.diffgraph``).

    Parameters
    ----------
    src : DiffSource
        Stages, alignments, changes, and the report's numeric section and findings.
    max_nodes : int
        Largest number of nodes drawn per pair (the diff graph keeps the changed regions first).
    rankdir : str
        ``"TB"`` (top to bottom) or ``"LR"`` (left to right).

    Returns
    -------
    list of GraphPanel
        One per stage pair; when Graphviz's ``dot`` is missing each panel carries :data:`GRAPHVIZ_HINT`
        instead of an SVG (the report still renders).
    """
    from .diffgraph import GraphvizFailedError, GraphvizMissingError, build_diff_graph

    panels = []
    numeric = {(n.a, n.b): n for n in src.numeric or [] if n is not None}
    for i, (a, b) in enumerate(zip(src.stages, src.stages[1:])):
        g = build_diff_graph(src, pair=i, focus=None, radius=2, expand=False, max_nodes=max_nodes,
                             rankdir=rankdir)
        measured = numeric.get((a.name, b.name))
        index = add_measured_tensors(graph_index(g), measured)
        start, why = start_element(g, index, measured)
        panel = GraphPanel(f"{a.name} -> {b.name}", node_count=g.node_count, kind_counts=dict(g.kind_counts),
                           a=a.name, b=b.name, index=index, start=start, start_why=why)
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
    sections = [_section(f"p{i}", rep, pans) for i, (rep, pans) in enumerate(zip(reports, panels))]
    charts = any(n["chart"] for s in sections for n in s["numeric"]) or any(s["stage_chart"] for s in sections)
    return _env().get_template("report.html.j2").render(
        sections=sections, version=reports[0].tool_version if reports else "", sqnr_cap=f"{SQNR_CAP_DB:g}",
        css=Markup(_static("report.css")), js=Markup(_static("report.js")),
        plotly=Markup(plotly_js()) if charts else "")


def _section(sid: str, rep: AuditReport, pans: list[GraphPanel]) -> dict[str, Any]:
    """What the template shows of one pipeline."""
    sev = {s: sum(f.severity == s for f in rep.findings) for s in ("error", "warning", "info")}
    bad = sorted({f.code for f in rep.findings if f.code.startswith("P") and f.severity == "error"})
    link = Linker(sid, pans)
    spec = stage_chart(rep)
    return {"id": sid, "report": rep, "numeric": [_numeric_view(n, link) for n in rep.numeric or []],
            "severity": sev, "contract_errors": bad, "link": link, "metric": _metric_view(rep.metric),
            "toolchain_rows": sorted((n for n in rep.toolchain.nodes if n.cosine is not None),
                                     key=lambda n: cosine_order(n.cosine)) if rep.toolchain else [],
            "stage_chart": Markup(chart_json(spec)) if spec else None,
            "panels": [{"panel": p, "svg": Markup(p.svg), "index": Markup(chart_json(p.index))} for p in pans]}


def _metric_view(m) -> dict[str, Any] | None:
    """What the template shows of the user's metric (``--eval``): per value name, per stage ``(value, change from
    the stage before, signed so that negative is a loss)``; the stages not measured and the hook's failures."""
    if m is None:
        return None
    rows = []
    for name in m.names():
        change = {b: c for _a, b, c in m.changes(name)}
        rows.append({"name": name, "lower": name in m.lower_is_better,
                     "cells": [(s.values.get(name), change.get(s.stage)) for s in m.stages]})
    return {"data": m, "rows": rows}


def _numeric_view(n, link: Linker) -> dict[str, Any]:
    """What the template shows of a numeric transition: the summary, its chart's spec (JSON) and point counts."""
    spec = error_chart(n)
    return {"data": n, "chart": Markup(chart_json(spec)) if spec else None, "panel": link.panel_of(f"{n.a} -> {n.b}"),
            "accumulated": len(spec["data"][0]["x"]) if spec else 0,
            "isolated": len(spec["data"][1]["x"]) if spec else 0}


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


def html_from_json(source: str | os.PathLike | dict | list, out: str | os.PathLike,
                   panels: list[list[GraphPanel]] | None = None, protect: list[Path] | None = None) -> Path:
    """Rebuild the HTML report from a JSON report alone (no stage models needed).

    Everything on the page comes from the report (summary, stages, findings, changes, numeric tables and
    charts) except the diff graphs, which need the stage models: pass pre-drawn ``panels`` or the page has none.

    Parameters
    ----------
    source : path-like, dict or list of dict
        A ``report.json`` written by ``graphaudit explain`` (one object, or a list for several pipelines), or
        its parsed content (:meth:`AuditReport.to_dict` output).
    out : path-like
        The HTML file to write (atomically, see :func:`write_html`).
    panels : list of list of GraphPanel, optional
        Per report, diff graphs drawn earlier (:func:`diff_graph_panels`).
    protect : list of Path, optional
        Paths never to overwrite (the JSON ``source`` is always one).

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    GraphAuditError
        The file cannot be read, is not JSON, or is not a graphaudit report of a supported schema; ``out`` cannot
        be written.

    Examples
    --------
    >>> html_from_json("graphaudit_report/report.json", "page.html")  # doctest: +SKIP
    PosixPath('page.html')
    """
    given = not isinstance(source, (dict, list))
    protect = list(protect or []) + ([Path(source)] if given else [])
    check_output_path(out, protect)
    data = _read_json(Path(source)) if given else source
    items = data if isinstance(data, list) else [data]
    try:
        reports = [AuditReport.from_dict(d) for d in items]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        where = source if not isinstance(source, (dict, list)) else "the report"
        raise GraphAuditError(f"{where}: not a graphaudit JSON report ({type(e).__name__}: {e})") from e
    return write_html(reports, out, panels, protect)


def _read_json(path: Path) -> Any:
    """The parsed JSON of ``path``; GraphAuditError (one line naming the file, in our words) when it cannot be read,
    is not JSON, nests deeper than Python's parser goes or holds an integer longer than Python converts."""
    text = None
    try:
        if not path.is_file():
            raise GraphAuditError(f"{path}: not a regular file" if path.exists() else f"{path}: no such file")
        text = path.read_text(encoding="utf-8")
        return json.loads(text)
    except FileNotFoundError as e:
        raise GraphAuditError(f"{path}: no such file") from e
    except (OSError, UnicodeDecodeError) as e:
        raise GraphAuditError(f"{path}: cannot read ({e})") from e
    except json.JSONDecodeError as e:
        raise GraphAuditError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from e
    except RecursionError:  # a report nests a few levels; Python's parser stops near its recursion limit
        raise GraphAuditError(f"{path}: JSON nested too deeply to read (a graphaudit report nests a few levels); "
                              "not a graphaudit JSON report") from None
    except ValueError:  # an integer longer than Python converts (sys.get_int_max_str_digits)
        raise GraphAuditError(f"{path}: {_long_integer(text or '')}; not a graphaudit JSON report") from None


def _long_integer(text: str) -> str:
    """Words for the longest run of digits in ``text`` (the integer Python refused to convert)."""
    import sys

    limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
    longest = max((len(m.group()) for m in re.finditer(r"[0-9]+", text)), default=0)
    return f"holds an integer of {longest} digits (Python converts at most {limit})"
