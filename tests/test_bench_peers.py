"""bench/bench_peers.py: what it counts and measures, checked against counts known independently.

- the launcher's per-process figures: a child that holds a known number of bytes, and one stopped at the timeout;
- Polygraphy's name pairs on a generated 10-block model (a real ``polygraphy run`` twice): the names it pairs
  exactly are the tensor names both graphs' nodes write (protobuf count in the test), and the ones that are not the
  same quantity are the 10 activation outputs that the QDQ model's Convs write (by the generator's construction);
- qdq_loss_debug's pairs (its documented flow in a child process) on the same model: one activation pair per
  quantized activation (the input, each block's activation and Add but the last: 2 per block) and two weights
  (Conv weight and bias) per block, by construction.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import onnx
import pytest

from bench.bench_peers import _polygraphy, _polygraphy_exe, _qld, name_alike_other_quantity, run_tool
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
