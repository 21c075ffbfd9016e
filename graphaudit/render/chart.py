"""The error chart of the HTML report as a Plotly figure: per-tensor error along the test stage's topological order.

Plotly (https://plotly.com/python/, MIT) draws it in the browser from a figure spec: hover, zoom, pan and log axes come
with the library, and its JavaScript bundle is inlined once in the page (:func:`plotly_js`), so the page stays one
self-contained file that works offline. The spec is built from the report's numeric section alone
(:class:`graphaudit.numeric.summary.TransitionSummary`), so a page rebuilt from ``report.json`` draws the same chart.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..numeric.summary import Figure, TransitionSummary

__all__ = ["SQNR_CAP_DB", "ERROR_FLOOR", "error_chart", "chart_json", "plotly_js"]

#: SQNR values above this (and "inf": identical tensors) are drawn at this height, in dB.
SQNR_CAP_DB = 150.0

#: 1 - cosine below this (identical tensors: 0) is drawn at this value on the log view.
ERROR_FLOOR = 1e-12

_ACC, _ISO, _DIV = "#2b6cb0", "#b7791f", "#c0262d"  # report.css --info, --warning, --error


def _float(v: Figure) -> float | None:
    """A report figure (float, ``"inf"``/``"-inf"``/``"nan"`` or None) as a float, None for NaN or missing."""
    if v is None:
        return None
    x = float(v)
    return None if math.isnan(x) else x


def _sqnr(v: Figure) -> float | None:
    """SQNR in dB as drawn: capped at :data:`SQNR_CAP_DB`; None for NaN and -inf (an all-zero reference)."""
    x = _float(v)
    return None if x is None or x == -math.inf else min(x, SQNR_CAP_DB)


def _err(cos: Figure) -> float | None:
    x = _float(cos)
    return None if x is None else max(1.0 - x, ERROR_FLOOR)


def _text(s: str) -> str:
    """Names from the user's files as Plotly text: its labels read a few HTML tags and entities."""
    return html.escape(s, quote=False)


@dataclass
class _Point:
    """One drawn point: a compared tensor, or a measured change at the order of its output tensor."""

    order: int
    tensor: str
    sqnr_db: Figure
    cosine: Figure
    label: str  # the change ("" for a kept node)
    node: str = ""  # the ONNX node computing the tensor in the test stage (the diff graph's link)

    def hover(self, what: str) -> str:
        def num(v: Figure, spec: str) -> str:
            return v if isinstance(v, str) else ("-" if v is None else format(v, spec))

        node = f"node {_text(self.node)} (click: diff graph)" if self.node else ""
        figures = f"SQNR {num(self.sqnr_db, '.1f')} dB, cosine {num(self.cosine, '.6f')}"
        return "<br>".join(x for x in (f"{what} {_text(self.tensor)}", node, figures, _text(self.label)) if x)


def _points(numeric: TransitionSummary) -> tuple[list[_Point], list[_Point]]:
    """(accumulated, isolated) points of a transition, by order; only those with an SQNR to draw."""
    acc = sorted((_Point(t.order, t.b_tensor, t.sqnr_db, t.cosine, t.change, t.b_node) for t in numeric.tensors
                  if _sqnr(t.sqnr_db) is not None), key=lambda p: p.order)
    at = {p.tensor: p for p in acc}
    iso = []
    for r in numeric.regions or numeric.worst_regions:  # reports of schema < 1.3 keep only the worst
        for _a, b in r.outputs[:1]:
            if b in at and _sqnr(r.sqnr_db) is not None:
                iso.append(_Point(at[b].order, b, r.sqnr_db, r.cosine, f"{r.kind}: {r.pattern}", at[b].node))
    return acc, iso


