"""The HTML report's picture of the stages: output agreement of each stage with the one before, in pipeline order.

The report measures adjacent transitions (``AuditReport.numeric``, one :class:`TransitionSummary` per stage pair
that ran): each point is a transition ``a -> b`` with the SQNR of b's outputs against a's (the worst output when
there are several) and top-1 agreement (where the outputs are classifier scores) written over it, every output's
cosine in its hover text. Accumulated agreement against a reference stage (stage k against the first
measured stage) is not in the report yet: :class:`StageAgreement` is the hook for it, drawn as a second line when
given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..numeric.summary import Figure, TensorSummary, TransitionSummary
from ..report import AuditReport
from .chart import _ACC, _DIV, SQNR_CAP_DB, _float, _sqnr, _text

__all__ = ["StageAgreement", "stage_chart"]


@dataclass
class StageAgreement:
    """A stage's outputs against a reference stage (the hook for accumulated figures; the report has none yet).

    Attributes
    ----------
    stage, reference : str
        Stage names; ``stage`` is drawn at the transition that ends in it.
    sqnr_db, cosine : Figure
        Over the outputs (the worst output).
    top1_agreement : list of int or None
        ``[agreeing rows, rows]`` where the outputs are classifier scores.
    """

    stage: str
    reference: str
    sqnr_db: Figure = None
    cosine: Figure = None
    top1_agreement: list[int] | None = None


def _fmt(v: Figure, spec: str) -> str:
    return v if isinstance(v, str) else ("-" if v is None else format(v, spec))


def _worst(outputs: list[TensorSummary]) -> tuple[float | None, float | None, list[int] | None]:
    """(lowest drawn SQNR, lowest cosine, summed top-1 ``[agree, rows]`` or None) over a transition's outputs."""
    sq = [x for x in (_sqnr(o.sqnr_db) for o in outputs) if x is not None]
    cos = [x for x in (_float(o.cosine) for o in outputs) if x is not None]
    tops = [o.top1_agreement for o in outputs if o.top1_agreement]
    top = [sum(t[0] for t in tops), sum(t[1] for t in tops)] if tops else None
    return (min(sq) if sq else None), (min(cos) if cos else None), top


def _hover(scope: str, n: TransitionSummary | None) -> str:
    if n is None:
        return f"{_text(scope)}<br>not measured"
    rows = [f"<b>{_text(scope)}</b>: outputs against the previous stage"]
    for o in n.outputs[:6]:
        top = f", top-1 {o.top1_agreement[0]}/{o.top1_agreement[1]}" if o.top1_agreement else ""
        rows.append(f"{_text(o.b_tensor)}: SQNR {_fmt(o.sqnr_db, '.1f')} dB, cosine {_fmt(o.cosine, '.6f')}{top}")
    if len(n.outputs) > 6:
        rows.append(f"... {len(n.outputs) - 6} more outputs")
    rows.append("first divergence: " + (_text(n.first_divergence.b_node or n.first_divergence.b_tensor)
                                        if n.first_divergence is not None else "none"))
    return "<br>".join(rows)


def _label(n: TransitionSummary | None, sqnr: float | None, _cos: float | None, top: list[int] | None) -> str:
    """The text over a point: its SQNR ("identical" when every output is), and top-1 agreement where it applies."""
    if n is None or sqnr is None:
        return ""
    same = all(_float(o.sqnr_db) == math.inf for o in n.outputs)
    text = "identical" if same else (f"\u2265 {SQNR_CAP_DB:g} dB" if sqnr >= SQNR_CAP_DB else f"{sqnr:.1f} dB")
    return text + (f" \u00b7 top-1 {top[0]}/{top[1]}" if top else "")


def stage_chart(report: AuditReport, reference: list[StageAgreement] | None = None) -> dict[str, Any] | None:
    """The Plotly figure of the stages: per transition (x: ``"a -> b"`` in pipeline order) the output SQNR in dB.

    Parameters
    ----------
    report : AuditReport
        Its ``transitions`` give the x axis (a transition that was not measured is a gap), its ``numeric`` section
        the figures (:class:`TransitionSummary` ``outputs``).
    reference : list of StageAgreement, optional
        Each stage's outputs against a reference stage (accumulated); drawn as a dashed line when given.

    Returns
    -------
    dict or None
        ``{"data", "layout", "config"}`` for ``Plotly.newPlot``; None without any measured transition. Each point's
        ``customdata`` is its transition ``"a -> b"`` (the page opens that diff graph on a click).
    """
    import plotly.graph_objects as go

    if not report.numeric:
        return None
    scopes = [f"{t.a} -> {t.b}" for t in report.transitions]
    by_scope = {f"{n.a} -> {n.b}": n for n in report.numeric if n is not None}
    scopes += [s for s in by_scope if s not in scopes]
    worst = {s: _worst(by_scope[s].outputs) if s in by_scope else (None, None, None) for s in scopes}
    if all(w[0] is None for w in worst.values()):
        return None
    labels = [s.replace(" -> ", " \u2192 ") for s in scopes]
    ys = [worst[s][0] for s in scopes]
    traces = [go.Scatter(x=labels, y=ys, mode="lines+markers+text", name="output SQNR vs previous stage (dB)",
                         text=[_label(by_scope.get(s), *worst[s]) for s in scopes], textposition="top center",
                         line={"color": _ACC, "width": 2}, marker={"size": 11, "color": _ACC},
                         hovertext=[_hover(s, by_scope.get(s)) for s in scopes], hoverinfo="text",
                         customdata=scopes, connectgaps=False)]
    if reference:  # the hook: accumulated agreement against the reference stage, at the transition ending there
        at = {s.split(" -> ")[1]: k for k, s in enumerate(scopes)}
        pts = [(labels[at[r.stage]], _sqnr(r.sqnr_db), r) for r in reference if r.stage in at]
        traces.append(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                 name=f"vs {_text(reference[0].reference)} (dB)", customdata=[scopes[at[p[2].stage]]
                                                                                             for p in pts],
                                 line={"color": _DIV, "dash": "dash"}, marker={"size": 9, "color": _DIV},
                                 hovertext=[f"{_text(p[2].stage)} vs {_text(p[2].reference)}: SQNR "
                                            f"{_fmt(p[2].sqnr_db, '.1f')} dB, cosine {_fmt(p[2].cosine, '.6f')}"
                                            for p in pts], hoverinfo="text"))
    drawn = [y for t in traces for y in t.y if y is not None]
    lo, hi = min(drawn), max(drawn)
    pad = max(5.0, 0.15 * (hi - lo))
    layout = go.Layout(
        template="none", height=240, margin={"l": 60, "r": 24, "t": 30, "b": 36},
        annotations=[{"x": lab, "y": 0.5, "xref": "x", "yref": "paper", "text": "not measured", "showarrow": False,
                      "font": {"color": "#667085", "size": 11}} for lab, y in zip(labels, ys) if y is None],
        hovermode="closest", font={"family": "system-ui, sans-serif", "size": 12}, showlegend=True,
        legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": labels, "title": {"text": ""},
               "range": [-0.6, len(labels) - 0.4]},
        yaxis={"title": {"text": "output SQNR (dB)"}, "range": [lo - pad, hi + 2 * pad], "zeroline": False})
    spec = go.Figure(data=traces, layout=layout).to_plotly_json()
    spec["config"] = {"displaylogo": False, "responsive": True}
    return spec
