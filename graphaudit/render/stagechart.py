"""The HTML report's picture of the stages: each stage's output agreement with the reference stage, in pipeline order.

The x axis is the stages of the pipeline in order (the user's 0.809 -> 0.778 -> 0.748). Two lines, each point at the
stage it measures: the line is the stage's outputs against the reference stage (the first stage compared,
``TransitionSummary.vs_reference``: the accumulated drop), labelled with its SQNR and the top-1 agreement of the
class-score output that agrees least (named when the stage has several outputs: the SQNR may be a regression's); the open diamonds are the stage's outputs against the stage before (``TransitionSummary.outputs``:
what this one transition costs; not joined, since they measure different pairs). SQNR is the worst output's, every output's cosine is in the hover text, a stage
not measured is a gap. Clicking a point opens the diff graph of the transition that ends in that stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..numeric.summary import Figure, TensorSummary, least_top1
from ..report import AuditReport
from .chart import _ACC, _DIV, SQNR_CAP_DB, _float, _sqnr, _text

__all__ = ["StageAgreement", "reference_agreement", "stage_chart"]


@dataclass
class StageAgreement:
    """A stage's outputs against a reference stage (one point of the solid line).

    Attributes
    ----------
    stage, reference : str
        Stage names; ``stage`` is drawn at its own place on the x axis.
    sqnr_db, cosine : Figure
        Over the outputs (the worst output).
    top1_agreement : list of int or None
        ``[agreeing rows, rows]`` of the class-score output that agrees least (None: no output is class scores).
    top1_output : str or None
        That output's name, written beside its top-1 when the stage has several outputs.
    """

    stage: str
    reference: str
    sqnr_db: Figure = None
    cosine: Figure = None
    top1_agreement: list[int] | None = None
    top1_output: str | None = None


def _fmt(v: Figure, spec: str) -> str:
    return v if isinstance(v, str) else ("-" if v is None else format(v, spec))


def _worst(outputs: list[TensorSummary]) -> tuple[float | None, float | None, tuple[str, list[int]] | None]:
    """(lowest drawn SQNR, lowest cosine, ``(output, [agree, rows])`` of the class-score output whose top-1 agrees
    least, or None) over a transition's outputs."""
    sq = [x for x in (_sqnr(o.sqnr_db) for o in outputs) if x is not None]
    cos = [x for x in (_float(o.cosine) for o in outputs) if x is not None]
    return (min(sq) if sq else None), (min(cos) if cos else None), least_top1(outputs)


def _hover(stage: str, against: str, outputs: list[TensorSummary], first=None) -> str:
    rows = [f"<b>{_text(stage)}</b>: outputs against {_text(against)}"]
    for o in outputs[:6]:
        top = f", top-1 {o.top1_agreement[0]}/{o.top1_agreement[1]}" if o.top1_agreement else ""
        rows.append(f"{_text(o.b_tensor)}: SQNR {_fmt(o.sqnr_db, '.1f')} dB, cosine {_fmt(o.cosine, '.6f')}{top}")
    if len(outputs) > 6:
        rows.append(f"... {len(outputs) - 6} more outputs")
    if first is not None or against:
        rows.append("first divergence from the previous stage: " + (
            _text(first.b_node or first.b_tensor) if first is not None else "none"))
    return "<br>".join(rows)


def _top1_text(top: list[int] | None, name: str | None) -> str:
    return (f" \u00b7 top-1 {top[0]}/{top[1]}" + (f" ({_text(name)})" if name else "")) if top else ""


def _label(outputs: list[TensorSummary], sqnr: float | None, top: list[int] | None, name: str | None = None) -> str:
    """The text over a point: its SQNR ("identical" when every output is), and top-1 agreement where it applies,
    with the name of its output when there are several (the SQNR is the worst output's, maybe another one)."""
    if not outputs or sqnr is None:
        return ""
    same = all(_float(o.sqnr_db) == math.inf for o in outputs)
    text = "identical" if same else (f"\u2265 {SQNR_CAP_DB:g} dB" if sqnr >= SQNR_CAP_DB else f"{sqnr:.1f} dB")
    return text + _top1_text(top, name if len(outputs) > 1 else None)


def _ref_text(r: StageAgreement, outputs: list[TensorSummary]) -> str:
    """The label of a point of the solid line (its outputs' figures where the report has them)."""
    y = _sqnr(r.sqnr_db)
    if outputs:
        return _label(outputs, y, r.top1_agreement, r.top1_output)
    return "" if y is None else f"{y:.1f} dB" + _top1_text(r.top1_agreement, r.top1_output)


