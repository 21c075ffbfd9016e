"""`graphaudit lower` on every stage of every real set, in the toolchain's Python where Horizon's runtime is present:
each float stage (original, optimized, calibrated) is written only after the lowered model loads and runs in stock
onnxruntime and its outputs agree with the file run in Horizon's runtime (graphaudit.numeric.lower.verify); the
fixed-point quantized stage, whose ops have no public bit-exact specification, is refused with exit 2, one line
naming the ops, and no file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("horizon_nn", reason="Horizon's runtime (horizon_nn) imports only in the toolchain's Python 3.10 "
                                         "environment (samples/build/hbenv.path)")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from ..horizon_check import built_sets  # noqa: E402
from .conftest import LOWERING_LINES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SETS = built_sets()
ROLES = ("original_float", "optimized_float", "calibrated", "quantized")
CASES = [(s, r) for s in SETS for r in ROLES] or [(None, None)]
IDS = [f"{s.name}-{r}" for s, r in CASES] if SETS else ["no-real-set"]


@pytest.mark.parametrize("set_dir,role", CASES, ids=IDS)
def test_lower_every_real_stage(set_dir, role, tmp_path):
    if set_dir is None:
        pytest.skip("no real Horizon stage set in samples/build/hb")
    (stage,) = (set_dir / "model_output").glob(f"*_{role}_model.onnx")
    out = tmp_path / "lowered.onnx"
    r = subprocess.run([sys.executable, "-m", "graphaudit", "lower", str(stage), "-o", str(out)],
                       capture_output=True, text=True, cwd=tmp_path)
    if role == "quantized":
        assert r.returncode == 2 and not out.exists(), r.stdout
        assert len(r.stderr.strip().splitlines()) == 1 and "fixed-point" in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert "agrees with Horizon's runtime" in r.stdout, r.stdout
    # each output names the rule that accepted it: cosine >= 0.9999, or else the max difference within the tolerance
    for part in " ".join(r.stdout.split()).split("(outputs: ", 1)[1].split("; "):
        cos = float(re.search(r"cosine (\d\.\d+)", part).group(1))
        assert cos >= 0.9999 or "within the tolerance" in part, part
    # independently: the written file has no horizon op left and stock onnxruntime runs it on the declared shape
    m = onnx.load(out)
    assert not any(n.domain == "horizon" for n in m.graph.node)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
             for i in sess.get_inputs()}
    assert all(np.isfinite(o).all() for o in sess.run(None, feeds))
    checked = " ".join(r.stdout.split("checked: ", 1)[-1].split())
    LOWERING_LINES.append(f"lower {set_dir.name} {role}: {checked}")
