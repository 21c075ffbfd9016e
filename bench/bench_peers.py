"""Benchmark: graphaudit against the peers a user would pick instead, on the same stage pairs and samples (issue 17).

Peers (``pip install -e '.[bench]'``; a peer that is not installed gets a row saying so):

- onnxruntime's ``qdq_loss_debug`` (``onnxruntime.quantization.qdq_loss_debug``), its documented flow in one process:
  ``modify_model_output_intermediate_tensors`` on both models, ``collect_activations`` over the samples,
  ``create_activation_matching`` (QDQ activations against the float ones, by ORT's tensor-name convention),
  ``create_weight_matching``, ``compute_activation_error``, ``compute_weight_error``. Pairs: the activation entries
  that have a float side, plus the matched weights. An exception is a row (its type and message), not a crash.
- Polygraphy, its CLI as its documentation shows: ``polygraphy run A.onnx --onnxrt --onnx-outputs mark all
  --data-loader-script loader.py --save-outputs a.json``, then ``polygraphy run B.onnx ... --load-outputs a.json``,
  which compares B's outputs with the saved ones (exit status 1 when some differ beyond its tolerances: still a full
  run). Time is the sum of the two processes, peak RSS the larger. Pairs: the distinct ``Comparing Output: 'b' ...
  with 'a'`` lines of its log. Polygraphy pairs an output of B with the output of A of the same name, else the first
  whose name contains it or is contained in it (case-insensitive), else the one at the same index
  (``polygraphy.util.find_str_in_iterable``); the table splits the pairs into those three kinds.
- graphaudit: ``python -m graphaudit compare A B --data DIR --json R.json`` with ``--no-isolated`` (what the peers do:
  run both models, compare tensors) and without (each change also measured on its own, cls and 1k only). Pairs: the
  report's ``tensors_compared``.

- plain inference, the floor under all of them (``python bench_peers.py --floor DATA INPUT STAGE...``): each stage
  loaded, one onnxruntime session per stage (graph optimizations off), every sample through it, nothing captured;
  once with both stages in one process (how graphaudit runs them) and once with each stage in a process of its own
  (how Polygraphy runs them: the larger peak, the CPU summed). Where graphaudit is not ahead of a peer on memory, a
  ``why:`` line under the verdict gives both floors and what graphaudit holds over its own.

Each tool runs in a fresh process (imports and model loading included, as a user sees it), started by a small
launcher that forks it, waits with ``wait4`` and reports the child's wall seconds, CPU seconds (user + system) and
peak RSS (``ru_maxrss``: the launcher is a bare interpreter, so what the child inherits at fork is a few MB), and
stops it after ``--timeout`` wall seconds on the generated models above 1,000 nodes (a row "timeout after N s").

Cases: the PP-OCR cls pair optimized -> QDQ of the bundled onnxruntime pipeline (``samples/build/ort/ppocr_cls``,
built by ``samples/build_samples.py``) on its 16 samples; the generated model of ``bench/bench_structure.py`` (Conv +
Relu/Clip + Add blocks, optimized -> QDQ with every Relu/Clip absorbed into the quantization of the Conv output, the
Conv writing the activation's name) at 1,000 and 10,000 nodes, on ``--gen-samples`` uniform [0, 1) inputs (seed 0).

Independent check of the pairs (not timed): a name-alike pair is counted as "not the same quantity" when the
tensor's producer has a different op type in the two graphs (protobuf: the QDQ model's Conv writes the name of the
optimized model's Relu/Clip output, the value before the absorbed activation); on the cls pair the cosine of every
Polygraphy exact-name pair and every graphaudit pair is also computed on sample 0 with plain onnxruntime sessions.

Usage: python bench/bench_peers.py [--quick] [--gen-samples 2] [--timeout 45] [--sizes 1000 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent

#: One comparison line of ``polygraphy run --load-outputs`` (polygraphy/comparator/compare.py ``run_comparison``).
_PG_LINE = re.compile(r"Comparing Output: '(.+?)' \(dtype=([^,]+), shape=(\(.*?\))\) "
                      r"with '(.+?)' \(dtype=([^,]+), shape=(\(.*?\))\)")


# ---------------------------------------------------------------------------------------------------------------
# Launcher: fork + exec + wait4 (run as ``python -S bench_peers.py --launch TIMEOUT LOG -- CMD...``)


def _launch(timeout: float, log: str, cmd: list[str]) -> dict:
    """Run ``cmd`` with stdout and stderr to ``log``; return {"wall_s", "cpu_s", "peak_rss_mb", "rc", "timeout"}.
    ``timeout`` <= 0: no limit. Past it the child's process group is killed (SIGKILL) and its usage so far reported."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.setpgid(0, 0)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    timed_out = False
    while True:
        got, status, ru = os.wait4(pid, os.WNOHANG)
        if got == pid:
            break
        if 0 < timeout < time.perf_counter() - t0:
            os.killpg(pid, signal.SIGKILL)
            _, status, ru = os.wait4(pid, 0)
            timed_out = True
            break
        time.sleep(0.01)
    return {"wall_s": time.perf_counter() - t0, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024,
            "rc": os.waitstatus_to_exitcode(status), "timeout": timed_out}


