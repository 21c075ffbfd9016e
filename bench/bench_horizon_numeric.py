"""Benchmark: the numeric comparison of a real hb_mapper stage set in Horizon's runtime against plain inference.

Run it with the toolchain's Python (``samples/build/hbvenv/bin/python bench/bench_horizon_numeric.py``): Horizon's
runtime (``horizon_nn``) is the truth for the fixed-point stage and imports only there. Each measurement is a fresh
process; imports are outside the time, peak RSS (VmHWM) is the process's own.

- floor: the four stage files (original_float, optimized_float, calibrated, quantized) loaded, one Horizon session
  each (as graphaudit makes them: ``graphaudit.numeric.backends.make_session``), and ``--samples`` samples through
  every stage (each stage fed zeros of its input's shape and dtype: the time of these convolutional models does
  not depend on the values), outputs dropped;
- graphaudit: ``graphaudit.audit(SET/model_output, data=SET/calibration_data_bgr, config=SET/config.yaml)`` with
  ``NumericOptions(max_samples=N, runtime="horizon")``: structure, then every aligned tensor of the four stages
  captured and compared, and each change measured alone (isolated) unless ``--no-isolated``.

Issue 17's numeric targets are stated against plain inference: <= 1.5x without isolated measurement, <= 3x with it,
peak RSS <= the floor's + one sample's aligned tensors (printed as graphaudit's captured bytes of one sample).
Where the runtime returns copies of what it computes (Horizon's fork does: its arrays own their data, where stock
onnxruntime 1.32 returns views of its own buffers), a stage's captured tensors are held twice while it runs. When
the RSS target is missed, a last line ("why: ...") says whether that second copy of the stage that captures the most
per sample is as large as the miss, or graphaudit's fixed cost decides the peak (small models).

Usage: samples/build/hbvenv/bin/python bench/bench_horizon_numeric.py [--set ppocr_det_bayes-e] [--samples 4]
       [--repeat 1] [--no-isolated]
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
SETS = REPO / "samples" / "build" / "hb"
ORDER = ("original_float", "optimized_float", "calibrated", "quantized")


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _floor(set_dir: Path, samples: int) -> dict:
    import numpy as np

    from graphaudit.numeric.backends import make_session

    files = [next((set_dir / "model_output").glob(f"*_{s}_model.onnx")) for s in ORDER]
    dtypes = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8}
    t0 = time.perf_counter()
    sessions = [make_session(f.read_bytes(), "horizon") for f in files]
    feeds = [{i.name: np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in i.shape], dtypes[i.type])
              for i in s.get_inputs()} for s in sessions]
    for _ in range(samples):
        for s, f in zip(sessions, feeds):
            s.run(None, f)
    return {"seconds": time.perf_counter() - t0, "rss_mb": _peak_rss_mb()}


def _graphaudit(set_dir: Path, samples: int, isolated: bool) -> dict:
    import graphaudit
    from graphaudit.measure import NumericOptions
    from graphaudit.numeric.runner import StageRunner

    # what each stage's run returns (bytes per stage, of its largest sample) and whether the runtime returns copies
    # (arrays that own their data) or views of its own buffers: read off the values (a sum of sizes per run)
    stage_bytes: dict[str, int] = {}
    owns: set[bool] = set()  # flags.owndata of every array returned
    run_stage = StageRunner.run

    def counted(self, feeds, sample=None):
        values = run_stage(self, feeds, sample)
        stage_bytes[self.stage.name] = max(stage_bytes.get(self.stage.name, 0),
                                           sum(v.nbytes for v in values.values()))
        owns.update(v.flags.owndata for v in values.values())
        return values

    StageRunner.run = counted
    try:
        t0 = time.perf_counter()
        au = graphaudit.audit([set_dir / "model_output"], data=set_dir / "calibration_data_bgr",
                              config=set_dir / "config.yaml",
                              numeric=NumericOptions(max_samples=samples, runtime="horizon", isolated=isolated))
        seconds = time.perf_counter() - t0
    finally:
        StageRunner.run = run_stage
    pairs = sum(len(t.tensors) for t in au.numeric)
    regions = sum(len(t.regions) for t in au.numeric)
    aligned = sum(t.stats.count // max(t.stats.samples, 1) * 4 for tr in au.numeric for t in tr.tensors
                  if t.stats.samples)
    largest = max(stage_bytes, key=stage_bytes.get)
    return {"seconds": seconds, "rss_mb": _peak_rss_mb(), "samples": au.report.run.samples_used, "pairs": pairs,
            "regions": regions, "aligned_mb_per_sample": aligned / 2**20, "largest_stage": largest,
            "largest_stage_mb": stage_bytes[largest] / 2**20, "copies": owns == {True}}


def _child(kind: str, set_name: str, samples: int, isolated: bool) -> dict:
    sys.path.insert(0, str(REPO))
    set_dir = SETS / set_name
    return _floor(set_dir, samples) if kind == "floor" else _graphaudit(set_dir, samples, isolated)


def _run(kind: str, args) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", kind, "--set", args.set, "--samples", str(args.samples)]
                       + (["--no-isolated"] if args.no_isolated else []), capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise SystemExit(f"{kind} run failed: {p.stderr.strip()[-600:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="ppocr_det_bayes-e", help="a set under samples/build/hb (default ppocr_det_bayes-e)")
    ap.add_argument("--samples", type=int, default=4, help="samples of the set's calibration data (default 4)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved runs of each side, medians printed (default 1)")
    ap.add_argument("--no-isolated", action="store_true")
    ap.add_argument("--child", choices=("floor", "graphaudit"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.set, args.samples, not args.no_isolated)))
        return 0
    try:
        import horizon_nn  # noqa: F401
    except ImportError:
        print("Horizon's runtime does not import here: run this with samples/build/hbvenv/bin/python "
              "(./setup.sh builds it where Python 3.10 is available)")
        return 1
    if not (SETS / args.set / "model_output").is_dir():
        print(f"no stage set {SETS / args.set} (./setup.sh builds the real sets)")
        return 1
    runs: dict[str, list[dict]] = {"floor": [], "graphaudit": []}
    for _ in range(args.repeat):  # interleaved
        for kind in runs:
            runs[kind].append(_run(kind, args))
    med = {k: {f: statistics.median(r[f] for r in v) for f in ("seconds", "rss_mb")} for k, v in runs.items()}
    ga, fl = runs["graphaudit"][-1], med["floor"]
    target = 1.5 if args.no_isolated else 3.0
    ratio = med["graphaudit"]["seconds"] / fl["seconds"]
    print(f"{args.set}, Horizon runtime, {ga['samples']} sample(s), isolated={'off' if args.no_isolated else 'on'} "
          f"({ga['pairs']} tensor pairs, {ga['regions']} regions), {args.repeat} run(s) each, medians")
    print("| | seconds | peak RSS |")
    print("|---|---|---|")
    print(f"| floor: 4 Horizon sessions, plain inference | {fl['seconds']:.2f} s | {fl['rss_mb']:.0f} MB |")
    print(f"| graphaudit audit() with --data | {med['graphaudit']['seconds']:.2f} s | "
          f"{med['graphaudit']['rss_mb']:.0f} MB |")
    print(f"ratio {ratio:.2f}x (target <= {target:g}x: {'met' if ratio <= target else 'NOT met'}); RSS over the floor "
          f"{med['graphaudit']['rss_mb'] - fl['rss_mb']:.0f} MB against one sample's compared tensors "
          f"{ga['aligned_mb_per_sample']:.0f} MB (float32 bytes of every compared pair's reference)")
    allowed = fl["rss_mb"] + ga["aligned_mb_per_sample"]
    peak = med["graphaudit"]["rss_mb"]
    print(f"peak RSS {peak:.0f} MB (target <= floor {fl['rss_mb']:.0f} MB + one sample's compared tensors "
          f"{ga['aligned_mb_per_sample']:.0f} MB = {allowed:.0f} MB: {'met' if peak <= allowed else 'NOT met'})")
    over = peak - allowed
    if over > 0:  # why: the runtime's copies where they are as large as the miss, else graphaudit's fixed cost
        copy = ga["largest_stage_mb"] if ga["copies"] else 0.0
        if copy >= over:
            print(f"why: Horizon's runtime returns copies of the tensors it computes (its arrays own their data; "
                  f"stock onnxruntime 1.32 returns views of its own buffers), so while a stage runs its captured "
                  f"tensors are held twice: the largest stage, {ga['largest_stage']}, captures "
                  f"{ga['largest_stage_mb']:.0f} MB per sample, more than the {over:.0f} MB over the target")
        else:
            print(f"why: {over:.0f} MB over the target, more than the runtime's second copy of the largest stage's "
                  f"tensors ({copy:.0f} MB, {ga['largest_stage']}): on a model this small graphaudit's fixed cost "
                  "(its modules, the structure step's tables and the region sessions) decides the peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
