"""Benchmark: where the float64 reductions of a numeric comparison should run (issue 17 part 2, second round).

The numeric step's cost over plain inference is the float64 sums over every aligned tensor pair (1.7 GB of tensors
per PP-OCRv4 det sample). This bench measures the routes proposed for them, on the same stage pair and samples:

- whole runs, each a fresh process, interleaved (floor, today, in-session, floor, ...), medians printed:
  - ``floor``: plain inference of both stages (as ``bench/bench_compare.py`` measures it);
  - ``today``: :func:`graphaudit.numeric.compare.compare_stages` without isolated measurement (aligned tensors as
    session outputs, reduced in numpy float64 chunks);
  - ``in-session``: ONE onnxruntime model holding both stages (stage b's names prefixed, stage a converted to b's
    opset when they differ) with, beside every aligned pair, Cast to DOUBLE, Sub, ReduceSumSquare of a, b and b-a
    and ReduceMax of |b-a|: only scalars leave the session. Its sums are checked against today's (max relative
    difference printed);
  - ``iobinding``: today's path with every captured output bound to a buffer reused from sample to sample (no fresh
    pages per sample);
- per element pair, in one process, on one sample's real aligned tensors: numpy chunks
  (:meth:`graphaudit.numeric.metrics.ErrorStats.update`, the reduce step of today), onnxruntime's float64 ops (the
  in-session reduction alone, fed the same tensors), and, where ``gcc`` is installed, a compiled single-pass kernel
  (float32 in, float64 sums; vectorized reduction) as the reference for what a compiled kernel would reach, and,
  where llvmlite is installed, :mod:`graphaudit.numeric.fastsum`'s kernel (the route graphaudit takes with it; the
  whole runs above then take it too, ``GRAPHAUDIT_NUMPY_SUMS=1`` keeps numpy).

Wall times on a shared machine are noisy: the load average is printed with the figures.

Usage: python bench/bench_insession.py [--repeat 3] [--samples 4] [--model ppocr_det] [--pair original optimized]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "samples" / "build"
MODES = ("floor", "today", "in-session", "iobinding")



def _reduction_nodes(a: str, b: str, p: str) -> list:
    """The float64 reductions of one pair (a, b) of float tensors, outputs ``p + "aa"``, ``"bb"``, ``"ee"`` (sums of
    a^2, b^2, (b - a)^2) and ``"mx"`` (max |b - a|)."""
    from onnx import TensorProto, helper

    dbl = TensorProto.DOUBLE
    return [helper.make_node("Cast", [a], [p + "a"], to=dbl),
            helper.make_node("Cast", [b], [p + "b"], to=dbl),
            helper.make_node("Sub", [p + "b", p + "a"], [p + "e"]),
            helper.make_node("ReduceSumSquare", [p + "a"], [p + "aa"], keepdims=0),
            helper.make_node("ReduceSumSquare", [p + "b"], [p + "bb"], keepdims=0),
            helper.make_node("ReduceSumSquare", [p + "e"], [p + "ee"], keepdims=0),
            helper.make_node("Abs", [p + "e"], [p + "ae"]),
            helper.make_node("ReduceMax", [p + "ae"], [p + "mx"], keepdims=0)]


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _files(model: str, a: str, b: str) -> list[Path]:
    d = BUILD / "ort" / model
    return [d / f"{model}_{a}.onnx", d / f"{model}_{b}.onnx"]


def _data(model: str, n: int) -> list[Path]:
    return sorted((BUILD / "data" / model / "x").glob("*.npy"), key=lambda p: int(p.stem))[:n]


def fused_model(model_a, model_b, pairs: list[tuple[str, str]], prefix: str = "b::"):
    """One model running both stages and reducing every pair ``(a tensor, b tensor)`` in float64 inside the graph.

    Outputs per pair k, float64 scalars: ``r{k}_aa`` = sum(a^2), ``r{k}_bb`` = sum(b^2), ``r{k}_ee`` =
    sum((b-a)^2), ``r{k}_mx`` = max|b-a|. Stage b's names carry ``prefix`` (:func:`onnx.compose.add_prefix`); stage a
    is converted to b's default-domain opset when they differ (:func:`onnx.version_converter.convert_version`).
    """
    import onnx
    from onnx import compose, helper, version_converter

    opset = {o.domain: o.version for o in model_b.opset_import}
    if {o.domain: o.version for o in model_a.opset_import}.get("", 0) != opset.get("", 0):
        model_a = version_converter.convert_version(model_a, opset[""])
    model_b = compose.add_prefix(model_b, prefix)
    nodes, outs = list(model_a.graph.node) + list(model_b.graph.node), []
    for k, (a, b) in enumerate(pairs):
        p = f"r{k}_"
        nodes += _reduction_nodes(a, prefix + b, p)
        outs += [p + "aa", p + "bb", p + "ee", p + "mx"]
    graph = helper.make_graph(nodes, "fused", list(model_a.graph.input) + list(model_b.graph.input),
                              [onnx.ValueInfoProto(name=o) for o in outs],
                              list(model_a.graph.initializer) + list(model_b.graph.initializer))
    domains = {**{o.domain: o.version for o in model_a.opset_import}, **opset}
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in domains.items()])
    m.ir_version = max(model_a.ir_version, model_b.ir_version)
    return m


def _figures(tensors) -> dict:
    return {t.a_tensor: [t.stats.sum_aa, t.stats.sum_bb, t.stats.sum_ee, t.stats.max_abs] for t in tensors
            if t.stats.samples}


def _run_floor(files, xs) -> dict:
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()  # as bench_compare's floor: default threads, graph optimizations off
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sessions = [ort.InferenceSession(onnx.load(str(f)).SerializeToString(), so, providers=["CPUExecutionProvider"])
                for f in files]
    for x in xs:
        for s in sessions:
            s.run(None, {s.get_inputs()[0].name: x})
    return {}


def _comparison(files):
    from graphaudit.numeric import compare as cmp
    from graphaudit.pipeline import audit

    rep = audit([str(f) for f in files])
    plan = cmp._plan(rep.stages, rep.lineage.alignments, rep.changes, False)
    return cmp._Comparison(rep.stages, rep.lineage.alignments, plan,
                           cmp.CompareOptions(isolated=False, runtime="onnxruntime"))


def _run_today(files, xs, iobinding: bool = False) -> dict:
    from graphaudit.numeric.schedule import run_all

    c = _comparison(files)
    buffers: list[dict | None] = [None] * len(c.runners)

    def bound(i: int, feeds: dict) -> dict:
        r = c.runners[i]
        if buffers[i] is None:  # the first sample gives every output's shape and dtype
            values = r.run(feeds)
            buffers[i] = {k: v.copy() for k, v in values.items()}
            return values
        io = r.session.io_binding()
        for k in r.input_names:
            io.bind_cpu_input(k, feeds[k])
        for k, v in buffers[i].items():
            io.bind_output(k, "cpu", 0, v.dtype, list(v.shape), v.ctypes.data)
        r.session.run_with_iobinding(io)
        return buffers[i]

    for k, x in enumerate(xs):
        if iobinding:
            feeds = [c.feeder.feeds(i, {"x": x}, k) for i in range(len(c.runners))]
            values = run_all([lambda i=i: bound(i, feeds[i]) for i in range(len(c.runners))], c.concurrent)
        else:
            values = c.run({"x": x}, k)
        c.reduce(values)
        values = None
    return {"figures": _figures(c.finish()[0].tensors)}


def _run_insession(files, xs) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort

    c = _comparison(files)
    tensors = [t for t in c.results[0].tensors if t.codec is None]
    model = fused_model(onnx.load(str(files[0])), onnx.load(str(files[1])),
                        [(t.a_tensor, t.b_tensor) for t in tensors])
    del c
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    acc = np.zeros((len(tensors), 4))
    for x in xs:
        r = np.asarray(s.run(None, {i.name: x for i in s.get_inputs()}), np.float64).reshape(len(tensors), 4)
        acc[:, :3] += r[:, :3]
        acc[:, 3] = np.maximum(acc[:, 3], r[:, 3])
    return {"figures": {t.a_tensor: list(acc[k]) for k, t in enumerate(tensors)}}


def _child(mode: str, files: list[str], data: list[str], code: str) -> dict:
    import numpy as np

    sys.path.insert(0, code)
    xs = [np.load(d) for d in data]
    import graphaudit.pipeline  # noqa: F401 - imports are not timed
    t0 = time.perf_counter()
    out = {"floor": _run_floor, "today": _run_today, "in-session": _run_insession,
           "iobinding": lambda f, x: _run_today(f, x, iobinding=True)}[mode]([Path(f) for f in files], xs)
    out.update(seconds=time.perf_counter() - t0, peak_rss_mb=_peak_rss_mb())
    return out


def run(mode: str, files: list[Path], data: list[Path], code: Path = REPO) -> dict:
    """One fresh process of ``mode``; its figures (seconds, peak RSS, and the sums where it computes them)."""
    src = (f"import json,sys; sys.path.insert(0, {str(REPO / 'bench')!r}); from bench_insession import _child; "
           f"print(json.dumps(_child({mode!r}, {[str(f) for f in files]!r}, {[str(d) for d in data]!r}, "
           f"{str(code)!r})))")
    p = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def max_rel_diff(x: dict, y: dict) -> float:
    """Largest relative difference between the sums of the pairs both runs measured."""
    worst = 0.0
    for k in x.keys() & y.keys():
        for u, v in zip(x[k], y[k]):
            if u != v:
                worst = max(worst, abs(u - v) / max(abs(u), abs(v)))
    return worst


_KERNEL = r"""
#include <math.h>
#include <stddef.h>
void sums(const float *a, const float *b, size_t n, double *out) {
  double aa = 0, bb = 0, ee = 0, mx = 0;
  #pragma omp simd reduction(+:aa,bb,ee) reduction(max:mx)
  for (size_t i = 0; i < n; i++) {
    double x = a[i], y = b[i], e = y - x, ae = fabs(e);
    aa += x * x; bb += y * y; ee += e * e; mx = ae > mx ? ae : mx;
  }
  out[0] = aa; out[1] = bb; out[2] = ee; out[3] = mx;
}
"""


def _compiled_kernel():
    """The single-pass C kernel above, built with gcc into a temporary directory (None without gcc)."""
    import ctypes
    import shutil

    if shutil.which("gcc") is None:
        return None
    d = Path(tempfile.mkdtemp(prefix="bench_insession_"))
    (d / "k.c").write_text(_KERNEL)
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp-simd", "-ffp-contract=off", "-shared", "-fPIC",
                    "-o", str(d / "k.so"), str(d / "k.c")], check=True)
    f = ctypes.CDLL(str(d / "k.so")).sums
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return f


def _reduction_session(pairs: list):
    """An onnxruntime session taking every pair's two float32 tensors and returning the float64 sums."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    dbl, nodes, ins, outs = TensorProto.DOUBLE, [], [], []
    for k, (a, _b) in enumerate(pairs):
        p = f"r{k}_"
        ins += [helper.make_tensor_value_info(p + x, TensorProto.FLOAT, list(a.shape)) for x in ("x", "y")]
        nodes += _reduction_nodes(p + "x", p + "y", p)
        outs += [helper.make_tensor_value_info(p + x, dbl, []) for x in ("aa", "bb", "ee", "mx")]
    m = helper.make_model(helper.make_graph(nodes, "reduce", ins, outs), opset_imports=[helper.make_opsetid("", 13)])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1  # one thread, as the other routes
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def per_pair(files: list[Path], data: Path, repeat: int) -> dict:
    """ns per element pair of each reduction route on one sample's real aligned tensors (best of ``repeat``)."""
    import numpy as np

    from graphaudit.numeric import fastsum
    from graphaudit.numeric.metrics import ErrorStats

    c = _comparison(files)
    va, vb = c.run({"x": np.load(data)}, 0)
    pairs = [(va[t.a_tensor], vb[t.b_tensor]) for t in c.results[0].tensors
             if t.codec is None and t.a_tensor in va and t.b_tensor in vb and va[t.a_tensor].shape == vb[t.b_tensor].shape]
    n = sum(a.size for a, _b in pairs)
    session = _reduction_session(pairs)
    feeds = {f"r{k}_{x}": v for k, (a, b) in enumerate(pairs) for x, v in (("x", a), ("y", b))}
    kernel, out = _compiled_kernel(), np.zeros(4)
    fast_kernel = fastsum._kernel if fastsum.enable() else None

    def numpy_route():
        fastsum._kernel = None  # ErrorStats.update on its numpy blocks
        try:
            [ErrorStats().update(a, b) for a, b in pairs]
        finally:
            fastsum._kernel = fast_kernel

    routes = {"numpy float64 chunks (ErrorStats.update)": numpy_route,
              "onnxruntime float64 ops (Cast, Sub, ReduceSumSquare, ReduceMax)": lambda: session.run(None, feeds)}
    if fast_kernel is not None:
        routes["graphaudit.numeric.fastsum (llvmlite, graphaudit[fast])"] = lambda: [
            fastsum.error_sums(a.reshape(-1), b.reshape(-1)) for a, b in pairs]
    if kernel is not None:
        routes["compiled single-pass kernel (gcc, reference)"] = lambda: [
            kernel(np.ascontiguousarray(a).ctypes.data, np.ascontiguousarray(b).ctypes.data, a.size, out.ctypes.data)
            for a, b in pairs]
    best = {k: float("inf") for k in routes}
    for _ in range(repeat):  # interleaved
        for name, f in routes.items():
            t0 = time.perf_counter()
            f()
            best[name] = min(best[name], time.perf_counter() - t0)
    return {"pairs": len(pairs), "elements": n, "ns_per_pair": {k: v * 1e9 / n for k, v in best.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each mode (medians printed)")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--model", default="ppocr_det")
    ap.add_argument("--pair", nargs=2, default=["original", "optimized"], metavar=("A", "B"))
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    files, data = _files(args.model, *args.pair), _data(args.model, args.samples)
    load0 = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for _ in range(args.repeat):  # interleaved: the machine's load hits every mode alike
        for m in MODES:
            runs[m].append(run(m, files, data))
    med = {m: (statistics.median(r["seconds"] for r in rs), statistics.median(r["peak_rss_mb"] for r in rs))
           for m, rs in runs.items()}
    print(f"{args.model} {args.pair[0]} -> {args.pair[1]}, {len(data)} samples, {args.repeat} interleaved runs, "
          f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    print("| route | wall (median) | x floor | peak RSS | max rel. diff of the sums vs today |")
    print("|---|---|---|---|---|")
    for m, (s, rss) in med.items():
        diff = max_rel_diff(runs["today"][0]["figures"], runs[m][0]["figures"]) if "figures" in runs[m][0] else None
        print(f"| {m} | {s:.2f} s | {s / med['floor'][0]:.2f}x | {rss:.0f} MB | "
              f"{'' if diff is None else f'{diff:.1e}'} |", flush=True)
    sys.path.insert(0, str(REPO))
    pp = per_pair(files, data[0], args.repeat)
    print(f"\nper element pair, one sample's {pp['pairs']} aligned pairs ({pp['elements'] / 1e6:.0f} M element pairs), "
          f"one thread, best of {args.repeat}, load average {os.getloadavg()[0]:.2f}:")
    for k, v in pp["ns_per_pair"].items():
        print(f"- {k}: {v:.2f} ns")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": {m: [{k: v for k, v in r.items() if k != "figures"}
                                                             for r in rs] for m, rs in runs.items()},
                                               "per_pair": pp}, indent=1))


if __name__ == "__main__":
    main()
