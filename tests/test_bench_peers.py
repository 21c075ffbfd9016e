"""bench/bench_peers.py: what it counts and measures, checked against counts known independently.

- the launcher's per-process figures: a child that holds a known number of bytes, and one stopped at the timeout;
- Polygraphy's name pairs on a generated 10-block model (a real ``polygraphy run`` twice): the names it pairs
  exactly are the tensor names both graphs' nodes write (protobuf count in the test), and the ones that are not the
  same quantity are the 10 activation outputs that the QDQ model's Convs write (by the generator's construction);
- qdq_loss_debug's pairs (its documented flow in a child process) on the same model: one activation pair per
  quantized activation (the input, each block's activation and Add but the last: 2 per block) and two weights
  (Conv weight and bias) per block, by construction;
- the plain-inference floors (real onnxruntime sessions in child processes): one process holding both stages' sessions
  peaks at least as high as either stage's process alone, and the memory reason's figures are the differences and
  the bound worked out by hand.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import onnx
import pytest

from bench.bench_peers import (_floors, _polygraphy, _polygraphy_exe, _qld, memory_reason, name_alike_other_quantity,
                               run_tool)
from bench.bench_structure import SHAPE, generate

BLOCKS = 10


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen")
    _, a, b = generate(4 * BLOCKS, d)
    (d / "x").mkdir()
    np.save(d / "x" / "0.npy", np.random.default_rng(0).random(SHAPE, dtype=np.float32))
    return {"name": "generated", "a": a, "b": b, "data": d / "x", "input": "x", "samples": 1, "timeout": 120}


def test_launcher_reports_the_childs_own_peak_and_stops_at_the_timeout(tmp_path):
    hold = 200  # MB the child touches; the pytest process around it is larger than the margin below
    code = f"import numpy as np, time; a = np.ones({hold} * 2**20, np.uint8); t = time.process_time()\n" \
           "while time.process_time() - t < 0.3: pass"
    r = run_tool([sys.executable, "-c", code], tmp_path / "hold.log")
    assert r["rc"] == 0 and not r["timeout"]
    assert hold <= r["peak_rss_mb"] <= hold + 80  # + interpreter and numpy, not the parent's RSS
    assert r["cpu_s"] >= 0.3 and r["wall_s"] >= r["cpu_s"] * 0.5
    r = run_tool([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "sleep.log", timeout=1)
    assert r["timeout"] and 1 <= r["wall_s"] < 10


@pytest.mark.skipif(importlib.util.find_spec("polygraphy") is None, reason="polygraphy not installed ('.[bench]')")
def test_polygraphy_name_pairs_match_the_protobuf(case, tmp_path):
    r = _polygraphy(case, tmp_path, _polygraphy_exe())
    assert not r["timeout"] and r["rc"] in (0, 1), (tmp_path / "pg_cmp.log").read_text()[-2000:]
    by_name = {p["b"] for p in r["pg_pairs"] if p["kind"] == "name"}
    written = [{o for n in onnx.load(str(f)).graph.node for o in n.output} for f in (case["a"], case["b"])]
    assert by_name == written[0] & written[1]
    assert len(by_name) == 2 * BLOCKS  # r0..r9, a0..a8 and y
    other = name_alike_other_quantity(case["a"], case["b"], sorted(by_name))
    assert sorted(other) == sorted(f"r{i}" for i in range(BLOCKS))


def test_qdq_loss_debug_pairs_by_construction(case, tmp_path):
    r = _qld(case, tmp_path)
    res = json.loads((tmp_path / "qld.json").read_text())
    assert "error" not in res, res
    assert res["activation_pairs"] == 2 * BLOCKS and res["weight_pairs"] == 2 * BLOCKS
    assert r["pairs"] == 4 * BLOCKS and r["peak_rss_mb"] > 0


def test_plain_inference_floors(case, tmp_path):
    f = _floors(case, tmp_path)
    assert f["ok"], [p.read_text()[-500:] for p in tmp_path.glob("floor_*.log")]
    # both sessions in one process hold at least what either stage's process holds alone (1 MB of page noise)
    assert f["both_mb"] >= f["apart_mb"] - 1 and f["apart_mb"] > 30  # numpy + onnx + onnxruntime alone exceed 30 MB
    assert f["apart_cpu"] > 0 and f["both_cpu"] > 0


def test_memory_reason_figures():
    floors = {"both_mb": 86.0, "apart_mb": 83.0}
    text = memory_reason(118.0, "Polygraphy", 102.0, floors, peer_apart=True)
    # 118 - 86 = 32 over graphaudit's floor; 102 - 83 = 19 over the one-stage floor; ahead means under 102 / 1.1 =
    # 92.7 MB, i.e. 6.7 MB over the 86 MB floor
    assert "graphaudit holds 32 MB over its floor" in text
    assert "Polygraphy 19 MB over its own (one stage per process)" in text
    assert "peak under 93 MB, 7 MB over its floor" in text
    text = memory_reason(118.0, "qdq_loss_debug", 114.0, floors, peer_apart=False)
    # one process for both stages: 114 - 86 = 28; 114 / 1.1 = 103.6 MB, 17.6 over the floor
    assert "qdq_loss_debug 28 MB over its own (both stages in one process)" in text
    assert "peak under 104 MB, 18 MB over its floor" in text
