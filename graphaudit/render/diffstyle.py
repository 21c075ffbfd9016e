"""Look of the diff graph: colours per change kind, error bands, HTML-like node labels, tooltips, the legend."""

from __future__ import annotations

import html
from collections import Counter

from .diffmodel import KIND_ORDER
from .text import printable

#: Longest name shown in a node label (longer ones are cut with an ellipsis; the tooltip keeps more).
MAX_LABEL_CHARS = 120


def _e(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    """A name for an HTML-like Graphviz label: control characters escaped (they are not XML), cut at ``limit``."""
    t = printable(str(text))
    return html.escape(t if len(t) <= limit else t[:limit - 1] + "\u2026")

__all__ = ["KIND_COLORS", "SQNR_BANDS", "FIRST_DIVERGENCE_COLOR", "node_label", "node_tooltip", "legend_label",
           "format_error"]

#: Fill and stroke colour per kind (ColorBrewer light/dark pairs; kept nodes plain).
KIND_COLORS: dict[str, tuple[str, str]] = {
    "kept": ("#ffffff", "#707070"),
    "fused": ("#9ecae1", "#2171b5"),
    "replaced": ("#cbb3e3", "#6a3d9a"),
    "modified": ("#fee391", "#a67c00"),
    "inserted": ("#a1d99b", "#238b45"),
    "removed": ("#fcbba1", "#cb181d"),
    "unmatched": ("#bdbdbd", "#000000"),
    "collapsed": ("#f2f2f2", "#9e9e9e"),
    "io": ("#ffffff", "#000000"),
}

#: Error shading: (lowest SQNR in dB of the band, fill, font colour), ColorBrewer YlOrRd, best first.
SQNR_BANDS: tuple[tuple[float, str, str], ...] = (
    (40.0, "#ffffcc", "#000000"), (30.0, "#fed976", "#000000"), (20.0, "#feb24c", "#000000"),
    (10.0, "#fd8d3c", "#000000"), (0.0, "#f03b20", "#ffffff"), (float("-inf"), "#bd0026", "#ffffff"))

#: Outline of the first diverging node.
FIRST_DIVERGENCE_COLOR = "#e31a1c"


def _short(text: str, n: int = 36) -> str:
    return text if len(text) <= n else text[: n // 2 - 1] + "\u2026" + text[-(n // 2 - 1):]


def _band(sqnr: float | None) -> tuple[str, str]:
    """(fill, font colour) of the :data:`SQNR_BANDS` band holding ``sqnr`` (dB); NaN falls in the worst band."""
    if sqnr is None:
        return "#ffffff", "#000000"
    for low, fill, font in SQNR_BANDS:
        if sqnr >= low:
            return fill, font
    return SQNR_BANDS[-1][1], SQNR_BANDS[-1][2]


def format_error(err: dict) -> str:
    """``"cos 0.9915 · SQNR 17.6 dB"`` from ``{"cosine", "sqnr_db"}`` (floats or None)."""
    cos, sq = err.get("cosine"), err.get("sqnr_db")
    parts = [f"cos {cos:.4f}" if cos is not None else "cos n/a", f"SQNR {sq:.1f} dB" if sq is not None else "SQNR n/a"]
    return " \u00b7 ".join(parts)


def node_label(d: dict) -> str:
    """HTML-like Graphviz label of a drawn item (attributes of :func:`graphaudit.render.diffmodel.build_items`).

    Rows: op type (bold), node name, up to two change patterns, inputs/outputs left out by a focus,
    weight-wrapper badges (``w: HzCal``), and with numeric data an error row filled by its SQNR band.
    Collapsed chains show their size and most common ops.
    """
    e = _e
    rows = []
    if d["kind"] == "collapsed":
        if len(d["members"]) <= 4:
            ops, more = " \u2192 ".join(d["sequence"]), ""
        else:
            ops = ", ".join(f"{op}\u00d7{c}" if c > 1 else op for op, c in d["ops"].most_common(3))
            more = "\u2026" if len(d["ops"]) > 3 else ""
        rows.append(f"<B>{len(d['members'])} kept nodes</B>")
        rows.append(f'<FONT POINT-SIZE="8">{e(ops)}{more}</FONT>')
    else:
        rows.append(f"<B>{e(d['op'])}</B>")
        if d["name"] != d["op"]:
            rows.append(f'<FONT POINT-SIZE="8">{e(_short(d["name"]))}</FONT>')
        for line in d.get("short", [])[:2]:
            rows.append(f'<FONT POINT-SIZE="8"><I>{e(_short(line, 48))}</I></FONT>')
        if d.get("hidden"):
            n_in, n_out = d["hidden"]
            parts = (f"{n_in} input(s)" if n_in else "", f"{n_out} output(s)" if n_out else "")
            more = ", ".join(x for x in parts if x)
            rows.append(f'<FONT POINT-SIZE="8" COLOR="#707070">+{more} not drawn</FONT>')
        if d.get("weights"):
            rows.append(f'<FONT POINT-SIZE="8">w: {e(", ".join(sorted({t for t, _k in d["weights"]})))}</FONT>')
    cells = "".join(f"<TR><TD>{r}</TD></TR>" for r in rows)
    err = d.get("error")
    if err is not None:
        fill, font = _band(err.get("sqnr_db"))
        mark = "first divergence: " if d.get("first_divergence") else ""
        cells += (f'<TR><TD BGCOLOR="{fill}"><FONT POINT-SIZE="8" COLOR="{font}">{e(mark + format_error(err))}'
                  f"</FONT></TD></TR>")
    return f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{cells}</TABLE>>'


def node_tooltip(key: str, d: dict) -> str:
    """Plain-text tooltip: op type and name, kind, every change, origin nodes, weight wrappers, error."""
    if d["kind"] == "collapsed":
        return f"{len(d['members'])} kept nodes: " + ", ".join(m.split(":", 1)[1] for m in d["members"][:20])
    lines = [f"{d['op']} {d['name']}", f"kind: {d['kind']}"]
    lines += [f"change: {x}" for x in d.get("lines", [])]
    if d.get("origin") and d["origin"] != d.get("ids"):
        lines.append("from: " + ", ".join(d["origin"][:12]) + (" ..." if len(d["origin"]) > 12 else ""))
    lines += [f"weight: {t} ({k})" for t, k in d.get("weights", [])]
    if d.get("error"):
        err = d["error"]
        lines.append(f"error: {format_error(err)} at {err['tensor']} ({err['transition']})")
    if d.get("first_divergence"):
        lines.append("first divergence")
    return "\n".join(lines).replace("\\", "\\\\")


def legend_label(counts: Counter, badges: Counter, numeric: bool, expand: bool, first_div: bool) -> str:
    """The legend as an HTML-like label: kinds drawn (node counts), badges, error bands, first divergence."""
    e = _e
    rows = ['<TR><TD COLSPAN="2"><B>legend</B></TD></TR>']
    for kind in (*KIND_ORDER, "collapsed"):
        fill, stroke = KIND_COLORS[kind]
        n = counts.get(kind, 0)
        if not n and kind != "kept" and not badges.get(kind):
            continue
        rows.append(f'<TR><TD BGCOLOR="{fill}" BORDER="1" COLOR="{stroke}" WIDTH="24"> </TD>'
                    f'<TD ALIGN="LEFT">{kind}{" (dashed: earlier stage)" if kind == "removed" else ""}: {n} node(s)'
                    f'{f", {badges[kind]} badge(s)" if badges.get(kind) else ""}</TD></TR>')
    if not expand:
        rows.append('<TR><TD><FONT POINT-SIZE="9">Q/DQ</FONT></TD><TD ALIGN="LEFT">wrappers collapsed onto the tensor '
                    "(edge badge; w: on weights)</TD></TR>")
    if numeric:
        rows.append('<TR><TD COLSPAN="2"><B>output error (SQNR)</B></TD></TR>')
        bands = list(SQNR_BANDS)
        for k, (low, fill, font) in enumerate(bands):
            text = f"\u2265 {low:g} dB" if k == 0 else (f"{low:g} \u2013 {bands[k - 1][0]:g} dB" if low != float("-inf")
                                                        else f"< {bands[k - 1][0]:g} dB")
            rows.append(f'<TR><TD BGCOLOR="{fill}" WIDTH="24"> </TD><TD ALIGN="LEFT">{e(text)}</TD></TR>')
    if first_div:
        rows.append(f'<TR><TD BORDER="2" COLOR="{FIRST_DIVERGENCE_COLOR}" WIDTH="24"> </TD>'
                    '<TD ALIGN="LEFT">first divergence (cosine below the threshold)</TD></TR>')
    return f'<<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="2" CELLPADDING="2">{"".join(rows)}</TABLE>>'