def error_chart(numeric: TransitionSummary) -> dict[str, Any] | None:
    """The Plotly figure of one transition's error along the topological order of its test stage.

    Accumulated error: every compared tensor (``numeric.tensors``) at its ``order`` (position of its producer in
    the test stage's topological order) with its SQNR in dB (identical tensors and SQNR above :data:`SQNR_CAP_DB`
    at the cap). Isolated error: every measured change (``numeric.regions``) at the order of its output tensor.
    Each point's ``customdata`` is the ONNX node computing its tensor in the test stage (``b_node``; ``""`` in
    reports before schema 1.6): the page opens the diff graph on it when the point is clicked.
    The first divergence is a dashed vertical line. Two buttons switch the y axis between SQNR (dB) and
    1 - cosine on a log scale (floored at :data:`ERROR_FLOOR`). Hover text names the tensor.

    Parameters
    ----------
    numeric : graphaudit.numeric.summary.TransitionSummary
        An entry of ``AuditReport.numeric``.

    Returns
    -------
    dict or None
        ``{"data", "layout", "config"}`` for ``Plotly.newPlot``; None when no tensor has an SQNR to draw.
    """
    import plotly.graph_objects as go

    acc, iso = _points(numeric)
    if not acc:
        return None
    ys = {"sqnr": [[_sqnr(p.sqnr_db) for p in ps] for ps in (acc, iso)],
          "err": [[_err(p.cosine) for p in ps] for ps in (acc, iso)]}
    traces = [go.Scatter(x=[p.order for p in acc], y=ys["sqnr"][0], mode="lines+markers", name="accumulated",
                         line={"color": _ACC, "width": 1.4}, marker={"size": 5, "color": _ACC},
                         hovertext=[p.hover(f"#{p.order}") for p in acc], hoverinfo="text",
                         customdata=[p.node for p in acc]),
              go.Scatter(x=[p.order for p in iso], y=ys["sqnr"][1], mode="markers", name="isolated (change alone)",
                         marker={"size": 8, "symbol": "square", "color": _ISO, "line": {"color": "#fff", "width": 1}},
                         hovertext=[p.hover("isolated, at") for p in iso], hoverinfo="text",
                         customdata=[p.node for p in iso])]
    fd = numeric.first_divergence
    shapes = [{"type": "line", "xref": "x", "yref": "paper", "x0": fd.order, "x1": fd.order, "y0": 0, "y1": 1,
               "line": {"color": _DIV, "dash": "dash", "width": 1.5}}] if fd is not None else []
    notes = [{"x": fd.order, "y": 1, "xref": "x", "yref": "paper", "text": "first divergence", "showarrow": False,
              "xanchor": "left", "yanchor": "top", "xshift": 3, "font": {"color": _DIV, "size": 11}}
             ] if fd is not None else []
    views = [("SQNR (dB)", "sqnr", "linear"), ("1 - cosine (log)", "err", "log")]
    buttons = [{"label": label, "method": "update",
                "args": [{"y": ys[key]}, {"yaxis.type": kind, "yaxis.title.text": label, "yaxis.autorange": True}]}
               for label, key, kind in views]
    layout = go.Layout(
        template="none", height=300, margin={"l": 60, "r": 16, "t": 36, "b": 44}, hovermode="closest",
        font={"family": "system-ui, sans-serif", "size": 11}, showlegend=True,
        legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.02, "yanchor": "bottom"},
        xaxis={"title": {"text": f"topological order in {_text(numeric.b)}"}, "zeroline": False},
        yaxis={"title": {"text": "SQNR (dB)"}, "zeroline": False, "exponentformat": "power"},
        shapes=shapes, annotations=notes,
        updatemenus=[{"type": "buttons", "direction": "right", "x": 0, "xanchor": "left", "y": 1.02,
                      "yanchor": "bottom", "pad": {"t": 0, "r": 4}, "showactive": True, "buttons": buttons}])
    spec = go.Figure(data=traces, layout=layout).to_plotly_json()
    spec["config"] = {"displaylogo": False, "responsive": True}
    return spec


def chart_json(spec: dict[str, Any]) -> str:
    """A figure spec as JSON safe to put inside ``<script type="application/json">`` (no ``<``, ``>``, ``&``)."""
    text = json.dumps(spec, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js bundle shipped with the ``plotly`` package (minified, about 4.8 MB), safe to inline in a
    ``<script>`` element."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().replace("</script", "<\\/script")
