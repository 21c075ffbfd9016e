"""Check graphaudit's alignment of a real Horizon stage set with Horizon's own runtime.

For every transition of the pipeline, every aligned tensor pair that graphaudit says holds the same value
(match kinds exact/quantized/absorbed/converted/layout) is run in Horizon's runtime (``hbworker.py`` in the
toolchain's Python) on the same real calibration samples, and its cosine similarity is returned.

Used by ``tests/test_horizon_real.py``; also a command for development::

    .venv/bin/python tests/horizon_check.py SET_DIR [--samples N]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "graphaudit" / "numeric" / "hbworker.py"
CHECKED_KINDS = {"exact", "quantized", "absorbed", "converted", "layout"}


def toolchain_python() -> Path | None:
    """The toolchain environment's interpreter that set-up recorded, or None."""
    rec = ROOT / "samples" / "build" / "hbenv.path"
    env = os.environ.get("GRAPHAUDIT_HBENV")
    base = Path(env) if env else (Path(rec.read_text().strip()) if rec.is_file() else None)
    if base is None:
        return None
    py = base / "bin" / "python"
    return py if py.is_file() else None


def calibration_samples(set_dir: Path, count: int) -> np.ndarray:
    """The set's raw calibration files as float32 pixels (0..255), [S, *input_shape], in the config's layout."""
    from ruamel.yaml import YAML

    cfg = YAML(typ="safe").load((set_dir / "config.yaml").read_text())
    ip, cp = cfg["input_parameters"], cfg["calibration_parameters"]
    shape = [int(v) for v in str(ip["input_shape"]).split("x")]
    dtype = np.dtype(str(cp.get("cal_data_type", "uint8")))
    files = sorted((set_dir / cp["cal_data_dir"]).iterdir(), key=lambda p: (len(p.name), p.name))[:count]
    return np.stack([np.fromfile(f, dtype=dtype).reshape(shape).astype(np.float32) for f in files])


def stage_feeds(model: Path, pixels: np.ndarray, out: Path) -> Path:
    """Feeds for one stage: ``pixel - 128`` (the ``*_128`` contract), int8 when the stage's input is int8."""
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    inp = m.graph.input[0]
    x = pixels - 128.0
    if inp.type.tensor_type.elem_type == onnx.TensorProto.INT8:
        x = np.clip(np.round(x), -128, 127).astype(np.int8)
    else:
        x = x.astype(np.float32)
    np.savez(out, **{inp.name: x})
    return out


def aligned_pairs(al) -> list[tuple[str, str, str]]:
    """(a tensor, b tensor, kind) for every b tensor the alignment pairs with a value-holding kind.

    Into the fixed-point stage, b's integer tensor is compared with a's fake-quantized copy of the value
    (the HzCalibration output that a's consumers read), which is what the integers represent.
    """
    out = []
    fixed = al.b.role == "quantized" and al.a.role == "calibrated"
    for bt, tm in al.tensor_map.items():
        if tm.kind not in CHECKED_KINDS:
            continue
        if al.b.tensors[bt].is_param or al.a.tensors[tm.a].is_param:
            continue
        at = tm.a
        if fixed and bt == al.view_b.root.get(bt, bt):
            at = _fake_quantized(al.view_a, tm.a)
        out.append((at, bt, tm.kind))
    return out


def _fake_quantized(view, tensor: str) -> str:
    """The deepest HzCalibration output on ``tensor``'s wrapper tree, or the tensor itself."""
    best, depth = tensor, 0
    for nid in view.tree.get(tensor, []):
        n = view.stage.nodes[nid]
        if n.op_type == "HzCalibration" and view.depth[n.outputs[0]] > depth:
            best, depth = n.outputs[0], view.depth[n.outputs[0]]
    return best


def check_set(set_dir: Path, samples: int = 4, stage_files: list | None = None, best_match: bool = True) -> list[dict]:
    """Run every transition's aligned pairs in Horizon's runtime.

    Returns one dict per transition: ``{"a", "b", "pairs": [{"a", "b", "kind", "cosine", ...}]}``.
    The optimized -> calibrated transition runs calibrated with every HzCalibration switched off (so both
    sides are float and must agree exactly); calibrated -> quantized runs calibrated as it is (fake
    quantization) against the fixed-point model.
    """
    import graphaudit

    py = toolchain_python()
    if py is None:
        raise RuntimeError("the toolchain environment is not set up (samples/build/hbenv.path)")
    stages = graphaudit.load_pipeline(list(stage_files) if stage_files else [set_dir / "model_output"])
    lineage = graphaudit.align_chain(stages)
    pixels = calibration_samples(set_dir, samples)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for i, al in enumerate(lineage.alignments):
            pairs = aligned_pairs(al)
            roles = (al.a.role, al.b.role)
            req = {
                "a": {"model": str(al.a.path), "feeds": str(stage_feeds(al.a.path, pixels, t / f"a{i}.npz")),
                      "switch_off": roles == ("calibrated", "quantized") and False},
                "b": {"model": str(al.b.path), "feeds": str(stage_feeds(al.b.path, pixels, t / f"b{i}.npz")),
                      "switch_off": roles[1] == "calibrated"},
                "pairs": [[a, b] for a, b, _k in pairs],
                "best_match": best_match,
            }
            (t / "req.json").write_text(json.dumps(req))
            subprocess.run([str(py), str(WORKER), str(t / "req.json"), str(t / "res.json")], check=True,
                           stdout=subprocess.DEVNULL)
            res = json.loads((t / "res.json").read_text())
            for r, (_a, _b, kind) in zip(res["pairs"], pairs):
                r["kind"] = kind
            results.append({"a": al.a.role, "b": al.b.role, "samples": res["samples"], "pairs": res["pairs"]})
    return results


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("set_dir", type=Path)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--show", type=int, default=15)
    ap.add_argument("--stages", nargs="*", type=Path)
    args = ap.parse_args(argv)
    for tr in check_set(args.set_dir, args.samples, args.stages):
        ok = [p for p in tr["pairs"] if p["cosine"] is not None]
        bad = sorted(ok, key=lambda p: p["cosine"])
        errs = [p for p in tr["pairs"] if p["cosine"] is None]
        print(f"{tr['a']} -> {tr['b']}: {len(tr['pairs'])} pairs, {len(errs)} not comparable, "
              f"min cosine {bad[0]['cosine']:.6f}" if bad else "")
        for p in bad[: args.show]:
            print(f"   {p['cosine']:.6f}  {p['kind']:9s} {p['a']} ~ {p['b']}  perm={p['perm']} "
                  f"best={p.get('best')} {p.get('best_cosine', float('nan')):.6f}")
        worse = [p for p in ok if p.get("best_cosine", -1) > p["cosine"] + 1e-6]
        print(f"   {len(worse)} pairs where another tensor of a matches better; worst gaps:")
        for p in sorted(worse, key=lambda p: p["cosine"] - p["best_cosine"])[: args.show]:
            print(f"   gap {p['best_cosine'] - p['cosine']:.6f}: {p['a']} ~ {p['b']} ({p['cosine']:.6f}) "
                  f"best {p['best']} ({p['best_cosine']:.6f})")
        for p in errs[:5]:
            print(f"   ERR {p['a']} ~ {p['b']}: {p['error']}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
