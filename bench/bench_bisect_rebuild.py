"""Predicted against obtained: bisect a real hb_mapper set, paste its node_info into the config, rebuild with the real
``hb_mapper makertbin``, and measure the rebuilt calibrated stage.

For each set: ``graphaudit bisect`` on optimized -> calibrated with the config's calibration data (the first
``--samples`` samples) predicts the share of the output error (against optimized_float) that the chosen units'
reversion recovers; the rebuilt calibrated stage's share is measured on the same samples, against the rebuilt
optimized_float stage (the same float model), as ``1 - noise(rebuilt) / noise(original build)``. Run from the
repository root after set-up::

    .venv/bin/python bench/bench_bisect_rebuild.py [--sets ppocr_cls_bayes-e mtcnn_onet_bayes-e] [--samples 8]

It needs the toolchain environment (``samples/build/hbenv.path``) and writes only into a temporary directory.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphaudit.bisection import _HybridEvaluator, bisect  # noqa: E402
from graphaudit.fixes import yaml11_safe  # noqa: E402
from graphaudit.measure import NumericOptions, data_stage_of, sample_source  # noqa: E402
from graphaudit.pipeline import _as_config, _structure, load_pipeline  # noqa: E402

HB = ROOT / "samples" / "build" / "hb"


def _output_noise(set_dir: Path, cfg_path: Path, samples: int) -> tuple[float, float]:
    """(noise, signal) of the calibrated stage's outputs against optimized_float, on the config's samples."""
    from graphaudit.bisection import _data

    stages = load_pipeline([set_dir / "model_output"], None)
    cfg = _as_config(cfg_path)
    lineage, changes, _c = _structure(stages)
    opts = NumericOptions(max_samples=samples, runtime="onnxruntime")
    idx = data_stage_of(stages)
    data = _data(None, opts, cfg)
    ev = _HybridEvaluator(stages, 1, lineage.alignments[1], changes[1], sample_source(stages, idx, data, opts, cfg),
                          idx, cfg, "onnxruntime", samples)
    return ev.noise([])


def _with_node_info(cfg_text: str, snippet: str) -> str:
    y = YAML()
    data = y.load(cfg_text)
    add = yaml11_safe(YAML(typ="safe").load(snippet)["model_parameters"]["node_info"])
    mp = data["model_parameters"]
    mp["node_info"] = {**(mp.get("node_info") or {}), **add}
    buf = io.StringIO()
    y.dump(data, buf)
    return buf.getvalue()


def _rebuild(src: Path, work: Path, snippet: str) -> tuple[Path, float]:
    """A copy of the set (config with node_info, model, calibration data linked) rebuilt by hb_mapper."""
    dst = work / src.name
    dst.mkdir()
    for p in src.iterdir():
        if p.name in ("model_output", "hb_mapper_makertbin.log", "build.json"):
            continue
        if p.name == "config.yaml":
            (dst / p.name).write_text(_with_node_info(p.read_text(), snippet))
        else:
            os.symlink(p.resolve(), dst / p.name)
    venv = Path((ROOT / "samples" / "build" / "hbenv.path").read_text().strip())
    t = time.time()
    res = subprocess.run([str(venv / "bin" / "hb_mapper"), "makertbin", "--model-type", "onnx", "--config",
                          "config.yaml"], cwd=dst, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=1800, env={**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"})
    if res.returncode != 0 or not any((dst / "model_output").glob("*_calibrated_model.onnx")):
        tail = (dst / "hb_mapper_makertbin.log").read_text()[-800:] if (dst / "hb_mapper_makertbin.log").exists() \
            else res.stdout[-800:]
        raise RuntimeError(f"hb_mapper makertbin failed on {dst}: {tail}")
    return dst, time.time() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=["ppocr_cls_bayes-e", "mtcnn_onet_bayes-e", "mtcnn_rnet_bayes-e",
                                                  "ddddocr_ocr_bayes-e"])
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--keep", metavar="DIR", help="rebuild into DIR (kept) instead of a temporary directory")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphaudit-rebuild-") as tmp:
        tmp = args.keep or tmp
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for name in args.sets:
            src = HB / name
            rep = bisect(src / "model_output", 1, config=src / "config.yaml",
                         numeric=NumericOptions(max_samples=args.samples, runtime="onnxruntime"))
            fix = rep.fix or {}
            if fix.get("toolchain") != "hb_mapper":
                rows.append((name, len(rep.chosen), rep.recovered, None, rep.metric_b, rep.metric_chosen, None,
                             fix.get("note", ""), None))
                continue
            noise_b, _s = _output_noise(src, src / "config.yaml", args.samples)
            dst, secs = _rebuild(src, Path(tmp), fix["text"])
            noise_r, sig_r = _output_noise(dst, dst / "config.yaml", args.samples)
            import math

            obtained = 1 - noise_r / noise_b
            rows.append((name, len(rep.chosen), rep.recovered, obtained, rep.metric_b, rep.metric_chosen,
                         10 * math.log10(sig_r / noise_r) if noise_r else math.inf,
                         f"node_info {', '.join(fix['nodes'])}; rebuild {secs:.0f} s", rep.fix_recovered))
    print("| set | units | hybrid (float) recovery | int16 model of the fix | rebuilt recovery | rebuilt / hybrid | "
          "output SQNR dB: built -> hybrid -> rebuilt | node_info |")
    print("|---|---|---|---|---|---|---|---|")
    for name, n, pred, got, sq_b, sq_h, sq_r, note, fix_pred in rows:
        ratio = f"{got / pred:.2f}" if got is not None and pred else "-"
        print(f"| {name} | {n} | {pred:.1%} | {'-' if fix_pred is None else f'{fix_pred:.1%}'} | "
              f"{'-' if got is None else f'{got:.1%}'} | {ratio} | "
              f"{sq_b:.1f} -> {sq_h:.1f} -> {'-' if sq_r is None else f'{sq_r:.1f}'} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
