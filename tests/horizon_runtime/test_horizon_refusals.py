"""Stages Horizon's runtime refuses, in the toolchain's Python: each is finding N403 on its own line, the rest of the
report goes on, and nothing else reaches the terminal (the fork of onnxruntime in horizon_nn printed its own
'[E:onnxruntime:, inference_session.cc:886 Initialize] ...' line on stderr for each refusal). Breaker2 run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("horizon_nn", reason="Horizon's runtime (horizon_nn) imports only in the toolchain's Python 3.10 "
                                         "environment (samples/build/hbenv.path)")

ROOT = Path(__file__).resolve().parents[2]
ORT_SET = ROOT / "samples" / "build" / "ort" / "ppocr_cls"
ORT_DATA = ROOT / "samples" / "build" / "data" / "ppocr_cls" / "x"


def test_stages_horizon_refuses_are_n403_without_runtime_log_lines(tmp_path):
    """The bundled onnxruntime PP-OCR cls pipeline under --runtime horizon: Horizon's fork has no kernel for its
    optimized stage's Add (opset 13) nor for the QDQ stage's DequantizeLinear (its own reasons, read from the N403
    messages), so both are N403 and the original stage alone runs; stderr holds graphaudit's progress line only."""
    if not ORT_SET.is_dir():
        pytest.fail(f"{ORT_SET} is missing: run ./setup.sh")
    r = subprocess.run([sys.executable, "-m", "graphaudit", "compare", str(ORT_SET), "--data", str(ORT_DATA),
                        "--max-samples", "2", "--no-isolated", "--runtime", "horizon", "--json",
                        str(tmp_path / "r.json")], capture_output=True, text=True, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=600)
    assert r.returncode == 0, r.stderr
    assert "onnxruntime:" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert all(line.startswith("comparing stages") for line in r.stderr.strip().splitlines()), r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    n403 = {f["stage"]: f["message"] for f in report["findings"] if f["code"] == "N403"}
    assert set(n403) == {"optimized", "quantized"}, n403
    assert "Horizon's runtime cannot load the stage" in n403["optimized"]
    assert list(report["run"]["runtimes"]) == ["original"]
    # the verdict's action for each: stock onnxruntime runs these stages (it said to run under Horizon's runtime)
    actions = {v["stage"]: v["action"] for v in report["verdict"] if v["cause"] == "not-seen" and v.get("stage")}
    assert len(actions) == 2, report["verdict"]
    for action in actions.values():
        assert "--runtime onnxruntime" in action and "--runtime horizon" not in action, action
