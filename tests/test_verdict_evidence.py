"""The verdict's evidence line quotes what was measured, not the rule's catalogue summary."""

from __future__ import annotations

import numpy as np

import graphaudit
from graphaudit.catalogue import load_catalogue
from graphaudit.measure import NumericOptions


def test_nan_data_evidence_is_the_count(samples, tmp_path):
    """P209's NaN/inf variant: the count of non-finite values (numpy.isfinite over the files written here), not
    P209's summary (constant, near-duplicate and noise samples)."""
    files = sorted((samples / "data" / "ppocr_cls" / "x").glob("*.npy"))[:3]
    data = tmp_path / "data"
    data.mkdir()
    bad = 0
    for k, f in enumerate(files):
        x = np.load(f).astype(np.float32)
        if k == 1:
            x[0, 0, :5, :7] = np.nan
            x[0, 2, 10, :3] = np.inf
        bad += int(np.sum(~np.isfinite(x)))
        np.save(data / f"{k}.npy", x)
    assert bad == 38
    au = graphaudit.audit([samples / "ort" / "ppocr_cls"], data=data, numeric=NumericOptions(isolated=False))
    line = au.report.verdict[0]
    assert line.cause == "harness" and "P209" in line.codes, line
    assert f"{bad:,} NaN or infinite value(s) in the data for input 'x'" in line.evidence, line.evidence
    assert load_catalogue()["P209"].summary not in line.evidence


def test_config_line_names_the_yaml_line_and_html_counts_say_what_they_count(tmp_path):
    """A real hb_mapper set whose config says norm_type data_scale beside a mean_value (C309): the CONFIG verdict
    line names config.yaml and the line of norm_type (found here in the YAML text), in the console and the HTML
    report (read in chromium). The HTML chart caption's isolated count is the changes whose output is a compared
    tensor, and the verdict names the kind its "changes of the same kind" are (both counted from report.json)."""
    import json
    import shutil
    from pathlib import Path

    import pytest

    from graphaudit.cli import main

    src = Path(__file__).resolve().parents[1] / "samples" / "build" / "hb" / "ppocr_cls_bayes-e"
    if not (src / "model_output").is_dir():
        pytest.skip("real PP-OCR cls set not built (setup.sh)")
    proj = tmp_path / "proj"
    shutil.copytree(src, proj)
    cfg = proj / "config.yaml"
    text = cfg.read_text().replace("norm_type: 'data_mean_and_scale'", "norm_type: 'data_scale'")
    cfg.write_text(text)
    line = next(k for k, s in enumerate(text.splitlines(), 1) if s.strip().startswith("norm_type:"))
    out = tmp_path / "out"
    rc = main(["explain", str(proj / "model_output"), "--config", str(cfg), "--out", str(out), "--max-samples", "2"])
    assert rc == 1
    rep = json.loads((out / "report.json").read_text())
    v = next(v for v in rep["verdict"] if v["cause"] == "config" and "C309" in v["codes"])
    assert f"config.yaml:{line}:" in v["text"] and "input_parameters.norm_type" in v["text"], v["text"]

    (num,) = [n for n in rep["numeric"] if (n["a"], n["b"]) == ("optimized", "calibrated")]
    compared = {t["b_tensor"] for t in num["tensors"] if t["sqnr_db"] not in ("nan", "-inf")}
    drawn = sum(1 for r in num["regions"] if r["outputs"] and r["outputs"][0][1] in compared
                and r["sqnr_db"] not in ("nan", "-inf"))
    (q,) = [v for v in rep["verdict"] if v["cause"] == "quantization"]
    kinds = {f"{r['kind']} {r['pattern']}" for r in num["regions"]}
    named_kind = next(k for k in kinds if f"changes of the same kind, {k}" in q["text"])
    peers = sum(1 for r in num["regions"] if f"{r['kind']} {r['pattern']}" == named_kind)
    assert f"over the {peers} changes of the same kind, {named_kind}" in q["text"]

    from .test_html import CHROMIUM, LAUNCH_ARGS
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = b.new_page()
        page.goto((out / "report.html").as_uri())
        verdict = page.locator(".verdict-line").filter(has_text="norm_type 'data_scale'").first.inner_text()
        assert f"config.yaml:{line}:" in verdict, verdict
        caption = page.locator(".numeric figcaption").nth(1).inner_text()
        b.close()
    assert f"{drawn} of the {num['regions_measured']} changes measured alone" in caption, caption
    assert "whose output is one of the compared tensors" in caption
