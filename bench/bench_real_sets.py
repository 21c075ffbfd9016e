"""Benchmark: ``graphaudit explain`` (structure) on every real Horizon stage set against plain ``onnx.load``.

For each set that set-up built in ``samples/build/hb/<model>_<march>/`` (hb_mapper 1.x output: original_float,
optimized_float, calibrated, quantized), prints the wall time of the whole ``graphaudit explain SET/model_output
--no-report`` command in a fresh process, of loading, aligning and classifying the four stages in-process
(``bench_align``'s measurement), and of ``onnx.load`` of the four files, with their ratio, peak RSS and the lowest
coverage of the three transitions.

Usage: python bench/bench_real_sets.py [--repeat 3] [--sets DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_align import measure  # noqa: E402


def _stage_files(set_dir: Path) -> list[Path]:
    mo = set_dir / "model_output"
    order = ("_original_float_model.onnx", "_optimized_float_model.onnx", "_calibrated_model.onnx",
             "_quantized_model.onnx")
    return [next(mo.glob(f"*{suffix}")) for suffix in order]


def _explain_seconds(set_dir: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "graphaudit", "explain", str(set_dir / "model_output"), "--no-report"],
                       capture_output=True, check=False, cwd=REPO)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sets", type=Path, default=REPO / "samples" / "build" / "hb")
    args = ap.parse_args(argv)
    sets = sorted(p for p in args.sets.glob("*/") if (p / "model_output").is_dir())
    if not sets:
        print(f"no real stage sets in {args.sets} (./setup.sh builds them where Python 3.10 is available)")
        return 1
    print("| set | nodes (4 stages) | onnx.load | load+align+classify | ratio | explain command | peak RSS onnx.load / "
          "graphaudit | min coverage |")
    print("|---|---|---|---|---|---|---|---|")
    for s in sets:
        files = _stage_files(s)
        import onnx

        nodes = "/".join(str(len(onnx.load(str(f), load_external_data=False).graph.node)) for f in files)
        base = measure("onnx.load", files, args.repeat)
        ga = measure("graphaudit", files, args.repeat)
        cmd = _explain_seconds(s, args.repeat)
        print(f"| {s.name} | {nodes} | {base['seconds']:.3f} s | {ga['seconds']:.3f} s | "
              f"{ga['seconds'] / base['seconds']:.1f} | {cmd:.2f} s | {base['peak_rss_mb']:.0f} / "
              f"{ga['peak_rss_mb']:.0f} MB | {min(ga['coverage']):.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
