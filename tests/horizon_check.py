"""Check graphaudit's alignment with numbers: run both stages of every transition and compare each aligned pair.

An alignment pair is right when the numbers of both tensors agree, not when their names do. For every
transition, every b tensor that graphaudit pairs with an a tensor holding the same value (match kinds
exact/quantized/absorbed/converted/layout) is run on the same real samples, and the pair's cosine similarity is
measured, together with the best cosine any other tensor of a of that shape reaches against it.

- Horizon stage sets run in Horizon's own runtime (``graphaudit/numeric/hbworker.py`` in the toolchain's Python);
  optimized -> calibrated runs calibrated with every HzCalibration switched off, so both sides are float.
- onnxruntime pipelines (and graphaudit's own Horizon-format sample) run in stock onnxruntime, Horizon ops
  lowered by graphaudit first.

Used by ``tests/test_horizon_real.py``; also a command for development::

    .venv/bin/python tests/horizon_check.py SET_DIR [--samples N]
"""

from __future__ import annotations

import importlib.util
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
FLOAT_ROLES = {"source", "original", "optimized"}


def built_sets(root: Path | None = None) -> list[Path]:
    """Real sets in ``samples/build/hb`` whose build.json says hb_mapper succeeded (a failed one keeps what
    hb_mapper left behind), with their ``model_output/``."""
    hb = (root or ROOT) / "samples" / "build" / "hb"
    out = []
    for p in sorted(hb.glob("*/")) if hb.is_dir() else []:
        try:
            ok = json.loads((p / "build.json").read_text()).get("status") == "ok"
        except (OSError, ValueError):
            ok = False
        if ok and (p / "model_output").is_dir():
            out.append(p)
    return out


def toolchain_python() -> Path | None:
    """The toolchain environment's interpreter with this checkout's graphaudit: ``$GRAPHAUDIT_HBENV/bin/python`` when
    that is set, else set-up's ``samples/build/hbvenv`` (this checkout's venv over the shared toolchain venv), else
    None (no toolchain, or set-up has not built it)."""
    env = os.environ.get("GRAPHAUDIT_HBENV")
    rec = ROOT / "samples" / "build" / "hbenv.path"
    base = Path(env) if env else (ROOT / "samples" / "build" / "hbvenv" if rec.is_file() else None)
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


def horizon_feeds(model: Path, pixels: np.ndarray, out: Path) -> Path:
    """Feeds for one Horizon stage: ``pixel - 128`` (the ``*_128`` contract), int8 when its input is int8."""
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    inp = m.graph.input[0]
    x = pixels - 128.0
    dims = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
    one = x.shape[1:]
    if len(dims) == 4 and dims != one and dims == tuple(one[i] for i in (0, 2, 3, 1)):
        x = x.transpose(0, 1, 3, 4, 2)  # bernoulli2's quantized stage takes NHWC where the others take NCHW
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
        prod = al.b.producer(bt)
        if prod is not None and prod.op_type in ("QuantizeLinear", "DynamicQuantizeLinear"):
            continue  # integers with a zero point: their dequantized copy is the comparable value
        at = tm.a
        if fixed:
            if _per_channel_integers(al.b, bt):
                continue  # integers with one scale per channel: the HzDequantize output is the comparable value
            at = _fake_quantized(al.view_a, tm.a)
        out.append((at, bt, tm.kind))
    return out


def _per_channel_integers(stage, tensor: str) -> bool:
    """Whether ``tensor`` holds integers read by an HzDequantize with one scale per channel (a cosine of the raw
    integers would weigh channels by their scales)."""
    for cid, _k in stage.tensors[tensor].consumers:
        n = stage.nodes[cid]
        if n.op_type == "HzDequantize" and len(n.inputs) > 1 and n.inputs[1] in stage.tensors:
            shape = stage.tensors[n.inputs[1]].shape
            if shape and int(np.prod([d for d in shape if isinstance(d, int)])) > 1:
                return True
    return False


def _fake_quantized(view, tensor: str) -> str:
    """The output of the HzCalibration that reads ``tensor`` itself, or the tensor."""
    for cid, _k in view.stage.tensors[tensor].consumers:
        n = view.stage.nodes[cid]
        if n.op_type == "HzCalibration":
            return n.outputs[0]
    return tensor