def _stage_order(report: AuditReport) -> list[str]:
    """Stage names in pipeline order: the transitions' a and b, then any stage only the numeric section names."""
    names: list[str] = []
    for t in report.transitions:
        names += [x for x in (t.a, t.b) if x not in names]
    for n in report.numeric or []:
        if n is not None:
            names += [x for x in (n.a, n.b) if x not in names]
    return names


def reference_agreement(report: AuditReport) -> list[StageAgreement]:
    """Each measured stage's outputs against the reference stage, from the report's ``vs_reference`` figures
    (the worst output's SQNR and cosine, the top-1 of the class-score output that agrees least, and its name)."""
    out = []
    for n in report.numeric or []:
        if n is not None and n.reference and n.vs_reference:
            sq, cos, top = _worst(n.vs_reference)
            out.append(StageAgreement(n.b, n.reference, sqnr_db=sq, cosine=cos, top1_agreement=top[1] if top else None,
                                      top1_output=top[0] if top else None))
    return out


def stage_chart(report: AuditReport, reference: list[StageAgreement] | None = None) -> dict[str, Any] | None:
    """The Plotly figure of the stages (x: stage names in pipeline order): output SQNR in dB against the reference
    stage (a line) and against the previous stage (markers).

    Parameters
    ----------
    report : AuditReport
        Its ``transitions`` give the x axis, its ``numeric`` section the figures (:class:`TransitionSummary`
        ``vs_reference`` and ``outputs``); a stage without figures is a gap.
    reference : list of StageAgreement, optional
        Overrides the solid line (default :func:`reference_agreement` of the report).

    Returns
    -------
    dict or None
        ``{"data", "layout", "config"}`` for ``Plotly.newPlot``; None without any measured transition. Each point's
        ``customdata`` is the transition ``"a -> b"`` ending in its stage (the page opens that diff graph on a
        click).
    """
    import plotly.graph_objects as go

    if not report.numeric:
        return None
    names = _stage_order(report)
    into = {n.b: n for n in report.numeric if n is not None}  # the transition ending in each measured stage
    prev = {s: _worst(into[s].outputs) if s in into else (None, None, None) for s in names}
    if all(w[0] is None for w in prev.values()):
        return None
    ref_points = reference if reference is not None else reference_agreement(report)
    ref_by = {r.stage: r for r in ref_points}
    ref_name = ref_points[0].reference if ref_points else next((n.a for n in report.numeric if n is not None), "")
    scope = {s: f"{into[s].a} -> {s}" if s in into else None for s in names}
    ref_y = [_sqnr(ref_by[s].sqnr_db) if s in ref_by else None for s in names]
    traces = [
        go.Scatter(x=names, y=ref_y, mode="lines+markers+text", name=f"outputs vs {_text(ref_name)} (dB)",
                   text=[_ref_text(ref_by[s], into[s].vs_reference if s in into else []) if s in ref_by else ""
                         for s in names],
                   textposition="top center", line={"color": _ACC, "width": 2}, marker={"size": 11, "color": _ACC},
                   hovertext=[_hover(s, ref_name, into[s].vs_reference) if s in into and s in ref_by else
                              (f"{_text(s)}: the reference stage" if s == ref_name else f"{_text(s)}<br>not measured")
                              for s in names],
                   hoverinfo="text", customdata=[scope[s] for s in names], connectgaps=False),
        go.Scatter(x=names, y=[prev[s][0] for s in names], mode="markers", name="vs previous stage (dB)",
                   marker={"size": 9, "color": _DIV, "symbol": "diamond-open", "line": {"width": 2}},
                   hovertext=[_hover(s, into[s].a, into[s].outputs, into[s].first_divergence) if s in into else ""
                              for s in names],
                   hoverinfo="text", customdata=[scope[s] for s in names], connectgaps=False)]
    drawn = [y for t in traces for y in t.y if y is not None]
    lo, hi = min(drawn), max(drawn)
    pad = max(5.0, 0.15 * (hi - lo))
    notes = [{"x": s, "y": 0.5, "xref": "x", "yref": "paper", "showarrow": False, "font": {"color": "#667085",
              "size": 11}, "text": "reference" if s == ref_name else "not measured"}
             for s in names if s == ref_name or prev[s][0] is None]
    layout = go.Layout(
        template="none", height=250, margin={"l": 60, "r": 24, "t": 30, "b": 36}, annotations=notes,
        hovermode="closest", font={"family": "system-ui, sans-serif", "size": 12}, showlegend=True,
        legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": names, "title": {"text": ""},
               "range": [-0.6, len(names) - 0.4]},
        yaxis={"title": {"text": "output SQNR (dB)"}, "range": [lo - pad, hi + 2 * pad], "zeroline": False})
    spec = go.Figure(data=traces, layout=layout).to_plotly_json()
    spec["config"] = {"displaylogo": False, "responsive": True}
    return spec
