"""What the numeric step keeps in memory: the stage models it runs and onnxruntime's arena between samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphaudit.load import load_stage
from graphaudit.numeric.backends import session_options
from graphaudit.numeric.runner import StageRunner

REPO = Path(__file__).resolve().parents[1]
CLS = REPO / "samples" / "build" / "ort" / "ppocr_cls" / "ppocr_cls_qdq.onnx"
DATA = REPO / "samples" / "build" / "data" / "ppocr_cls" / "x"


def test_runner_without_its_model_runs_the_same():
    """keep_model=False drops the model once the session holds its own copy; the session computes the same
    values (bit for bit) as the runner that keeps it, on two samples in a row (the second run of a session is the
    one the memory pattern changed)."""
    stage = load_stage(CLS)
    capture = [t for t in stage.tensors.values() if not t.is_param and t.producer][:40]
    kept = StageRunner(stage, [t.name for t in capture])
    lean = StageRunner(stage, [t.name for t in capture], keep_model=False)
    assert kept.model is not None and lean.model is None
    assert lean.output_names == kept.output_names and len(lean.output_names) > 30
    for k in (0, 1):
        x = np.load(DATA / f"{k}.npy")
        a, b = kept.run({"x": x}), lean.run({"x": x})
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name], equal_nan=True), name


def test_sessions_run_without_the_memory_pattern():
    assert session_options().enable_mem_pattern is False
    assert session_options(threads=1, arena=False, parallel=2).enable_mem_pattern is False
