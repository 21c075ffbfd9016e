"""Benchmark: the structure step (``graphaudit diff``) against the parse floor (``onnx.load``), issue 17 part 1.

Each measurement is a whole fresh process (interpreter start and imports included, as a user sees it): its CPU
seconds (user + system, from ``getrusage(RUSAGE_CHILDREN)``) and its wall seconds, the median of ``--repeat`` runs,
the floor and graphaudit runs interleaved. Ratios and targets are on CPU seconds: on a machine shared with other
jobs, wall time measures the neighbours (a bare ``import onnx`` took 0.2 s or 3 s depending on them) far more than
CPU time does.

- floor: ``python -c "import onnx; onnx.load(f) for each stage file"`` (``load_external_data=False``);
- graphaudit: ``python -m graphaudit diff FILES`` (load, align, classify, checks, console output to /dev/null).

Cases: every bundled pipeline (``samples/build/horizon/*``, ``samples/build/ort/*``), and generated models of
1,000 / 10,000 / 100,000 nodes in three stages, built deterministically with ``onnx.helper``:

1. original: blocks Conv -> BatchNormalization -> Relu (even blocks) or Clip(0, 6) (odd blocks) -> Add (residual),
   on a [1, 8, 4, 4] tensor: 4 nodes per block;
2. optimized: what onnxruntime's basic optimizer writes (ConvBNFusion: the BatchNormalization folded into the
   Conv's weight and bias, the Conv writing the BatchNormalization's output name; Relu/Clip and Add kept);
3. QDQ: what onnxruntime's QDQ quantizer writes for it (QuantizeLinear/DequantizeLinear on every activation, int8
   weights and int32 biases behind DequantizeLinear, and each Relu/Clip absorbed into the quantization of the
   Conv output, the Conv writing the activation's output name).

Targets (issue 17): <= 2x the floor on the bundled pipelines, <= 3x on the 10k model, the 100k-node pair
(optimized -> QDQ) in <= 10 s, and linear growth: 10x the nodes -> <= 11x the time (1k -> 10k -> 100k). Growth is
measured on the work alone: a child process imports graphaudit, runs ``diff`` once on a generated 100-node pipeline
(lazy imports, first-call costs), then times ``graphaudit.cli.main(["diff", ...])`` on the case with
``time.process_time`` (CPU seconds of every thread). Subtracting a start-up estimate from whole-process times does not
work for this: ``diff --help`` imports other modules than a run does, and on the 1k case the estimate came out larger
than the whole run.
Beside each growth figure the bench prints the same growth of the least any loader of graphaudit's data model does
(parse, one ``NodeInfo`` per node and one ``TensorInfo`` per tensor, nothing else; ``records_cpu``) and how many
times that the diff takes: where the records alone grow faster than the nodes, it is the per-element records that
grow, not one of graphaudit's passes.

Under each target that is not met, a ``why:`` line splits the measured figure: for the 10k and 100k-pair budgets,
start-up, imports and exit (the whole process less the in-process diff), the records alone and graphaudit's passes
on them (the 100k pair's in-process diff and records are measured for it); for growth, the records' growth and the
passes' growth over the same step.

Usage: python bench/bench_structure.py [--quick] [--repeat 3] [--repeat-large 1] [--sizes 1000 10000 100000]
       [--no-bundled] [--timeout 600] [--code DIR]

The full run (every target) takes about 2 minutes on an idle 2-core machine (80 s on 2026-12-04), much longer on a
loaded one; ``--quick`` runs each case once and leaves out the 100,000-node cases (their two targets print as not
measured): about 10 s. ``--pair-only`` times the optimized -> QDQ pairs alone (no bundled pipelines, no growth). The last lines
list every target with its measured figure and met / NOT met.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
C = 8  # channels
SHAPE = [1, C, 4, 4]


def _block_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"w": (rng.standard_normal((C, C, 1, 1)) * 0.1).astype(np.float32),
            "s": (1 + 0.1 * rng.standard_normal(C)).astype(np.float32),
            "b": (0.1 * rng.standard_normal(C)).astype(np.float32),
            "m": (0.01 * rng.standard_normal(C)).astype(np.float32),
            "v": (1 + 0.1 * rng.random(C)).astype(np.float32)}


def _activation(i: int, src: str, dst: str) -> onnx.NodeProto:
    if i % 2 == 0:
        return helper.make_node("Relu", [src], [dst], name=f"relu{i}")
    return helper.make_node("Clip", [src, "clip_min", "clip_max"], [dst], name=f"clip{i}")


def _model(nodes, inits, name: str) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="bench_structure")


def _out(i: int, blocks: int) -> str:
    return "y" if i == blocks - 1 else f"a{i}"


def generate(n_nodes: int, out_dir: Path) -> list[Path]:
    """Write gen_original.onnx, gen_optimized.onnx, gen_qdq.onnx (see the module docstring) with ``n_nodes // 4``
    blocks into ``out_dir``; returns the three paths in pipeline order. Deterministic (seed 0)."""
    blocks = max(1, n_nodes // 4)
    rng = np.random.default_rng(0)
    params = [_block_params(rng) for _ in range(blocks)]
    clip = [numpy_helper.from_array(np.array(0, np.float32), "clip_min"),
            numpy_helper.from_array(np.array(6, np.float32), "clip_max")]
    # 1. original
    nodes, inits, prev = [], list(clip), "x"
    for i, p in enumerate(params):
        inits += [numpy_helper.from_array(p[k], f"{k}{i}") for k in "wsbmv"]
        nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], name=f"conv{i}"),
                  helper.make_node("BatchNormalization", [f"c{i}", f"s{i}", f"b{i}", f"m{i}", f"v{i}"], [f"n{i}"],
                                   name=f"bn{i}"),
                  _activation(i, f"n{i}", f"r{i}"),
                  helper.make_node("Add", [f"r{i}", prev], [_out(i, blocks)], name=f"add{i}")]
        prev = _out(i, blocks)
    files = [out_dir / "gen_original.onnx", out_dir / "gen_optimized.onnx", out_dir / "gen_qdq.onnx"]
    onnx.save(_model(nodes, inits, "original"), files[0])
    # 2. optimized: ConvBNFusion (w' = w * s / sqrt(v + eps), b' = (0 - m) * s / sqrt(v + eps) + b, eps = 1e-5)
    folded = []
    for p in params:
        k = p["s"] / np.sqrt(p["v"] + 1e-5)
        folded.append(((p["w"] * k[:, None, None, None]).astype(np.float32), ((0 - p["m"]) * k + p["b"]).astype(np.float32)))
    nodes, inits, prev = [], list(clip), "x"
    for i, (w, b) in enumerate(folded):
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"conv{i}_bn_bias")]
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"conv{i}_bn_bias"], [f"n{i}"], name=f"conv{i}"),
                  _activation(i, f"n{i}", f"r{i}"),
                  helper.make_node("Add", [f"r{i}", prev], [_out(i, blocks)], name=f"add{i}")]
        prev = _out(i, blocks)
    onnx.save(_model(nodes, inits, "optimized"), files[1])
    # 3. QDQ (onnxruntime's names: <t>_QuantizeLinear_Output, <t>_DequantizeLinear_Output, <w>_quantized, ...)
    nodes, inits = [], []

    def qdq(t: str) -> str:
        inits.extend([numpy_helper.from_array(np.array(0.05, np.float32), f"{t}_scale"),
                      numpy_helper.from_array(np.array(0, np.uint8), f"{t}_zero_point")])
        nodes.extend([helper.make_node("QuantizeLinear", [t, f"{t}_scale", f"{t}_zero_point"],
                                       [f"{t}_QuantizeLinear_Output"], name=f"{t}_QuantizeLinear"),
                      helper.make_node("DequantizeLinear", [f"{t}_QuantizeLinear_Output", f"{t}_scale",
                                                            f"{t}_zero_point"], [f"{t}_DequantizeLinear_Output"],
                                       name=f"{t}_DequantizeLinear")])
        return f"{t}_DequantizeLinear_Output"

    def weight(name: str, arr: np.ndarray, dtype, scale: float) -> str:
        q = np.clip(np.round(arr / scale), -127 if dtype == np.int8 else -2**31, 127 if dtype == np.int8 else 2**31 - 1)
        inits.extend([numpy_helper.from_array(q.astype(dtype), f"{name}_quantized"),
                      numpy_helper.from_array(np.array(scale, np.float32), f"{name}_scale"),
                      numpy_helper.from_array(np.array(0, dtype), f"{name}_zero_point")])
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_quantized", f"{name}_scale", f"{name}_zero_point"],
                                      [f"{name}_DequantizeLinear_Output"], name=f"{name}_DequantizeLinear"))
        return f"{name}_DequantizeLinear_Output"

    prev_dq = qdq("x")
    for i, (w, b) in enumerate(folded):
        wd, bd = weight(f"w{i}", w, np.int8, 0.01), weight(f"conv{i}_bn_bias", b, np.int32, 0.0005)
        nodes.append(helper.make_node("Conv", [prev_dq, wd, bd], [f"r{i}"], name=f"conv{i}"))  # Relu/Clip absorbed
        r_dq = qdq(f"r{i}")
        nodes.append(helper.make_node("Add", [r_dq, prev_dq], [_out(i, blocks)], name=f"add{i}"))
        prev_dq = qdq(_out(i, blocks)) if i < blocks - 1 else prev_dq
    onnx.save(_model(nodes, inits, "qdq"), files[2])
    return files


#: Seconds after which one run is stopped and reported as "> TIMEOUT" (the quadratic code of main took 41 min on
#: the 100k case); set by --timeout.
TIMEOUT = 600.0


#: Where ``python -m graphaudit`` is imported from (--code: another checkout, e.g. the code before a change).
CODE = REPO


def _run(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user + system) of one child process; past TIMEOUT, (inf, CPU seconds so far)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(CODE)}
    try:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=CODE, env=env,
                           timeout=TIMEOUT)
    except subprocess.TimeoutExpired:  # stopped: wall time unknown (inf), CPU time so far a lower bound
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return float("inf"), (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 1):  # 1: findings of error severity (e.g. unmatched nodes), still a full run
        raise RuntimeError(f"{' '.join(cmd[:4])}...: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return dt, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


#: The child of :func:`work_cpu`: argv = the warm-up files joined by os.pathsep, then the case's files; prints the
#: CPU seconds of the timed ``diff`` on stdout's last line.
_WORK = """
import contextlib, os, sys, time
from graphaudit.cli import main
warm, files = sys.argv[1].split(os.pathsep), sys.argv[2:]
with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
    main(["diff", *warm])
    t0 = time.process_time()
    code = main(["diff", *files])
    cpu = time.process_time() - t0