def run_tool(cmd: list[str], log: Path, timeout: float = 0, env: dict | None = None) -> dict:
    """Run ``cmd`` in a fresh process through the launcher; returns :func:`_launch`'s dict (seconds, MB)."""
    launcher = [sys.executable, "-S", str(Path(__file__).resolve()), "--launch", str(timeout), str(log), "--", *cmd]
    p = subprocess.run(launcher, capture_output=True, text=True, check=True, env=env or os.environ.copy(), cwd=log.parent)
    return json.loads(p.stdout)


# ---------------------------------------------------------------------------------------------------------------
# qdq_loss_debug child (run as ``python bench_peers.py --qdq-loss-debug A B DATA_DIR INPUT OUT``)


def _qdq_loss_debug(a: str, b: str, data: str, input_name: str, out: str) -> None:
    """onnxruntime's documented qdq_loss_debug flow on float model ``a`` and QDQ model ``b``; writes the pair counts
    (or the exception raised, as "Type: message") as JSON to ``out``. Augmented models go to a temporary directory."""
    result: dict = {"step": "import"}
    try:
        import numpy as np
        from onnxruntime.quantization import CalibrationDataReader
        from onnxruntime.quantization import qdq_loss_debug as qld

        files = sorted(Path(data).glob("*.npy"), key=lambda p: int(p.stem))

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self._it = iter(files)

            def get_next(self):
                f = next(self._it, None)
                return None if f is None else {input_name: np.load(f)}

        with tempfile.TemporaryDirectory() as tmp:
            aug_a, aug_b = str(Path(tmp) / "a_aug.onnx"), str(Path(tmp) / "b_aug.onnx")
            result["step"] = "modify_model_output_intermediate_tensors"
            qld.modify_model_output_intermediate_tensors(a, aug_a)
            qld.modify_model_output_intermediate_tensors(b, aug_b)
            result["step"] = "collect_activations"
            float_acts = qld.collect_activations(aug_a, Reader())
            qdq_acts = qld.collect_activations(aug_b, Reader())
        result["step"] = "create_activation_matching"
        act = qld.create_activation_matching(qdq_acts, float_acts)
        result["activation_pairs"] = sum(1 for v in act.values() if "float" in v)
        result["activation_entries"] = len(act)
        result["step"] = "create_weight_matching"
        weights = qld.create_weight_matching(a, b)
        result["weight_pairs"] = len(weights)
        result["step"] = "compute_activation_error"
        result["activation_errors"] = len(qld.compute_activation_error(act))
        result["step"] = "compute_weight_error"
        result["weight_errors"] = len(qld.compute_weight_error(weights))
        del result["step"]
    except Exception as e:  # noqa: BLE001 - the peer's failure is a measured result, reported as a row
        result["error"] = f"{type(e).__name__} in {result['step']}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    Path(out).write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------------------------------
# Plain-inference floor child (run as ``python bench_peers.py --floor DATA_DIR INPUT STAGE...``)


