"""S104 on a real ``calibration_type: skip`` build: hb_mapper 1.24.3 converts PP-OCR cls (the bayes-e set's model,
config and calibration files) with only ``calibration_type`` changed to ``skip``, and graphaudit must call the
calibrated stage skipped; the set as built (calibration_type default) must not be.

The expected count comes from the protobuf, not from graphaudit: activation HzCalibration nodes (input not an
initializer), minus the one on the graph input, minus those reading a HardSigmoid output; every one of them has
thresholds [1.0] in the skip build (asserted here from the node attributes). A new user's real skip build went
unflagged before: 9 HardSigmoid outputs carry 0.666667 there, and the rule asked for every threshold to be 1.0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import yaml

pytest.importorskip("horizon_nn", reason="hb_mapper runs only in the toolchain's Python 3.10 venv")

import graphaudit  # noqa: E402

from ..horizon_check import built_sets  # noqa: E402

SETS = {p.name: p for p in built_sets()}
NAME = "ppocr_cls_bayes-e"


def _attr(node: onnx.NodeProto, name: str):
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)


@pytest.fixture(scope="module")
def skip_build(tmp_path_factory) -> Path:
    if NAME not in SETS:
        pytest.skip(f"{NAME} not built")
    src, work = SETS[NAME], tmp_path_factory.mktemp("skip") / NAME
    work.mkdir()
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    cfg["calibration_parameters"]["calibration_type"] = "skip"
    for p in src.iterdir():
        if p.is_file() and p.suffix == ".onnx":
            shutil.copy(p, work / p.name)
        elif p.is_dir() and p.name.startswith("calibration"):
            shutil.copytree(p, work / p.name)
    (work / "config.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, PATH=f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(Path(sys.prefix) / "bin" / "hb_mapper"), "makertbin", "--model-type", "onnx",
                           "--config", "config.yaml"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return work


def _expected_skipped(calibrated: Path) -> int:
    m = onnx.load(str(calibrated))
    inits = {i.name for i in m.graph.initializer}
    producer = {o: n.op_type for n in m.graph.node for o in n.output}
    inputs = {i.name for i in m.graph.input}
    act = [n for n in m.graph.node if n.op_type == "HzCalibration" and n.input[0] not in inits]
    inside = [n for n in act if n.input[0] not in inputs and producer.get(n.input[0]) != "HardSigmoid"]
    assert all(list(_attr(n, "thresholds")) == [1.0] for n in inside)
    assert any(list(_attr(n, "thresholds")) != [1.0] for n in act if producer.get(n.input[0]) == "HardSigmoid")
    return len(inside)


def test_real_skip_build_is_flagged(skip_build):
    calibrated = next((skip_build / "model_output").glob("*_calibrated_model.onnx"))
    want = _expected_skipped(calibrated)
    assert want > 50
    au = graphaudit.audit([skip_build / "model_output"])
    s104 = [f for f in au.report.findings if f.code == "S104"]
    assert [f.stage for f in s104] == ["calibrated"]
    assert s104[0].evidence["activation_nodes"] == want
    assert au.report.verdict[0].cause == "toolchain" and "S104" in au.report.verdict[0].codes


def test_calibrated_build_is_not_flagged():
    if NAME not in SETS:
        pytest.skip(f"{NAME} not built")
    au = graphaudit.audit([SETS[NAME] / "model_output"])
    assert not [f for f in au.report.findings if f.code == "S104"]
