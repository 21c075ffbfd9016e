"""Benchmark: the numeric comparison sharded over 1 and 2 workers, local processes and a local Ray cluster.

The PP-OCRv4 det pipeline the samples build (``samples/build/ort/ppocr_det``: original -> optimized -> QDQ, three
onnxruntime stages) compared on its first 8 samples (``samples/build/data/ppocr_det/x``, [1, 3, 736, 736] float32),
each configuration in a fresh process, timed from the call of :func:`graphaudit.audit` to its return (imports and,
for Ray, the cluster's start are outside the time: a cluster is up before a job is sent to it; local worker
processes are started inside it, as a user's run starts them). The runs are interleaved; with ``--repeat`` the
median of each is printed. Target (issue 17): 2 workers <= 0.65x the time of 1 worker on a 2-core machine.

With ``--horizon-set NAME`` (run it with the toolchain's Python, ``samples/build/hbvenv/bin/python``) the pipeline
is the real hb_mapper set ``samples/build/hb/NAME`` instead (four stages, its ``calibration_data_bgr`` and
``config.yaml``) in Horizon's runtime, whose fixed-point kernels keep one core busy per process: there a second
worker has a core of its own to use.

Usage: python bench/bench_workers.py [--samples 8] [--repeat 1] [--isolated] [--no-ray] [--horizon-set NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = 0.65


def _cpu() -> float:
    """CPU seconds (user + system) of this process and of its reaped children (local worker processes are joined
    before :func:`graphaudit.audit` returns; Ray's workers are the raylet's children, not counted)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _child(config: str, samples: int, isolated: bool, horizon_set: str | None = None) -> dict:
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
    config, runtime = None, "auto"
    if horizon_set:
        hb = build / "hb" / horizon_set
        stages, data, config, runtime = hb / "model_output", hb / "calibration_data_bgr", hb / "config.yaml", "horizon"
    t0, c0 = time.perf_counter(), _cpu()
    rep = audit(stages, data=data, config=config,
                numeric=NumericOptions(max_samples=samples, isolated=isolated, scale=scale, runtime=runtime))
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    last = rep.numeric[-1]
    outs = [t for t in last.tensors if t.is_output and t.stats.samples]
    return {"seconds": seconds, "cpu": None if engine == "ray" else cpu, "samples": rep.report.run.samples_used,
            "output_sqnr_db": round(outs[0].stats.sqnr_db, 9) if outs else None}


def run(config: str, samples: int, isolated: bool, horizon_set: str | None = None) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", config, "--samples", str(samples)]
                       + (["--isolated"] if isolated else []) + (["--horizon-set", horizon_set] if horizon_set else []),
                       capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise SystemExit(f"{config}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each configuration (median printed)")
    ap.add_argument("--isolated", action="store_true", help="also measure each change alone (isolated regions)")
    ap.add_argument("--no-ray", action="store_true", help="local processes only")
    ap.add_argument("--horizon-set", help="a real set under samples/build/hb, in Horizon's runtime (toolchain Python)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.samples, args.isolated, args.horizon_set)))
        return
    configs = ["one-process", "workers:1", "workers:2"] + ([] if args.no_ray else ["ray:1", "ray:2"])
    times: dict[str, list[float]] = {c: [] for c in configs}
    cpus: dict[str, list[float]] = {c: [] for c in configs}
    figures = {}
    for _ in range(args.repeat):
        for c in configs:  # interleaved: a slow patch of the machine hits every configuration alike
            r = run(c, args.samples, args.isolated, args.horizon_set)
            times[c].append(r["seconds"])
            if r.get("cpu") is not None:
                cpus[c].append(r["cpu"])
            figures[c] = r["output_sqnr_db"]
    med = {c: statistics.median(v) for c, v in times.items()}
    what = f"{args.horizon_set} (4 stages, Horizon's runtime)" if args.horizon_set else "ppocr_det (3 stages, onnxruntime)"
    print(f"{what}, {args.samples} samples, isolated={'on' if args.isolated else 'off'}, "
          f"{args.repeat} run(s) each, median wall time of audit()")
    cpu = {c: statistics.median(v) for c, v in cpus.items() if v}
    print(f"{'configuration':<14} {'seconds':>8} {'vs 1 worker':>12} {'CPU s':>7} {'cores busy':>10}  "
          "output SQNR (dB, same in every row)")
    for c in configs:
        engine = c.split(":")[0]
        # each engine's rows against its own 1 worker; the one-process row against 1 local worker
        base = med.get("workers:1" if engine == "one-process" else f"{engine}:1")
        vs = f"{med[c] / base:11.2f}x" if base else f"{'-':>12}"
        busy = f"{cpu[c] / med[c]:10.2f}" if c in cpu else f"{'n/a':>10}"
        used = f"{cpu[c]:7.1f}" if c in cpu else f"{'n/a':>7}"
        print(f"{c:<14} {med[c]:8.2f} {vs} {used} {busy}  {figures[c]}")
    cores = os.cpu_count() or 1
    for engine in ("workers", "ray"):
        if f"{engine}:2" in med:
            ratio = med[f"{engine}:2"] / med[f"{engine}:1"]
            print(f"target 2 {engine} <= {TARGET}x of 1: measured {ratio:.2f}x -> "
                  f"{'met' if ratio <= TARGET else 'NOT met'}")
    if "workers:1" in cpu:
        # the same work (its CPU seconds) on at most ``cores`` cores cannot take less than CPU / cores of wall time
        bound = cpu["workers:1"] / cores / med["workers:1"]
        print(f"bound on this machine: 1 worker keeps {cpu['workers:1'] / med['workers:1']:.2f} of {cores} cores "
              f"busy, so the same CPU seconds on {cores} cores take at least {bound:.2f}x its time "
              f"(2 workers did {cpu.get('workers:2', float('nan')):.1f} CPU s against {cpu['workers:1']:.1f})")


if __name__ == "__main__":
    main()
