"""Benchmark: load + align + classify on the sample pipelines and on a generated 20,000-node model.

Prints wall time and peak RSS of graphaudit's structural pass and of plain ``onnx.load`` of the same
files, and their ratio. Each measurement runs in a fresh subprocess so peak RSS is its own.

Usage: python bench/bench_align.py [--nodes 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _peak_rss_mb() -> float:
    """Peak resident set size of this process (VmHWM; unlike ru_maxrss it is not inherited across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(kind: str, files: list[str], repeat: int) -> dict:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        if kind == "onnx.load":
            import onnx

            for f in files:
                onnx.load(f, load_external_data=False)
        else:
            from graphaudit.classify import classify, coverage
            from graphaudit.lineage import align_chain
            from graphaudit.load import load_stage

            stages = [load_stage(f) for f in files]
            lin = align_chain(stages)
            covs = [coverage(al, classify(al)) for al in lin.alignments]
        times.append(time.perf_counter() - t0)
    out = {"seconds": min(times), "peak_rss_mb": _peak_rss_mb()}
    if kind != "onnx.load":
        out["coverage"] = [round(min(c.a_ratio, c.b_ratio), 4) for c in covs]
    return out


def measure(kind: str, files: list[Path], repeat: int) -> dict:
    code = (f"import json,sys; sys.path.insert(0, {str(REPO)!r}); sys.path.insert(0, {str(REPO / 'bench')!r});"
            f"from bench_align import _child; print(json.dumps(_child({kind!r}, {[str(f) for f in files]!r}, {repeat})))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def generate(n_nodes: int, out_dir: Path, kept_chain: bool = False) -> list[Path]:
    """A residual chain of Conv+BatchNormalization+Relu+Add blocks (4 nodes each) and its onnxruntime-optimized form
    (every BatchNormalization fused). With ``kept_chain`` each block also holds Conv -> Relu after the first Relu
    (6 nodes per block): runs of nodes that the optimizer keeps, as the render benchmark needs."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    c = 8
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    per_block = 6 if kept_chain else 4
    for i in range(n_nodes // per_block):
        w = numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.1, f"w{i}")
        s, b, m, v = (numpy_helper.from_array(a.astype(np.float32), f"{k}{i}") for k, a in
                      zip("sbmv", (np.ones(c), np.zeros(c), rng.standard_normal(c) * 0.01, np.ones(c))))
        inits += [w, s, b, m, v]
        nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], name=f"conv{i}"),
                  helper.make_node("BatchNormalization", [f"c{i}", f"s{i}", f"b{i}", f"m{i}", f"v{i}"], [f"n{i}"],
                                   name=f"bn{i}"),
                  helper.make_node("Relu", [f"n{i}"], [f"r{i}"], name=f"relu{i}")]
        last = f"r{i}"
        if kept_chain:
            inits.append(numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.1, f"u{i}"))
            nodes += [helper.make_node("Conv", [f"r{i}", f"u{i}"], [f"d{i}"], name=f"conv{i}b"),
                      helper.make_node("Relu", [f"d{i}"], [f"e{i}"], name=f"relu{i}b")]
            last = f"e{i}"
        nodes.append(helper.make_node("Add", [last, prev], [f"a{i}"], name=f"add{i}"))
        prev = f"a{i}"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c, 4, 4])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, c, 4, 4])], inits)
    a = out_dir / "gen_original.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), a)
    b = out_dir / "gen_optimized.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(b)
    ort.InferenceSession(str(a), so, providers=["CPUExecutionProvider"])
    return [a, b]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from graphaudit.samples import bundled_pipelines
    from graphaudit.toolchains import discover_stages

    cases = []
    for title, paths in bundled_pipelines():
        cases.append((title, [f.path for f in discover_stages(paths)]))
    with tempfile.TemporaryDirectory() as tmp:
        gen = generate(args.nodes, Path(tmp))
        import onnx
        n = sum(len(onnx.load(f, load_external_data=False).graph.node) for f in gen)
        cases.append((f"generated chain ({n} nodes in 2 stages)", gen))
        print(f"{'case':55} {'stages':>6} {'onnx.load s':>11} {'graphaudit s':>12} {'ratio':>6} "
              f"{'RSS load MB':>11} {'RSS ga MB':>9}  coverage")
        for title, files in cases:
            base = measure("onnx.load", files, args.repeat)
            ga = measure("graphaudit", files, args.repeat)
            print(f"{title[:55]:55} {len(files):>6} {base['seconds']:>11.3f} {ga['seconds']:>12.3f} "
                  f"{ga['seconds'] / base['seconds']:>6.1f} {base['peak_rss_mb']:>11.0f} {ga['peak_rss_mb']:>9.0f}  "
                  f"{ga['coverage']}")


if __name__ == "__main__":
    main()