def _worker():
    spec = importlib.util.spec_from_file_location("graphaudit_hbworker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_request(req: dict, tmp: Path) -> dict:
    if req.get("runtime") == "onnxruntime":
        return _worker().compare(req)
    py = toolchain_python()
    if py is None:
        raise RuntimeError("the toolchain environment is not set up (samples/build/hbenv.path)")
    (tmp / "req.json").write_text(json.dumps(req))
    subprocess.run([str(py), str(WORKER), str(tmp / "req.json"), str(tmp / "res.json")], check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads((tmp / "res.json").read_text())


def quantization_off(al) -> bool:
    """Whether b runs with fake quantization switched off: when a is a float stage and b adds fake quantization
    (calibrated, or an onnxruntime QDQ model), so that both sides compute in float."""
    return al.a.role in FLOAT_ROLES and al.b.role in ("calibrated", "quantized") and not any(
        n.op_type.startswith(("HzSQuantized", "HzQuantized", "HzSElementwise", "HzLut")) for n in al.b.nodes.values())


def check_pipeline(paths: list, feeds, runtime: str, best_match: bool = True) -> list[dict]:
    """Align the stages found at ``paths`` and check every transition's pairs in ``runtime``.

    ``feeds(stage, tmp_dir, tag, quantization_off) -> (model path, npz path)`` gives each stage's model file
    (lowered for stock onnxruntime) and its inputs. Returns one dict per transition:
    ``{"a", "b", "samples", "pairs": [{"a", "b", "kind", "cosine", "best", "best_cosine", "same_value", ...}]}``;
    ``same_value`` is True when the best-matching tensor of a has the claimed tensor's root (the same value
    before or after a wrapper).
    """
    import graphaudit

    stages = graphaudit.load_pipeline(list(paths))
    lineage = graphaudit.align_chain(stages)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for i, al in enumerate(lineage.alignments):
            pairs = aligned_pairs(al)
            off = quantization_off(al)
            ma, fa = feeds(al.a, t, f"a{i}", False)
            mb, fb = feeds(al.b, t, f"b{i}", off)
            req = {"a": {"model": str(ma), "feeds": str(fa), "switch_off": False},
                   "b": {"model": str(mb), "feeds": str(fb), "switch_off": off},
                   "pairs": [[a, b] for a, b, _k in pairs], "best_match": best_match, "runtime": runtime}
            res = _run_request(req, t)
            for r, (_a, _b, kind) in zip(res["pairs"], pairs):
                r["kind"] = kind
                r["same_value"] = (r.get("best") is not None and
                                   al.view_a.root.get(r["best"], r["best"]) == al.view_a.root.get(r["a"], r["a"]))
            results.append({"a": al.a.role, "b": al.b.role, "a_name": al.a.name, "b_name": al.b.name,
                            "samples": res["samples"], "pairs": res["pairs"]})
    return results


def check_horizon_set(set_dir: Path, samples: int = 4, stage_files: list | None = None) -> list[dict]:
    """Check a real Horizon stage set (``SET/model_output``, ``SET/config.yaml``, its calibration files) in
    Horizon's runtime on the first ``samples`` calibration samples."""
    pixels = calibration_samples(set_dir, samples)

    def feeds(stage, tmp: Path, tag: str, _off: bool):
        return stage.path, horizon_feeds(stage.path, pixels, tmp / f"{tag}.npz")

    return check_pipeline(stage_files or [set_dir / "model_output"], feeds, "horizon")


def check_ort_pipeline(stage_dir: Path, data: np.ndarray, input_name: str | None = None) -> list[dict]:
    """Check a pipeline in stock onnxruntime: every stage gets ``data`` ([S, ...] float32), Horizon ops lowered."""
    import onnx

    from graphaudit.numeric.lower import lower_model, needs_lowering

    def feeds(stage, tmp: Path, tag: str, off: bool):
        m = onnx.load(str(stage.path))
        path = stage.path
        if off:  # HzCalibration switched off before lowering (then lowered to identity, weights stay float)
            _worker()._quantization_off(m)
            path = tmp / f"{tag}_off.onnx"
            onnx.save(m, str(path))
        if needs_lowering(m):
            path = tmp / f"{tag}_lowered.onnx"
            onnx.save(lower_model(m, str(stage.path)).model, str(path))
        name = input_name or m.graph.input[0].name
        np.savez(tmp / f"{tag}.npz", **{name: data})
        return path, tmp / f"{tag}.npz"

    return check_pipeline([stage_dir], feeds, "onnxruntime")


def summary(tr: dict, show: int = 10) -> str:
    """Lines for a person: pairs checked, worst cosine, pairs where another tensor of a matches better."""
    ok = [p for p in tr["pairs"] if p["cosine"] is not None]
    errs = [p for p in tr["pairs"] if p["cosine"] is None and not p.get("degenerate")]
    flat = [p for p in tr["pairs"] if p.get("degenerate")]
    lines = [f"{tr['a']} -> {tr['b']}: {len(tr['pairs'])} pairs checked on {tr['samples']} samples, "
             f"{len(errs)} not comparable, {len(flat)} all-zero on one side, min cosine "
             + (f"{min(p['cosine'] for p in ok):.6f}" if ok else "-")]
    for p in sorted(ok, key=lambda p: p["cosine"])[:show]:
        lines.append(f"   {p['cosine']:.6f}  {p['kind']:9s} {p['a']} ~ {p['b']}  best {p.get('best')} "
                     f"{p.get('best_cosine', float('nan')):.6f}")
    better = [p for p in ok if p.get("best_cosine", -1) > p["cosine"] + 1e-6 and not p["same_value"]]
    lines.append(f"   {len(better)} pairs where another value of a matches better")
    for p in better[:show]:
        lines.append(f"   {p['a']} ~ {p['b']} ({p['cosine']:.6f}); better {p['best']} ({p['best_cosine']:.6f})")
    for p in errs[:show]:
        lines.append(f"   not comparable: {p['a']} ~ {p['b']}: {p['error']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("set_dir", type=Path)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--show", type=int, default=10)
    ap.add_argument("--stages", nargs="*", type=Path)
    args = ap.parse_args(argv)
    for tr in check_horizon_set(args.set_dir, args.samples, args.stages):
        print(summary(tr, args.show))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
