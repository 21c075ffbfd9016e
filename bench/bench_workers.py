"""Benchmark: the numeric comparison sharded over 1 and 2 workers, local processes and a local Ray cluster.

The PP-OCRv4 det pipeline the samples build (``samples/build/ort/ppocr_det``: original -> optimized -> QDQ, three
onnxruntime stages) compared on its first 8 samples (``samples/build/data/ppocr_det/x``, [1, 3, 736, 736] float32),
each configuration in a fresh process, timed from the call of :func:`graphaudit.audit` to its return (imports and,
for Ray, the cluster's start are outside the time: a cluster is up before a job is sent to it; local worker
processes are started inside it, as a user's run starts them). The runs are interleaved; with ``--repeat`` the
median of each is printed. Target (issue 17): 2 workers <= 0.65x the time of 1 worker on a 2-core machine.

Usage: python bench/bench_workers.py [--samples 8] [--repeat 1] [--isolated] [--no-ray]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = 0.65


def _child(config: str, samples: int, isolated: bool) -> dict:
    sys.path.insert(0, str(REPO))
    from graphaudit import audit
    from graphaudit.measure import NumericOptions
    from graphaudit.scaleout import ScaleOut

    engine, _, n = config.partition(":")
    scale = None
    if engine == "workers":
        scale = ScaleOut(workers=int(n))
    elif engine == "ray":
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        scale = ScaleOut(workers=int(n), ray="local")
    build = REPO / "samples" / "build"
    stages = build / "ort" / "ppocr_det"
    data = build / "data" / "ppocr_det" / "x"
    t0 = time.perf_counter()
    rep = audit(stages, data=data, numeric=NumericOptions(max_samples=samples, isolated=isolated, scale=scale))
    seconds = time.perf_counter() - t0
    last = rep.numeric[-1]
    outs = [t for t in last.tensors if t.is_output and t.stats.samples]
    return {"seconds": seconds, "samples": rep.report.run.samples_used,
            "output_sqnr_db": round(outs[0].stats.sqnr_db, 9) if outs else None}


def run(config: str, samples: int, isolated: bool) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", config, "--samples", str(samples)]
                       + (["--isolated"] if isolated else []), capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise SystemExit(f"{config}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each configuration (median printed)")
    ap.add_argument("--isolated", action="store_true", help="also measure each change alone (isolated regions)")
    ap.add_argument("--no-ray", action="store_true", help="local processes only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.samples, args.isolated)))
        return
    configs = ["one-process", "workers:1", "workers:2"] + ([] if args.no_ray else ["ray:1", "ray:2"])
    times: dict[str, list[float]] = {c: [] for c in configs}
    figures = {}
    for _ in range(args.repeat):
        for c in configs:  # interleaved: a slow patch of the machine hits every configuration alike
            r = run(c, args.samples, args.isolated)
            times[c].append(r["seconds"])
            figures[c] = r["output_sqnr_db"]
    med = {c: statistics.median(v) for c, v in times.items()}
    print(f"ppocr_det (3 stages, onnxruntime), {args.samples} samples, isolated={'on' if args.isolated else 'off'}, "
          f"{args.repeat} run(s) each, median wall time of audit()")
    print(f"{'configuration':<14} {'seconds':>8} {'vs 1 worker':>12}  output SQNR (dB, same in every row)")
    for c in configs:
        engine = c.split(":")[0]
        base = med.get(f"{engine}:1", med["one-process"])
        print(f"{c:<14} {med[c]:8.2f} {med[c] / base:11.2f}x  {figures[c]}")
    for engine in ("workers", "ray"):
        if f"{engine}:2" in med:
            ratio = med[f"{engine}:2"] / med[f"{engine}:1"]
            print(f"target 2 {engine} <= {TARGET}x of 1: measured {ratio:.2f}x -> "
                  f"{'met' if ratio <= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