if code not in (0, 1):
    sys.exit(f"diff exited {code}")
print(cpu)
"""


def work_cpu(files: list[Path], warm: list[Path]) -> float:
    """CPU seconds (user + system, every thread; ``time.process_time``) of ``graphaudit diff FILES`` run in a process
    that has already imported graphaudit and run ``diff`` on ``warm``: the per-graph work without start-up, imports
    or first-call costs, which is what the growth targets are on.

    Raises:
        RuntimeError: the child failed or ``diff`` exited other than 0 or 1.
    """
    return _child_cpu(_WORK, files, warm, "in-process diff")


def _child_cpu(code: str, files: list[Path], warm: list[Path], what: str) -> float:
    """Run ``code`` (:data:`_WORK`, :data:`_RECORDS`) in a child with graphaudit from ``CODE`` on the path, argv =
    the warm-up files joined by os.pathsep, then ``files``; the CPU seconds it prints last.

    Raises:
        RuntimeError: the child failed (``what`` and the case's directory name it).
    """
    env = {**os.environ, "PYTHONPATH": str(CODE)}
    p = subprocess.run([sys.executable, "-c", code, os.pathsep.join(map(str, warm)), *map(str, files)],
                       capture_output=True, text=True, cwd=CODE, env=env, timeout=TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError(f"{what} of {files[0].parent}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return float(p.stdout.split()[-1])


#: The child of :func:`records_cpu`: argv = the warm-up files joined by os.pathsep, then the case's files; prints the
#: CPU seconds of making the records on stdout's last line.
_RECORDS = """
import gc, os, sys, time
import onnx
from graphaudit.stage import NodeInfo, TensorInfo

def records(path):
    m = onnx.ModelProto()
    with open(path, "rb") as fh:
        m.ParseFromString(fh.read())
    g = m.graph
    tensors, nodes = {}, {}
    for i in g.initializer:
        tensors[i.name] = TensorInfo(i.name, "", tuple(i.dims), None, [], "initializer")
    for vi in g.input:
        tensors.setdefault(vi.name, TensorInfo(vi.name, kind="input"))
    get = tensors.get
    for k, n in enumerate(g.node):
        nid, inputs, outputs = n.name or f"{n.op_type}#{k}", tuple(n.input), tuple(n.output)
        for j, x in enumerate(inputs):
            t = get(x)
            if t is None:
                t = tensors[x] = TensorInfo(x)
            t.consumers.append((nid, j))
        nodes[nid] = NodeInfo(nid, n.name, n.op_type, n.domain, inputs, outputs, {}, k)
        for x in outputs:
            tensors[x] = TensorInfo(x, "", None, nid, [])
    return nodes, tensors

gc.disable()  # as graphaudit's structure step runs (pipeline._no_cyclic_gc)
warm, files = sys.argv[1].split(os.pathsep), sys.argv[2:]
kept = [records(f) for f in warm]
t0 = time.process_time()
kept = [records(f) for f in files]
print(time.process_time() - t0)
"""


def records_cpu(files: list[Path], warm: list[Path]) -> float:
    """CPU seconds of the least any loader of graphaudit's data model does: parse each file and make one
    :class:`graphaudit.stage.NodeInfo` per node and one :class:`graphaudit.stage.TensorInfo` per tensor (names,
    producer, consumers; nothing checked, no attribute read), all kept, in a process that did the same on ``warm``
    first. Printed beside the growth targets: where this alone grows faster than the nodes, per-element records
    are what grows, not a pass of graphaudit's.

    Raises:
        RuntimeError: the child failed.
    """
    return _child_cpu(_RECORDS, files, warm, "records")


def measure(files: list[Path], repeat: int) -> dict[str, float]:
    """Medians over ``repeat`` interleaved runs: floor and graphaudit, wall and CPU seconds."""
    load = [sys.executable, "-c", "import sys, onnx\nfor f in sys.argv[1:]: onnx.load(f, load_external_data=False)",
            *map(str, files)]
    diff = [sys.executable, "-m", "graphaudit", "diff", *map(str, files)]
    runs: dict[str, list[float]] = {"floor": [], "floor_cpu": [], "ga": [], "ga_cpu": []}
    for _ in range(repeat):
        for key, cmd in (("floor", load), ("ga", diff)):
            wall, cpu = _run(cmd)
            runs[key].append(wall)
            runs[key + "_cpu"].append(cpu)
        if runs["ga"][-1] == float("inf"):
            break  # one run past the timeout says enough
    return {k: statistics.median(v) for k, v in runs.items()}


def _bundled() -> list[tuple[str, list[Path]]]:
    sys.path.insert(0, str(REPO))
    from graphaudit.samples import bundled_pipelines
    from graphaudit.toolchains import discover_stages

    return [(title.replace(" pipeline", "").replace(" stages", ""), [f.path for f in discover_stages(paths)])
            for title, paths in bundled_pipelines()]


def _count(files: list[Path]) -> int:
    """Nodes in the files (protobuf count)."""
    return sum(len(onnx.load(str(f), load_external_data=False).graph.node) for f in files)


def _row(case: str, nodes: int, r: dict[str, float], target: str, bound: float | None) -> None:
    """One table row; the ratio and the target are on CPU seconds (user + system), which the other users of a shared
    machine disturb far less than wall time (also shown)."""
    ratio = r["ga_cpu"] / r["floor_cpu"]
    if target.endswith(" s"):  # an absolute bound (seconds of CPU)
        met = None if bound is None else r["ga_cpu"] <= bound
    else:
        met = None if bound is None else ratio <= bound
    verdict = "" if met is None else ("met" if met else "NOT met")
    ga = (f"> {r['ga_cpu']:.0f} s (stopped at {TIMEOUT:.0f} s)" if r["ga"] == float("inf")
          else f"{r['ga_cpu']:.2f} s ({r['ga']:.2f} s)")
    print(f"| {case} | {nodes:,} | {r['floor_cpu']:.2f} s ({r['floor']:.2f} s) | {ga} | {ratio:.2f}x | {target} | "
          f"{verdict} |", flush=True)


def _targets(rows: dict[str, tuple[float, float | None]], growth: dict[str, float], sizes: list[int],
             why: dict[str, str] | None = None) -> None:
    """The closing list: each target of issue 17 part 1, the measured figure beside it, met or NOT met, and under a
    target that is not met the ``why`` line measured for it (:func:`why_budget`, :func:`why_growth`)."""
    print("\nTargets (CPU seconds of whole processes; growth: in-process CPU of the diff alone):")
    why = why or {}
    bundled = [r for k, r in rows.items() if k.startswith("bundled")]
    lines = [("bundled pipelines <= 2x onnx.load", max((r[0] for r in bundled), default=None), "x", 2.0, "bundled"),
             ("generated 10k x 3 stages <= 3x onnx.load", rows.get("10k", (None,))[0], "x", 3.0, "10k"),
             ("generated 100k pair <= 10 s", rows.get("pair100k", (None, None))[1], " s", 10.0, "pair100k")]
    for lo, hi in zip(sizes, sizes[1:]):
        lines.append((f"growth {lo:,} -> {hi:,} nodes <= {1.1 * hi / lo:.0f}x", growth.get(f"{lo}-{hi}"), "x",
                      1.1 * hi / lo, f"{lo}-{hi}"))
    for text, value, unit, bound, key in lines:
        figure = "not measured" if value is None else f"{value:.2f}{unit}"  # 2 decimals: 2.05x is not "2.0x"
        verdict = "" if value is None else ("met" if value <= bound else "NOT met")
        print(f"  {text}: {figure} {verdict}".rstrip())
        if verdict == "NOT met" and key in why:
            print(f"    {why[key]}")


def why_budget(whole: float, work: float, records: float, budget: float) -> str:
    """Where the CPU seconds of a whole ``diff`` process (``whole``) go against a ``budget`` (seconds): start-up,
    imports and exit (``whole - work``, ``work`` being the in-process diff), the records alone (``records``:
    :func:`records_cpu`, the least this data model does) and graphaudit's passes on them (the rest of ``work``)."""
    start, passes = whole - work, work - records
    text = (f"why: of {whole:.2f} s, start-up, imports and exit take {start:.2f} s, the records alone (parse, one "
            f"NodeInfo per node, one TensorInfo per tensor) {records:.2f} s, and graphaudit's passes on them "
            f"(alignment, classification, checks, report, console) {passes:.2f} s, {passes / records:.1f}x the "
            f"records' time; the budget is {budget:.2f} s")
    left = budget - start - records
    return text + (f", which leaves {left:.2f} s for those passes" if left > 0 else
                   ", less than start-up and the records alone")


def why_growth(net_lo: float, net_hi: float, rec_lo: float, rec_hi: float) -> str:
    """How the growth of the in-process diff (``net_lo`` -> ``net_hi`` seconds) splits between the records alone
    (``rec_lo`` -> ``rec_hi``) and graphaudit's passes on them (the difference)."""
    return (f"why: the records alone grew {rec_hi / rec_lo:.1f}x ({rec_lo:.3f} -> {rec_hi:.3f} s) and graphaudit's "
            f"passes on them {(net_hi - rec_hi) / (net_lo - rec_lo):.1f}x ({net_lo - rec_lo:.3f} -> "
            f"{net_hi - rec_hi:.3f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--repeat-large", type=int, default=1, help="runs of the 100,000-node cases (default 1)")
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000, 100000])
    ap.add_argument("--quick", action="store_true", help="one run per case, sizes 1,000 and 10,000 only")
    ap.add_argument("--no-bundled", action="store_true")
    ap.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds before one run is stopped")
    ap.add_argument("--pair", action="store_true", help="also time the optimized -> QDQ pair of every size")
    ap.add_argument("--pair-only", action="store_true", help="time only the optimized -> QDQ pairs")
    ap.add_argument("--code", help="import graphaudit from this directory instead (e.g. an export of an older commit)")
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.sizes = 1, [n for n in args.sizes if n < 100000]
    globals()["TIMEOUT"] = args.timeout
    if args.code:
        globals()["CODE"] = Path(args.code).resolve()
    print(f"graphaudit from {CODE}; CPU seconds (user + system) of each whole process, wall seconds in brackets; "
          f"median of {args.repeat} interleaved runs ({args.repeat_large} for 100,000 nodes)")
    from importlib.metadata import version  # the floor's own cost: ml_dtypes 0.7.0 alone added 0.53 s to `import onnx`
    print("floor packages: " + ", ".join(f"{p} {version(p)}" for p in ("onnx", "ml_dtypes", "numpy", "protobuf")))
    print("| case | nodes (all stages) | onnx.load floor | graphaudit diff | ratio (CPU) | target | |")
    print("|---|---|---|---|---|---|---|")
    rows: dict[str, tuple[float, float | None]] = {}  # key -> (ratio, graphaudit CPU seconds)
    if not (args.no_bundled or args.pair_only):
        for title, files in _bundled():
            n = sum(len(onnx.load(str(f), load_external_data=False).graph.node) for f in files)
            r = measure(files, args.repeat)
            rows[f"bundled {title}"] = (r["ga_cpu"] / r["floor_cpu"], r["ga_cpu"])
            _row(f"{title} ({len(files)} stages)", n, r, "<= 2x", 2.0)
    why: dict[str, str] = {}  # target key -> its measured reason (printed where the target is not met)
    net: dict[int, float] = {}  # size -> in-process CPU seconds of the diff alone (work_cpu)
    floor: dict[int, float] = {}  # size -> in-process CPU seconds of the records alone (records_cpu)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "warm").mkdir()
        warm = generate(100, Path(tmp) / "warm")
        for size in args.sizes:
            d = Path(tmp) / str(size)
            d.mkdir()
            files = generate(size, d)
            n = _count(files)
            repeat = args.repeat_large if size >= 100000 else args.repeat
            if args.pair_only:
                r = measure(files[1:], repeat)
                if size == 100000:
                    rows["pair100k"] = (r["ga_cpu"] / r["floor_cpu"], r["ga_cpu"])
                _row(f"generated {size:,}: pair optimized -> QDQ", _count(files[1:]), r,
                     *(("<= 10 s", 10.0) if size == 100000 else ("", None)))
                continue
            r = measure(files, repeat)
            net[size] = statistics.median(work_cpu(files, warm) for _ in range(repeat))
            floor[size] = statistics.median(records_cpu(files, warm) for _ in range(repeat))
            if size == 10000:
                rows["10k"] = (r["ga_cpu"] / r["floor_cpu"], r["ga_cpu"])
                why["10k"] = why_budget(r["ga_cpu"], net[size], floor[size], 3 * r["floor_cpu"])
            _row(f"generated {size:,} nodes x 3 stages", n, r, *(("<= 3x", 3.0) if size == 10000 else ("", None)))
            if size == 100000 or args.pair:
                pair = files[1:]
                n = sum(len(onnx.load(str(f), load_external_data=False).graph.node) for f in pair)
                r = measure(pair, repeat)
                if size == 100000:
                    rows["pair100k"] = (r["ga_cpu"] / r["floor_cpu"], r["ga_cpu"])
                    why["pair100k"] = why_budget(r["ga_cpu"], work_cpu(pair, warm[1:]), records_cpu(pair, warm[1:]),
                                                 10.0)
                _row(f"generated {size:,}: pair optimized -> QDQ", n, r,
                     *(("<= 10 s", 10.0) if size == 100000 else ("", None)))  # the target is the 100k pair's
    sizes = sorted(net)
    growth: dict[str, float] = {}
    for lo, hi in zip(sizes, sizes[1:]):
        g = growth[f"{lo}-{hi}"] = net[hi] / net[lo]
        bound = 1.1 * hi / lo
        print(f"growth {lo:,} -> {hi:,} nodes (in-process CPU of the diff, after a warm-up): {net[lo]:.2f} s -> "
              f"{net[hi]:.2f} s "
              f"= {g:.1f}x for {hi / lo:.0f}x the nodes (target <= {bound:.0f}x): "
              f"{'met' if g <= bound else 'NOT met'}")
        f = floor[hi] / floor[lo]
        why[f"{lo}-{hi}"] = why_growth(net[lo], net[hi], floor[lo], floor[hi])
        print(f"  records alone (one NodeInfo per node, one TensorInfo per tensor, from the protobuf; in-process CPU): "
              f"{floor[lo]:.2f} s -> {floor[hi]:.2f} s = {f:.1f}x; the diff takes {net[lo] / floor[lo]:.1f}x the "
              f"records' time at {lo:,} nodes and {net[hi] / floor[hi]:.1f}x at {hi:,}")
    _targets(rows, growth, sorted(set(sizes) | ({1000, 10000, 100000} if not args.pair_only else set())), why)


if __name__ == "__main__":
    main()
