"""The eval hook in Horizon's runtime: top-1 of examples/eval_top1.py on every stage of the real PP-OCR cls sets,
the fixed-point quantized stage included, against an evaluation written here (each stage in its own
``horizon_nn`` session; float stages fed float32 ``pixel - 128``, the quantized stage int8 ``pixel - 128`` in the
layout its input declares; numpy argmax against the flip applied to each rendered line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("horizon_nn", reason="Horizon's runtime (horizon_nn) imports only in the toolchain's Python 3.10 "
                                         "environment (samples/build/hbenv.path)")

import numpy as np  # noqa: E402
from horizon_nn.executor.session import InferenceSession  # noqa: E402

import graphaudit  # noqa: E402

from .conftest import EVAL_LINES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EVAL = graphaudit.samples_dir() / "data" / "eval" / "ppocr_cls_hb"
SETS = [graphaudit.samples_dir() / "hb" / f"ppocr_cls_{m}" for m in ("bayes-e", "bernoulli2")]


def _independent(model: Path, meta: dict) -> float:
    sess = InferenceSession(model.read_bytes())
    inp = sess.get_inputs()[0]
    hits = 0
    for s in meta["samples"]:
        x = np.load(EVAL / "x" / f"{s['i']}.npy")  # float32 pixel - 128, NCHW
        if "int8" in inp.type:
            x = np.clip(np.rint(x), -128, 127).astype(np.int8)
            if inp.shape[-1] == 3:
                x = x.transpose(0, 2, 3, 1)
        scores = sess.run(None, {inp.name: x})[0].reshape(-1)
        hits += int(np.argmax(scores) * 180 == int(s["label"]))
    return hits / len(meta["samples"])


@pytest.mark.parametrize("set_dir", SETS, ids=[s.name for s in SETS])
def test_top1_per_stage_in_horizons_runtime(set_dir):
    if not (set_dir / "model_output").is_dir() or not (EVAL / "meta.json").is_file():
        pytest.skip(f"{set_dir.name} or {EVAL} not built (build_horizon_sets.py, build_eval_data.py)")
    m = graphaudit.evaluate_stages(set_dir / "model_output", f"{ROOT / 'examples' / 'eval_top1.py'}:evaluate", EVAL,
                                   runtime="horizon")
    meta = json.loads((EVAL / "meta.json").read_text())
    files = [next((set_dir / "model_output").glob(f"*_{r}_model.onnx"))
             for r in ("original_float", "optimized_float", "calibrated", "quantized")]
    want = [_independent(f, meta) for f in files]
    got = [s.values.get("top1") for s in m.stages]
    assert got == want and all(s.runtime.startswith("Horizon runtime") for s in m.stages), (got, want, m.stages)
    EVAL_LINES.append(f"eval hook top-1 {set_dir.name}: " + " -> ".join(f"{s.stage} {v}" for s, v in
                                                                          zip(m.stages, got)))