def _plain_inference(data: str, input_name: str, stages: list[str]) -> None:
    """Plain inference, the least a tool that runs ``stages`` on the samples does: load each stage, one onnxruntime
    session per stage (graph optimizations off, as graphaudit runs them; default threads and memory arena), every
    sample of ``data`` through every session, outputs dropped. Nothing is captured or compared."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sessions = [ort.InferenceSession(onnx.load(f).SerializeToString(), so, providers=["CPUExecutionProvider"])
                for f in stages]
    for f in sorted(Path(data).glob("*.npy"), key=lambda p: int(p.stem)):
        x = {input_name: np.load(f)}
        for s in sessions:
            s.run(None, x)


def _floors(case: dict, work: Path) -> dict:
    """Peak RSS (MB) and CPU seconds of plain inference (:func:`_plain_inference`, each a fresh process through the
    launcher): ``both`` runs the two stages in one process, as graphaudit does; ``apart`` runs each stage in a
    process of its own, as Polygraphy does, and keeps the larger peak and the summed CPU."""
    def one(stages: list[Path], tag: str) -> dict:
        return run_tool([sys.executable, str(Path(__file__).resolve()), "--floor", str(case["data"]), case["input"],
                         *map(str, stages)], work / f"floor_{tag}.log", case["timeout"])

    both = one([case["a"], case["b"]], "both")
    a, b = one([case["a"]], "a"), one([case["b"]], "b")
    return {"both_mb": both["peak_rss_mb"], "both_cpu": both["cpu_s"], "apart_mb": max(a["peak_rss_mb"], b["peak_rss_mb"]),
            "apart_cpu": a["cpu_s"] + b["cpu_s"], "ok": not any(r["timeout"] or r["rc"] for r in (both, a, b))}


def memory_reason(ours_mb: float, peer: str, peer_mb: float, floors: dict, peer_apart: bool) -> str:
    """Why graphaudit's peak RSS (``ours_mb``) is not ahead of ``peer``'s (``peer_mb``, MB), from the plain-inference
    floors of :func:`_floors`: what each holds over the floor of its own way of running (both stages in one process
    for graphaudit; one stage per process for a peer that runs them apart, ``peer_apart``), and the most graphaudit
    could hold over its floor to be ahead (more than :data:`MARGIN` below the peer)."""
    both, apart = floors["both_mb"], floors["apart_mb"]
    peer_floor = apart if peer_apart else both
    bound = peer_mb / (1 + MARGIN)
    how = "one stage per process" if peer_apart else "both stages in one process"
    return (f"why (memory vs {peer}): plain inference peaks at {both:.0f} MB with both stages in one process (how "
            f"graphaudit runs them) and at {apart:.0f} MB with one stage per process; graphaudit holds "
            f"{ours_mb - both:.0f} MB over its floor (its modules and the libraries they import, the stage tables and "
            f"report, the captured tensors), {peer} {peer_mb - peer_floor:.0f} MB over its own ({how}); to be ahead "
            f"graphaudit would have to peak under {bound:.0f} MB, {bound - both:.0f} MB over its floor")


# ---------------------------------------------------------------------------------------------------------------
# Polygraphy log and protobuf counts (imported by tests/test_bench_peers.py)


def polygraphy_pairs(log_text: str) -> list[dict]:
    """The distinct output pairs a ``polygraphy run --load-outputs`` log compared, in log order: dicts with ``b``/``a``
    (the new run's and the loaded run's tensor names), ``b_shape``/``a_shape`` (strings as logged) and ``kind``:
    "name" (identical names), "substring" (one name contains the other, case-insensitive: Polygraphy's second rule)
    or "index" (neither: Polygraphy's fallback to the output at the same position)."""
    seen, pairs = set(), []
    for m in _PG_LINE.finditer(log_text):
        b, _, b_shape, a, _, a_shape = m.groups()
        if (b, a) in seen:
            continue
        seen.add((b, a))
        kind = "name" if a == b else ("substring" if a.lower() in b.lower() or b.lower() in a.lower() else "index")
        pairs.append({"b": b, "a": a, "b_shape": b_shape, "a_shape": a_shape, "kind": kind})
    return pairs


def producers(path: str | Path) -> dict[str, str]:
    """Tensor name -> op type of the node that computes it, from the model's protobuf, looking through
    QuantizeLinear/DequantizeLinear (a QDQ model's output written by a DequantizeLinear after a Softmax is the
    Softmax's value); graph inputs: "input"."""
    import onnx

    g = onnx.load(str(path), load_external_data=False).graph
    node_of = {o: n for n in g.node for o in n.output if o}
    out = {i.name: "input" for i in g.input}
    for name, n in node_of.items():
        seen = set()
        while n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[0] in node_of and n.input[0] not in seen:
            seen.add(n.input[0])
            n = node_of[n.input[0]]
        out[name] = n.op_type
    return out


def name_alike_other_quantity(a_path: str | Path, b_path: str | Path, names) -> list[str]:
    """Of ``names`` (tensors present under the same name in both models), those whose computing op type
    (:func:`producers`) differs between the two graphs: in a QDQ model with absorbed activations, the Conv (or Add)
    that writes the name of the float model's Relu/Clip output holds the value before the activation, a different
    quantity."""
    pa, pb = producers(a_path), producers(b_path)
    return [n for n in names if pa.get(n) != pb.get(n)]


# ---------------------------------------------------------------------------------------------------------------
# Cases and tools


def _cls_case(tmp: Path) -> dict | None:
    build = REPO / "samples" / "build"
    d = build / "ort" / "ppocr_cls"
    a, b = d / "ppocr_cls_optimized.onnx", d / "ppocr_cls_qdq.onnx"
    xs = sorted((build / "data" / "ppocr_cls" / "x").glob("*.npy"), key=lambda p: int(p.stem))[:16]
    if not (a.is_file() and b.is_file() and xs):
        return None
    data = tmp / "cls_x"
    data.mkdir()
    for x in xs:
        (data / x.name).symlink_to(x)
    return {"name": "PP-OCR cls optimized -> QDQ", "a": a, "b": b, "data": data, "input": "x", "samples": len(xs),
            "timeout": 0, "cosines": True, "nodes": 0}


def _gen_case(tmp: Path, size: int, samples: int, timeout: float) -> dict:
    import numpy as np

    sys.path.insert(0, str(BENCH))
    from bench_structure import SHAPE, generate

    d = tmp / f"gen{size}"
    d.mkdir()
    _, a, b = generate(size, d)
    data = d / "x"
    data.mkdir()
    rng = np.random.default_rng(0)
    for i in range(samples):
        np.save(data / f"{i}.npy", rng.random(SHAPE, dtype=np.float32))
    return {"name": f"generated {size:,} nodes, optimized -> QDQ", "a": a, "b": b, "data": data, "input": "x",
            "samples": samples, "timeout": timeout if size > 1000 else 0, "cosines": False, "nodes": size}


def _graphaudit(case: dict, isolated: bool, work: Path) -> dict:
    tag = "iso" if isolated else "noiso"
    out = work / f"ga_{tag}.json"
    cmd = [sys.executable, "-m", "graphaudit", "compare", str(case["a"]), str(case["b"]), "--data", str(case["data"]),
           "--json", str(out), "--fail-on", "never", *([] if isolated else ["--no-isolated"])]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = run_tool(cmd, work / f"ga_{tag}.log", case["timeout"], env)
    r["tool"] = "graphaudit compare" + ("" if isolated else " --no-isolated")
    if not r["timeout"] and out.is_file():
        num = json.loads(out.read_text())["numeric"][0]
        r["pairs"] = num["tensors_compared"]
        r["ga_pairs"] = [(t["a_tensor"], t["b_tensor"]) for t in num["tensors"]]
        r["note"] = f"{num['tensors_compared']} aligned tensor pairs"
    elif not r["timeout"]:
        r["note"] = f"failed (exit {r['rc']}): {_tail(work / f'ga_{tag}.log')}"
    return r


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
    return lines[-1][:160] if lines else ""


def _qld(case: dict, work: Path) -> dict:
    out = work / "qld.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--qdq-loss-debug", str(case["a"]), str(case["b"]),
           str(case["data"]), case["input"], str(out)]
    r = run_tool(cmd, work / "qld.log", case["timeout"])
    r["tool"] = "onnxruntime qdq_loss_debug"
    res = json.loads(out.read_text()) if out.is_file() else {}
    if r["timeout"]:
        r["note"] = f"timeout after {case['timeout']:.0f} s"
    elif "activation_pairs" in res:
        r["pairs"] = res["activation_pairs"] + res.get("weight_pairs", 0)
        r["note"] = (f"{res['activation_pairs']} activations (float vs after QDQ) + {res.get('weight_pairs', 0)} "
                     "weights matched" + (f"; then raised {res['error']}" if "error" in res else ""))
    elif "error" in res:
        r["note"] = f"raised {res['error']}"
    else:
        r["note"] = f"failed (exit {r['rc']}): {_tail(work / 'qld.log')}"
    return r


def _polygraphy_exe() -> list[str] | None:
    beside = Path(sys.executable).parent / "polygraphy"
    found = str(beside) if beside.is_file() else shutil.which("polygraphy")
    return [found] if found else None


def _polygraphy(case: dict, work: Path, exe: list[str]) -> dict:
    loader = work / "pg_loader.py"
    loader.write_text("import numpy as np\n\n\ndef load_data():\n"
                      f"    for i in range({case['samples']}):\n"
                      f"        yield {{{case['input']!r}: np.load(f'{case['data']}/{{i}}.npy')}}\n")
    common = ["--onnxrt", "--onnx-outputs", "mark", "all", "--data-loader-script", str(loader)]
    saved = work / "pg_a.json"
    r1 = run_tool([*exe, "run", str(case["a"]), *common, "--save-outputs", str(saved)], work / "pg_save.log",
                  case["timeout"])
    left = case["timeout"] - r1["wall_s"] if case["timeout"] else 0
    r = dict(r1)
    if not r1["timeout"] and r1["rc"] == 0 and (left > 0 or not case["timeout"]):
        r2 = run_tool([*exe, "run", str(case["b"]), *common, "--load-outputs", str(saved)], work / "pg_cmp.log",
                      max(left, 1) if case["timeout"] else 0)
        r = {"wall_s": r1["wall_s"] + r2["wall_s"], "cpu_s": r1["cpu_s"] + r2["cpu_s"],
             "peak_rss_mb": max(r1["peak_rss_mb"], r2["peak_rss_mb"]), "rc": r2["rc"], "timeout": r2["timeout"],
             "steps": [r1, r2]}
    r["tool"] = "Polygraphy run (mark all) x 2"
    log = work / "pg_cmp.log"
    if r["timeout"]:
        r["note"] = f"timeout after {case['timeout']:.0f} s"
    elif r["rc"] not in (0, 1) or "Accuracy Summary" not in (log.read_text(errors="replace") if log.is_file() else ""):
        r["note"] = f"failed (exit {r['rc']}): {_tail(log if log.is_file() else work / 'pg_save.log')}"
    else:
        pairs = polygraphy_pairs(log.read_text(errors="replace"))
        r["pairs"] = len(pairs)
        r["pg_pairs"] = pairs
    return r


def _describe_pg(r: dict, case: dict) -> str:
    """The note of Polygraphy's row: its pairs by kind, and the name-alike ones that are not the same quantity."""
    from collections import Counter

    pairs = r["pg_pairs"]
    by_name = [p["b"] for p in pairs if p["kind"] == "name"]
    other = name_alike_other_quantity(case["a"], case["b"], by_name)
    pa, pb = producers(case["a"]), producers(case["b"])
    ops = ", ".join(f"{x} vs {y}: {k}" for (x, y), k in Counter((pa[n], pb[n]) for n in other).most_common())
    fallback = [p for p in pairs if p["kind"] != "name"]
    shapes = sum(1 for p in fallback if p["a_shape"] != p["b_shape"])
    r["pg_other_quantity"] = other
    return (f"{len(by_name)} by name, of which {len(other)} not the same quantity (activation absorbed into the "
            f"quantization; op in float vs QDQ model: {ops or '-'}); {len(fallback)} by substring/index fallback "
            f"({shapes} of different shapes)")


def _cosines(case: dict, rows: list[dict]) -> list[str]:
    """Cosine on sample 0 (plain onnxruntime sessions, every needed tensor marked as an output, float64 sums) of
    Polygraphy's name pairs (same producer op / producer op differs) and of graphaudit's aligned pairs."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    pg = next((r for r in rows if "pg_pairs" in r), None)
    ga = next((r for r in rows if "ga_pairs" in r), None)
    groups: dict[str, list[tuple[str, str]]] = {}
    if pg:
        other = set(pg["pg_other_quantity"])
        named = [p["b"] for p in pg["pg_pairs"] if p["kind"] == "name"]
        groups["Polygraphy, by name, same producer op"] = [(n, n) for n in named if n not in other]
        groups["Polygraphy, by name, producer op differs"] = [(n, n) for n in named if n in other]
    if ga:
        groups["graphaudit aligned pairs"] = ga["ga_pairs"]
    x = {case["input"]: np.load(case["data"] / "0.npy")}
    values = []
    for side, path in enumerate((case["a"], case["b"])):
        m = onnx.load(str(path))
        want = {p[side] for g in groups.values() for p in g} - {o.name for o in m.graph.output}
        m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in sorted(want))
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        values.append(dict(zip([o.name for o in s.get_outputs()], s.run(None, x))))
    lines = []
    for title, pairs in groups.items():
        cos = []
        for a, b in pairs:
            u, v = values[0][a].astype(np.float64).ravel(), values[1][b].astype(np.float64).ravel()
            nu, nv = np.linalg.norm(u), np.linalg.norm(v)
            cos.append(float(u @ v / (nu * nv)) if u.size == v.size and nu and nv else float("nan"))
        if cos:
            c = np.array(cos)
            lines.append(f"{title}: {len(c)} pairs, cosine median {np.nanmedian(c):.4f}, min {np.nanmin(c):.4f}, "
                         f"{int(np.sum(c < 0.99))} below 0.99")
    return lines


def _fmt(r: dict) -> str:
    if r.get("skipped"):
        return f"| | {r['tool']} | | | | | {r['note']} |"
    pairs = r.get("pairs", "–")
    wall = f"> {r['wall_s']:.0f}" if r["timeout"] else f"{r['wall_s']:.2f}"
    cpu = f"> {r['cpu_s']:.0f}" if r["timeout"] else f"{r['cpu_s']:.2f}"
    rss = f">= {r['peak_rss_mb']:.0f}" if r["timeout"] else f"{r['peak_rss_mb']:.0f}"
    return f"| | {r['tool']} | {pairs} | {wall} | {cpu} | {rss} | {r.get('note', '')} |"


#: Ratios within this margin of 1 are reported as "level": one run each on a shared machine.
MARGIN = 0.10


def _standing(peer: float, ours: float, stopped: bool) -> str:
    """"ahead" when the peer took more than (1 + MARGIN) x ours (a stopped peer: more than ours so far), "level"
    within the margin, "behind" otherwise."""
    if peer > ours * (1 + MARGIN) or (stopped and peer > ours):
        return "ahead"
    return "level" if peer >= ours * (1 - MARGIN) or stopped else "behind"


def _verdict(rows: list[dict], floors: dict | None = None) -> str:
    """Where graphaudit (--no-isolated, the peers' kind of run) stands against each peer that ran, on CPU time and on
    peak RSS (a peer stopped at the time limit: its figures so far, marked +); where it is not ahead on memory and the
    plain-inference ``floors`` were measured, :func:`memory_reason` follows (the target is to stay ahead)."""
    ga = rows[0]
    out, why = [], []
    for r in rows[1:]:
        if r.get("skipped") or "graphaudit" in r["tool"]:
            continue
        name = r["tool"].split(" (")[0].replace("onnxruntime ", "").replace(" run", "")
        plus = "+" if r["timeout"] else ""
        t = _standing(r["cpu_s"], ga["cpu_s"], r["timeout"])
        m = _standing(r["peak_rss_mb"], ga["peak_rss_mb"], False)
        out.append(f"vs {name}: CPU {r['cpu_s'] / ga['cpu_s']:.2f}x graphaudit's{plus} (time: {t}), "
                   f"peak RSS {r['peak_rss_mb'] / ga['peak_rss_mb']:.2f}x{plus} (memory: {m})")
        if m != "ahead" and floors and floors["ok"] and not r["timeout"]:
            why.append(memory_reason(ga["peak_rss_mb"], name, r["peak_rss_mb"], floors, "steps" in r))
    return "; ".join(out) + "".join(f"\n  {w}" for w in why)


def _run_case(case: dict, work: Path, isolated: bool, pg_exe: list[str] | None) -> list[dict]:
    """Run every tool on ``case`` (graphaudit first), printing each row as it is measured; returns the rows."""
    work.mkdir()
    runs = [lambda: _graphaudit(case, False, work)]
    if isolated:
        runs.append(lambda: _graphaudit(case, True, work))
    runs.append(lambda: _qld(case, work))
    runs.append(lambda: {"tool": "Polygraphy", "skipped": True, "note": "not installed (pip install -e '.[bench]')"}
                if pg_exe is None else _polygraphy(case, work, pg_exe))
    rows = []
    for run in runs:
        rows.append(run())
        if "pg_pairs" in rows[-1]:
            rows[-1]["note"] = _describe_pg(rows[-1], case)
        print(_fmt(rows[-1]), flush=True)
    return rows


def _floor_rows(case: dict, work: Path) -> dict:
    """Measure and print the plain-inference floors of ``case`` (:func:`_floors`): two table rows."""
    f = _floors(case, work)
    note = "" if f["ok"] else "failed or stopped: see floor_*.log"
    print(f"| | plain inference, both stages in one process (floor) | | | {f['both_cpu']:.2f} | {f['both_mb']:.0f} | "
          f"{note or 'no capture, no comparison'} |", flush=True)
    print(f"| | plain inference, one stage per process (floor) | | | {f['apart_cpu']:.2f} | {f['apart_mb']:.0f} | "
          f"{note or 'larger peak of the two processes, CPU summed'} |", flush=True)
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the cls pair and the 1k model only, without isolated runs")
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000], help="generated model sizes (nodes)")
    ap.add_argument("--gen-samples", type=int, default=2, help="samples for the generated models (default 2)")
    ap.add_argument("--timeout", type=float, default=45,
                    help="wall seconds before a run on a generated model above 1,000 nodes is stopped")
    args = ap.parse_args()
    sizes = [s for s in args.sizes if not args.quick or s <= 1000]
    pg_exe = _polygraphy_exe()
    print(f"graphaudit from {REPO}; Polygraphy: {'installed' if pg_exe else 'not installed'}; "
          "wall and CPU seconds (user + system) and peak RSS of each whole process, one run each", flush=True)
    print("| case | tool | pairs compared | wall s | CPU s | peak RSS MB | note |\n|---|---|---|---|---|---|---|",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        cases = [c for c in [_cls_case(Path(tmp))] if c]
        if not cases:
            print("bench_peers: samples/build/ort/ppocr_cls not found: run samples/build_samples.py (setup.sh) first",
                  file=sys.stderr)
        cases += [_gen_case(Path(tmp), s, args.gen_samples, args.timeout) for s in sizes]
        checks = []
        for i, case in enumerate(cases):
            print(f"| {case['name']}, {case['samples']} samples | | | | | | |", flush=True)
            iso = not args.quick and case["nodes"] <= 1000  # graphaudit's isolated run at 10k: minutes (issue 17)
            rows = _run_case(case, Path(tmp) / f"case{i}", iso, pg_exe)
            floors = _floor_rows(case, Path(tmp) / f"case{i}")
            checks.append(f"{case['name']}: {_verdict(rows, floors)}")
            if case["cosines"]:
                checks += [f"  {line}" for line in _cosines(case, rows)]
        print(f"\ngraphaudit --no-isolated against each peer (CPU time and peak RSS; ahead / level within "
              f"{MARGIN:.0%} / behind):")
        for line in checks:
            print(line)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--launch":
        sep = sys.argv.index("--")
        print(json.dumps(_launch(float(sys.argv[2]), sys.argv[3], sys.argv[sep + 1:])))
    elif len(sys.argv) > 1 and sys.argv[1] == "--qdq-loss-debug":
        _qdq_loss_debug(*sys.argv[2:7])
    elif len(sys.argv) > 1 and sys.argv[1] == "--floor":
        _plain_inference(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        main()
