"""Benchmark: Horizon's node-sensitivity debugger against graphaudit's isolated error, on every real Horizon set.

For each set that set-up built in ``samples/build/hb/<model>_<march>/`` (hb_mapper 1.x output), runs on the same
first N calibration samples (``--samples``, below):

- Horizon's accuracy debugger, ``horizon_nn.quantizer.debugger.get_sensitivity_of_nodes`` (horizon_nn 1.1.0 =
  ``hmct``, ``hmct/quantizer/debugger/debug_api.py``; the CLI ``hmct-debugger get-sensitivity-of-nodes``), metric
  ``cosine-similarity``, ``node_type="node"``, in the toolchain's Python 3.10 (a subprocess of ``$HB/bin/python``,
  ``$HB`` from ``samples/build/hbenv.path``). For every ordinary node of the calibrated model that reads an
  HzCalibration (through skippable ops), it switches every HzCalibration of the model OFF except that node's input
  calibrations (activation and weight), runs the model in Horizon's onnxruntime and takes the cosine of the
  model outputs against the all-OFF (float) model, mean over samples and outputs
  (``node_sensitivity.py``, ``NodeSensitivity.sensitivity_of_nodes``). Lower cosine = more sensitive.
  Its data: a directory ``<input name>/<i>.npy`` (``util.set_calibration_data``), here the raw calibration files
  as hb_mapper's raw loader feeds them (``horizon_tc_ui`` ``get_raw_transformer``: ``input_shape`` in
  ``input_layout_train``, ``- 128``, float32), written to a ``tempfile.mkdtemp()`` directory.
- ``graphaudit explain SET/model_output --config SET/config.yaml --data SET/<cal_data_dir> --max-samples N
  --json TMP --no-report`` in this Python (the raw folder is read as the config describes it; no conversion),
  whose ``numeric`` entry for optimized -> calibrated lists every HzCalibration measured alone at its own output
  (``regions``: ``b_nodes`` = the HzCalibration node name). A node's graphaudit score is its worst input
  calibration (lowest isolated SQNR, then cosine), mapped with Horizon's own node -> input-calibration relation
  (``NodeInfo.get_calibration_by_node``), so both rank the same node names of the calibrated model.
  Workaround (a graphaudit bug): weight HzCalibrations whose initializer hb_mapper rescaled between the
  optimized and the calibrated model (activation equalization: the input HzCalibration carries ``channel_scales``
  / ``dequantize_scale``; PP-OCRv4 det's depthwise convs) are left out of graphaudit's scores, because graphaudit
  compares the unscaled optimized weight with the fake-quantized rescaled one and reports the rescaling as
  quantization error (0.5 dB where Horizon's runtime measures 42-48 dB); it already skips the matching
  activation calibrations. ``--keep-rescaled-weights`` keeps them.

Samples: ``--samples auto`` (default) takes 4 for inputs of at most 100k elements (mtcnn_onet, ppocr_cls: there
the debugger's cost is its per-node model copy and session, and one confident sample saturates its output cosine
at 1.0 in float32 on ppocr_cls's 2-class softmax) and 1 (the debugger's default ``data_num``) for the detectors
(ddddocr_det 416x416, ppocr_det 736x736), where each sample costs 0.3-0.7 s per node.

Prints per set both top-10 lists (each with the other's rank), the overlap of the two top-10s, Spearman's rho
and Kendall's tau-b over the nodes both rank (debugger cosine vs graphaudit SQNR, both "higher = better", so
positive = agreement; also rho against graphaudit's isolated cosine), the wall seconds of both commands (process
start and imports included; the debugger call alone in parentheses), then a summary table. Not a test.

Usage: .venv/bin/python bench/bench_debugger.py [--sets KEY...] [--samples auto|N] [--node-type node|activation|weight]
       [--keep-rescaled-weights]
       (KEY: a set directory name such as ppocr_cls_bayes-e, a prefix such as ppocr_cls, or a march such as bayes-e)
All 8 sets take about 15 min on the 2-core development machine (the debugger's 0.9-1.4 s per node on the four
detector sets is 80% of it); ``--sets bayes-e`` (one march per model) about 7 min.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETS = REPO / "samples" / "build" / "hb"

# Runs in the toolchain's Python 3.10: argv = calibrated model, data dir, samples, node_type, output JSON.
WORKER = r'''
import json, sys, time
t0 = time.perf_counter()
import horizon_nn  # hmct, aliased
from horizon_nn.ir import load_model
from horizon_nn.quantizer.debugger import get_sensitivity_of_nodes
from horizon_nn.quantizer.debugger.node_info import NodeInfo
model, data, n, node_type, out = sys.argv[1:6]
t1 = time.perf_counter()
res = get_sensitivity_of_nodes(model_or_file=model, metrics="cosine-similarity", calibrated_data=data,
                               node_type=node_type, data_num=int(n))
t2 = time.perf_counter()
if node_type == "node":
    info = NodeInfo(load_model(model).proto)
    calib = {k: sorted(info.get_calibration_by_node(k)) for k in res}
else:
    calib = {k: [k] for k in res}
json.dump({"import_seconds": t1 - t0, "call_seconds": t2 - t1,
           "order": list(res), "cosine": {k: float(v["cosine-similarity"]) for k, v in res.items()},
           "calibrations": calib}, open(out, "w"))
'''


def _hbenv() -> Path | None:
    f = REPO / "samples" / "build" / "hbenv.path"
    if f.is_file():
        p = Path(f.read_text().strip())
        if (p / "bin" / "python").exists():
            return p
    return None


def _sets(keys: list[str] | None) -> list[Path]:
    found = sorted(p for p in SETS.glob("*/") if (p / "model_output").is_dir() and (p / "config.yaml").is_file()
                   and any((p / "model_output").glob("*_calibrated_model.onnx")))
    if not keys:
        return found
    return [p for p in found if any(p.name == k or p.name.startswith(k) or p.name.endswith("_" + k) for k in keys)]


def _auto_samples(set_dir: Path) -> int:
    import onnx

    m = onnx.load(str(next((set_dir / "model_output").glob("*_calibrated_model.onnx"))), load_external_data=False)
    elements = math.prod(d.dim_value or 1 for d in m.graph.input[0].type.tensor_type.shape.dim)
    return 4 if elements <= 100_000 else 1


def _rescaled_weight_calibrations(set_dir: Path) -> set[str]:
    """HzCalibration nodes of the calibrated model whose input initializer differs from the optimized model's
    initializer of that name (rescaled by hb_mapper's activation equalization)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    mo = set_dir / "model_output"
    opt = onnx.load(str(next(mo.glob("*_optimized_float_model.onnx"))))
    cal = onnx.load(str(next(mo.glob("*_calibrated_model.onnx"))))
    oi = {i.name: i for i in opt.graph.initializer}
    ci = {i.name: i for i in cal.graph.initializer}
    out = set()
    for n in cal.graph.node:
        w = n.input[0] if n.op_type == "HzCalibration" and n.input else None
        if w in ci and w in oi:
            a, b = numpy_helper.to_array(oi[w]), numpy_helper.to_array(ci[w])
            if a.shape != b.shape or not np.array_equal(a, b):
                out.add(n.name)
    return out


def _prepare(set_dir: Path, n: int, tmp: Path) -> tuple[Path, Path, str]:
    """The raw calibration folder (for graphaudit) and a debugger data directory of its first ``n`` samples."""
    import numpy as np
    import onnx

    sys.path.insert(0, str(REPO))
    from graphaudit.config import load_config  # graphaudit's safe YAML reader (no PyYAML in this venv)

    cfg = load_config(set_dir / "config.yaml")
    if len(cfg.inputs) != 1 or not cfg.inputs[0].shape or not cfg.inputs[0].cal_data_dir:
        raise SystemExit(f"{set_dir.name}: config needs one input with input_shape and cal_data_dir")
    ci = cfg.inputs[0]
    name, shape = ci.name, tuple(ci.shape)
    layout = (ci.layout_train or "NCHW").upper()
    train, rt = (ci.type_train or "").lower(), (ci.type_rt or "").lower()
    cal = (set_dir / ci.cal_data_dir).resolve()
    dtype = np.dtype(ci.cal_data_type or ("float32" if ci.cal_data_dir.rstrip("/").endswith("_f32") else "uint8"))
    files = sorted(p for p in cal.iterdir() if p.is_file() and not p.name.startswith("."))[:n]
    if len(files) < n:
        raise SystemExit(f"{set_dir.name}: {cal} holds {len(files)} samples, fewer than --samples {n}")
    model = onnx.load(str(next((set_dir / "model_output").glob("*_calibrated_model.onnx"))), load_external_data=False)
    want = next(tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in model.graph.input if i.name == name)
    out = tmp / "debugger_data" / name
    out.mkdir(parents=True)
    for i, f in enumerate(files):
        x = np.fromfile(f, dtype=dtype).reshape(shape).astype(np.float32)
        if {train, rt} == {"rgb", "bgr"}:  # hb_mapper's raw loader converts train -> rt colour order
            x = np.flip(x, axis=1 if layout == "NCHW" else 3)
        x = np.ascontiguousarray(x - 128.0)  # AddTransformer(-128): the HzPreprocess input is pixel - 128
        if x.shape != want:
            raise SystemExit(f"{set_dir.name}: sample shape {x.shape} != calibrated input {name} {want}")
        np.save(out / f"{i:04d}.npy", x)
    return cal, out.parent, name


def _run_debugger(hb: Path, set_dir: Path, data: Path, n: int, node_type: str, tmp: Path) -> dict:
    script, out = tmp / "hb_debugger_worker.py", tmp / "debugger.json"
    script.write_text(WORKER)
    model = next((set_dir / "model_output").glob("*_calibrated_model.onnx"))
    t0 = time.perf_counter()
    r = subprocess.run([str(hb / "bin" / "python"), str(script), str(model), str(data), str(n), node_type, str(out)],
                       capture_output=True, text=True, cwd=tmp, check=False)
    seconds = time.perf_counter() - t0
    if r.returncode != 0 or not out.is_file():
        raise RuntimeError(f"debugger failed (rc {r.returncode}): {r.stderr[-1500:]}")
    d = json.loads(out.read_text())
    d["seconds"] = seconds
    return d


def _run_graphaudit(set_dir: Path, cal: Path, n: int, tmp: Path) -> tuple[list[dict], float]:
    out = tmp / "graphaudit.json"
    cmd = [sys.executable, "-m", "graphaudit", "explain", str(set_dir / "model_output"), "--config",
           str(set_dir / "config.yaml"), "--data", str(cal), "--max-samples", str(n), "--json", str(out),
           "--no-report", "--fail-on", "never"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, check=False)
    seconds = time.perf_counter() - t0
    if r.returncode != 0 or not out.is_file():
        raise RuntimeError(f"graphaudit failed (rc {r.returncode}): {(r.stderr or r.stdout)[-1500:]}")
    rep = json.loads(out.read_text())
    num = next((x for x in rep.get("numeric") or [] if x["a"] == "optimized" and x["b"] == "calibrated"), None)
    if num is None:
        raise RuntimeError("graphaudit: no optimized -> calibrated numeric comparison in the JSON")
    return [g for g in num["regions"] if g["kind"] == "inserted" and g["pattern"].startswith("HzCalibration")], seconds


def _num(v) -> float:
    if v is None:
        return math.nan
    return float(v)  # "inf" -> inf


def _ga_scores(regions: list[dict], calib: dict[str, list[str]]) -> dict[str, tuple[float, float, str]]:
    """Per debugger node: (SQNR dB, cosine, HzCalibration) of its worst measured input calibration."""
    by_cal = {}
    for g in regions:
        for b in g["b_nodes"]:
            by_cal[b] = (_num(g["sqnr_db"]), _num(g["cosine"]), b)
    scores = {}
    for node, cals in calib.items():
        got = [by_cal[c] for c in cals if c in by_cal and not math.isnan(by_cal[c][0])]
        if got:
            scores[node] = min(got)
    return scores


def _ranks(v: list[float]) -> list[float]:
    """1-based ranks, ties get the mean of their positions (inf sorts last, ties with inf)."""
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rho = Pearson correlation of the average ranks (equals 1 - 6 sum d^2 / (n (n^2 - 1)) without
    ties)."""
    rx, ry = _ranks(x), _ranks(y)
    n = len(rx)
    if n < 2:
        return math.nan
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def kendall_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b = (concordant - discordant) / sqrt((n0 - tx) (n0 - ty)), n0 = n (n - 1) / 2, tx/ty the
    pairs tied in x/y."""
    n = len(x)
    c = d = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = x[i] - x[j] if x[i] != x[j] else 0.0, y[i] - y[j] if y[i] != y[j] else 0.0
            if a == 0:
                tx += 1
            if b == 0:
                ty += 1
            if a and b:
                if (a > 0) == (b > 0):
                    c += 1
                else:
                    d += 1
    n0 = n * (n - 1) // 2
    den = math.sqrt((n0 - tx) * (n0 - ty))
    return (c - d) / den if den else math.nan


def _fmt_db(v: float) -> str:
    return "inf" if v == math.inf else f"{v:.1f}"


def _short(s: str, w: int = 34) -> str:
    return s if len(s) <= w else s[: w - 1] + "~"


def _fmt_corr(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:+.3f}"


def _one(hb: Path, set_dir: Path, n: int, node_type: str, keep_rescaled: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench_debugger_"))
    try:
        cal, data, _ = _prepare(set_dir, n, tmp)
        ga_regions, ga_s = _run_graphaudit(set_dir, cal, n, tmp)
        dbg = _run_debugger(hb, set_dir, data, n, node_type, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rescaled = set() if keep_rescaled else _rescaled_weight_calibrations(set_dir)
    excluded = [g for g in ga_regions if set(g["b_nodes"]) & rescaled]
    ga_regions = [g for g in ga_regions if not set(g["b_nodes"]) & rescaled]
    dcos = {k: v for k, v in dbg["cosine"].items() if not math.isnan(v)}
    d_order = [k for k in dbg["order"] if k in dcos]
    ga = _ga_scores(ga_regions, dbg["calibrations"])
    g_order = sorted(ga, key=lambda k: (ga[k][0], ga[k][1]))
    d_rank = {k: i + 1 for i, k in enumerate(d_order)}
    g_rank = {k: i + 1 for i, k in enumerate(g_order)}
    common = [k for k in d_order if k in ga]
    xs = [dcos[k] for k in common]
    rho = spearman(xs, [ga[k][0] for k in common])
    tau = kendall_tau_b(xs, [ga[k][0] for k in common])
    rho_cos = spearman(xs, [ga[k][1] for k in common])
    top_d, top_g = d_order[:10], g_order[:10]
    overlap = len(set(top_d) & set(top_g))

    print(f"\n== {set_dir.name}: {n} sample(s), node_type {node_type}")
    print(f"debugger: {len(d_order)} nodes ranked, {dbg['seconds']:.1f} s (call {dbg['call_seconds']:.1f} s); "
          f"graphaudit: {len(ga_regions)} HzCalibration regions -> {len(ga)} nodes, {ga_s:.1f} s")
    if excluded:
        print(f"left out of graphaudit's scores: {len(excluded)} weight calibrations of rescaled initializers ("
              + ", ".join(f"{g['b_nodes'][0]} {_fmt_db(_num(g['sqnr_db']))} dB" for g in excluded) + ")")
    if len(set(xs)) <= 1:
        print(f"the debugger gives every node the same cosine ({xs[0] if xs else float('nan'):.6f}): no ranking")
    print(f"{'#':>2}  {'debugger node':34} {'cosine':>9} {'ga#':>4} | {'graphaudit node':34} {'SQNR dB':>7} "
          f"{'cosine':>9} {'dbg#':>4}  worst input HzCalibration")
    for i in range(max(len(top_d), len(top_g))):
        left = right = ""
        if i < len(top_d):
            k = top_d[i]
            left = f"{_short(k):34} {dcos[k]:9.6f} {g_rank.get(k, '-')!s:>4}"
        if i < len(top_g):
            k = top_g[i]
            s, c, via = ga[k]
            right = f"{_short(k):34} {_fmt_db(s):>7} {c:9.6f} {d_rank.get(k, '-')!s:>4}  {_short(via, 44)}"
        print(f"{i + 1:>2}  {left:<49} | {right}")
    print(f"top-10 overlap {overlap}/10; over {len(common)} nodes both rank: Spearman rho {_fmt_corr(rho)}, "
          f"Kendall tau-b {_fmt_corr(tau)} (debugger cosine vs graphaudit SQNR); rho vs graphaudit cosine "
          f"{_fmt_corr(rho_cos)}")
    return {"set": set_dir.name, "samples": n, "excluded": len(excluded),
            "nodes": (len(d_order), len(ga), len(common)), "overlap": overlap, "rho": rho,
            "tau": tau, "rho_cos": rho_cos, "dbg_s": dbg["seconds"], "dbg_call_s": dbg["call_seconds"],
            "ga_s": ga_s, "top1": (top_d[0] if top_d else "-", top_g[0] if top_g else "-")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="*", help="set names or prefixes (default: every set built)")
    ap.add_argument("--samples", default="auto",
                    help="first N calibration samples, both tools; auto (default): 4 for inputs of <= 100k elements, "
                         "else 1")
    ap.add_argument("--node-type", default="node", choices=("node", "activation", "weight"),
                    help="debugger granularity: node (default) or HzCalibration nodes of one tensor type")
    ap.add_argument("--keep-rescaled-weights", action="store_true",
                    help="keep graphaudit's regions of weights rescaled by activation equalization (see above)")
    args = ap.parse_args(argv)
    if args.samples != "auto" and not (args.samples.isdigit() and int(args.samples) > 0):
        ap.error("--samples: auto or a positive integer")
    hb = _hbenv()
    if hb is None:
        print("no toolchain environment (samples/build/hbenv.path); ./setup.sh builds it where Python 3.10 exists")
        return 1
    sets = _sets(args.sets)
    if not sets:
        print(f"no real stage sets in {SETS} matching {args.sets or 'any'} (./setup.sh builds them)")
        return 1
    t0 = time.perf_counter()
    rows = []
    for s in sets:
        try:
            n = _auto_samples(s) if args.samples == "auto" else int(args.samples)
            rows.append(_one(hb, s, n, args.node_type, args.keep_rescaled_weights))
        except (RuntimeError, SystemExit) as e:
            print(f"\n== {s.name}: skipped: {e}")
    print(f"\nsummary (node_type {args.node_type}; rho/tau: debugger cosine vs graphaudit isolated SQNR over the nodes "
          "both rank; excl.: rescaled-weight regions left out)")
    print("| set | samples | nodes debugger / graphaudit / both | excl. | top-10 overlap | Spearman rho "
          "| Kendall tau-b | rho (ga cosine) | debugger s (call) | graphaudit s | top-1 debugger / graphaudit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['set']} | {r['samples']} | {'/'.join(map(str, r['nodes']))} | {r['excluded']} | "
              f"{r['overlap']}/10 | {_fmt_corr(r['rho'])} | {_fmt_corr(r['tau'])} | {_fmt_corr(r['rho_cos'])} | "
              f"{r['dbg_s']:.1f} ({r['dbg_call_s']:.1f}) | {r['ga_s']:.1f} | {r['top1'][0]} / {r['top1'][1]} |")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    return 0 if len(rows) == len(sets) else 1


if __name__ == "__main__":
    sys.exit(main())
