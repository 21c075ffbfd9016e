"""Structure checks (S1xx): custom ops, Horizon inserted nodes, QDQ, outputs, old-IR habits, fusion leftovers."""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from ..findings import Finding
from ..lineage.view import StageView
from ..numeric.lower import LOWERABLE_OPS
from ..toolchains.ops import HORIZON_DOMAIN, WEIGHTED_OPS, is_fixed_point_op, quant_format, trace_back
from ..numeric.kernels import ort_has_kernel
from ..stage import PARAM_KINDS, NodeInfo, StageGraph
from ..toolchains.horizon import decode_hzcalibration, decode_hzpreprocess
from .base import AuditContext, make_finding

__all__ = ["custom_ops", "qdq_nodes", "hzcalibration_nodes"]


def custom_ops(stage: StageGraph) -> Counter:
    """Counter of (domain, op_type) over custom-domain nodes that stock onnxruntime (CPU) cannot execute.

    Default-domain (ai.onnx) ops are left out: whether they run is a question of opset version,
    not of vendor kernels (and Constant has no kernel: onnxruntime folds it into an initializer).
    """
    out: Counter = Counter()
    for n in stage.nodes.values():
        d = "" if n.domain == "ai.onnx" else n.domain
        if d and not ort_has_kernel(d, n.op_type):
            out[(d, n.op_type)] += 1
    return out


def check_custom_ops(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S101 (graphaudit/rules/structure.yaml): one finding for the pipeline, listing each custom op without a
    stock onnxruntime kernel with its count and the stages that hold it.

    Severity: ``info`` when graphaudit handles every such op itself (Horizon ops with public semantics are lowered
    to standard ONNX, :data:`graphaudit.numeric.lower.LOWERABLE_OPS`; Horizon's other ops, the fixed-point ones and
    e.g. HzPRelu, run in Horizon's runtime, ``--runtime horizon``), the rule's ``warning`` for another vendor's ops.
    """
    stages_of: dict[tuple[str, str], list[str]] = {}
    count: dict[tuple[str, str], int] = {}
    for st in ctx.stages:
        for key, c in custom_ops(st).items():
            stages_of.setdefault(key, []).append(st.name)
            count[key] = max(count.get(key, 0), c)
    if not stages_of:
        return
    # every op of domain horizon in the toolchain's own stage files runs in Horizon's runtime (all four stages of
    # every real set do: tests/horizon_runtime/test_explain_horizon_runtime.py), lowered or not
    unhandled = sorted(k for k in stages_of if k[0] != HORIZON_DOMAIN)
    fixed = sorted(k for k in stages_of if k[0] == HORIZON_DOMAIN and k[1] not in LOWERABLE_OPS)

    def span(names: list[str]) -> str:
        return names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"

    listing = ", ".join(f"{d or 'ai.onnx'}::{op} x{count[(d, op)]} ({span(stages_of[(d, op)])})"
                        for (d, op) in sorted(stages_of))
    how = []
    if len(fixed) < len(stages_of) - len(unhandled):
        how.append("graphaudit lowers the Horizon ops with public semantics to standard ONNX for its numbers "
                   "(`graphaudit lower` writes such a model)")
    if fixed:
        other = [op for _d, op in fixed if not is_fixed_point_op(op)]  # HzPRelu in MTCNN's calibrated stage
        what = "the fixed-point ops" + (f" and {', '.join(other)}" if other else "")
        how.append(f"{what} run only in Horizon's runtime (--runtime horizon)")
    if unhandled:
        how.append(f"nothing here runs {', '.join(f'{d}::{op}' for d, op in unhandled)}")
    yield make_finding(
        "S101", f"{len(stages_of)} custom op type(s) have no kernel in stock onnxruntime: {listing}; "
        + "; ".join(how), stage=next(st.name for st in ctx.stages if any(st.name in v for v in stages_of.values())),
        severity=None if unhandled else "info",
        evidence={"ops": [{"domain": d, "op_type": op, "count": count[(d, op)], "stages": stages_of[(d, op)],
                           "introduced_in": stages_of[(d, op)][0]} for (d, op) in sorted(stages_of)],
                  "unhandled": [f"{d}::{op}" for d, op in unhandled]})


def check_hzpreprocess(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S102 (graphaudit/rules/structure.yaml): yields its findings over ``ctx``."""
    for st in ctx.stages:
        for n in st.nodes.values():
            if n.op_type != "HzPreprocess":
                continue
            info = decode_hzpreprocess(st, n)
            if info is None:
                x = n.inputs[0] if n.inputs else ""
                yield make_finding("S102", f"HzPreprocess {n.name or n.id!r} on input {x!r}: weights missing, "
                                   "unreadable or inconsistent; mean/scale not decoded",
                                   stage=st.name, location={"node": n.id, "tensor": x})
                continue
            mean = ", ".join(f"{x:.4g}" for x in info.mean)
            scale = ", ".join(f"{x:.6g}" for x in info.scale)
            std = ", ".join(f"{1 / (255 * x):.4g}" if x else "inf" for x in info.scale)
            yield make_finding(
                "S102", f"input {info.input!r} is normalized inside the model by {n.name or n.id!r}: mean [{mean}], "
                f"scale [{scale}] (= 1/(255*std) with std [{std}]); input type {info.input_type or 'unknown'}, "
                f"layout {info.data_format}", stage=st.name, location={"node": n.id, "tensor": info.input},
                evidence={"mean": info.mean, "scale": info.scale, "input_type": info.input_type,
                          "data_format": info.data_format})


def hzcalibration_nodes(stage: StageGraph, view: StageView | None = None):
    """Decoded HzCalibration nodes of a stage (list of :class:`CalibrationInfo`)."""
    view = view or StageView.of(stage)
    return [decode_hzcalibration(stage, n, view.is_param_root(n.inputs[0]))
            for n in stage.nodes.values() if n.op_type == "HzCalibration" and n.inputs and n.inputs[0]]


def check_hzcalibration_census(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S103 (graphaudit/rules/structure.yaml): yields its findings over ``ctx``."""
    for st in ctx.stages:
        cals = hzcalibration_nodes(st)
        if not cals:
            continue
        act = [c for c in cals if not c.is_weight]
        wgt = [c for c in cals if c.is_weight]
        qtypes = Counter(c.qtype for c in cals)
        per_ch = sum(c.per_channel for c in cals)
        off = sum(not c.enabled for c in cals)
        yield make_finding(
            "S103", f"{len(cals)} HzCalibration nodes: {len(act)} activation, {len(wgt)} weight; qtype "
            f"{', '.join(f'{q} x{c}' for q, c in sorted(qtypes.items()))}; {per_ch} per-channel; {off} switched OFF",
            stage=st.name,
            evidence={"activation": len(act), "weight": len(wgt), "qtype": dict(qtypes), "per_channel": per_ch,
                      "switch_off": off})


#: Ops whose output range is fixed, so hb_mapper sets their output threshold from the range, not from calibration:
#: HardSigmoid outputs get 1.0 in a calibrated build and 0.666667 in a calibration_type: skip build (hb_mapper
#: 1.24.3 on PP-OCR cls, samples/build_horizon_sets.py specs); they tell nothing about whether calibration ran.
RANGE_SET_THRESHOLD_OPS = frozenset({"HardSigmoid", "Sigmoid"})
#: Fewest activation thresholds judged: a calibrated max of exactly 1.0 is rare but real on one or two tensors (a
#: Clip(0, 1) output calibrated by max: breaker run, a real hb_mapper build of x -> Conv -> Clip -> Conv), and a
#: real skip build has one per activation (94 on PP-OCR cls).
S104_MIN_ACTIVATIONS = 3


def check_calibration_skipped(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S104 (graphaudit/rules/structure.yaml): yields its findings over ``ctx``.

    A stage is flagged when every enabled activation HzCalibration threshold inside the model equals 1.0, leaving
    out those on graph inputs (fixed by the input type: 127 for ``*_128`` image inputs) and on outputs whose range
    is set by their op (:data:`RANGE_SET_THRESHOLD_OPS`, Clip with an upper bound of at most 1.0), and at least
    :data:`S104_MIN_ACTIVATIONS` are left. Measured on a real ``calibration_type: skip`` build (hb_mapper 1.24.3,
    PP-OCR cls): 94 of 104 activation thresholds are 1.0, 9 HardSigmoid outputs 0.666667, the input 127; on the
    calibrated builds of the same model only the 9 HardSigmoid outputs are 1.0.
    """
    for st in ctx.stages:
        view = StageView.of(st)
        act = [c for c in hzcalibration_nodes(st, view) if not c.is_weight and c.enabled and c.thresholds]
        on_inputs = [c for c in act if trace_back(st, c.tensor) in st.inputs]
        range_ops = {c.tensor: op for c in act if c not in on_inputs and (op := _range_set(st, c.tensor))}
        range_set = [c for c in act if c.tensor in range_ops]
        measured = [c for c in act if c not in on_inputs and c.tensor not in range_ops]
        if len(measured) >= S104_MIN_ACTIVATIONS and all(all(t == 1.0 for t in c.thresholds) for c in measured):
            left = [f"{len(on_inputs)} on graph inputs fixed by the input type"] if on_inputs else []
            if range_set:
                left.append(f"{len(range_set)} on {'/'.join(sorted(set(range_ops.values())))} "
                            "outputs set from the op's range")
            others = f" ({'; '.join(left)})" if left else ""
            yield make_finding(
                "S104", f"all {len(measured)} activation HzCalibration thresholds inside the model are exactly 1.0"
                f"{others}: calibration was skipped (fast-perf, check mode or calibration_type: skip)", stage=st.name,
                evidence={"activation_nodes": len(measured), "input_nodes": len(on_inputs),
                          "range_set_nodes": len(range_set), "threshold": 1.0})


def _range_set(st: StageGraph, tensor: str) -> str | None:
    """The op type of ``tensor``'s producer when that op sets its range: a :data:`RANGE_SET_THRESHOLD_OPS` output,
    or a Clip output whose upper bound (attribute ``max`` before opset 11, else a constant third input) is at most
    1.0; else None."""
    op = _producer_op(st, tensor)
    if op in RANGE_SET_THRESHOLD_OPS:
        return op
    if op != "Clip":
        return None
    n = st.nodes[st.tensors[tensor].producer]
    hi = n.attributes.get("max")
    if hi is None and len(n.inputs) > 2 and n.inputs[2] in st.tensors:
        v = st.tensors[n.inputs[2]].value()
        hi = float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None
    return op if hi is not None and float(hi) <= 1.0 else None


def _producer_op(st: StageGraph, tensor: str) -> str | None:
    """Op type of the node producing ``tensor`` in ``st`` (None for inputs, weights and unknown names)."""
    t = st.tensors.get(tensor)
    return st.nodes[t.producer].op_type if t is not None and t.producer is not None else None


def qdq_nodes(stage: StageGraph, view: StageView | None = None) -> list[dict]:
    """QuantizeLinear/DequantizeLinear nodes: op, role (weight/activation), dtype, per-channel.

    Per-channel means the scale input has more than one element (ONNX QuantizeLinear-13 spec:
    1-D scale with ``axis``).
    """
    return [{"node": nid, "op_type": op, "weight": w, "dtype": dtype, "per_channel": pc}
            for nid, op, w, dtype, pc in _qdq_rows(stage, view)]


def _qdq_rows(stage: StageGraph, view: StageView | None = None) -> Iterator[tuple[str, str, bool, str, bool]]:
    """:func:`qdq_nodes` as ``(node id, op type, weight, dtype, per-channel)`` tuples (no dict per node: a QDQ
    stage of the 100k-node pair has 200,000 of them)."""
    view = view or StageView.of(stage)
    get, root = stage.tensors.get, view.root
    for n in stage.nodes.values():
        op, inputs = n.op_type, n.inputs
        if (op != "QuantizeLinear" and op != "DequantizeLinear") or not inputs or not inputs[0]:
            continue
        k = len(inputs)
        scale = get(inputs[1]) if k > 1 and inputs[1] else None
        per_channel = bool(scale and scale.shape and len(scale.shape) >= 1 and any(
            isinstance(d, int) and d > 1 for d in scale.shape))
        zp = get(inputs[2]) if k > 2 and inputs[2] else None
        qt = (n.outputs[0] if n.outputs else "") if op == "QuantizeLinear" else inputs[0]
        qtt = get(qt)
        dtype = (zp.dtype if zp is not None and zp.dtype else (qtt.dtype if qtt is not None else "")) or "UINT8"
        x = inputs[0]
        w = get(root.get(x, x))  # view.is_param_root, inline
        yield n.id, op, w is not None and w.kind in PARAM_KINDS, dtype, per_channel


def check_qdq_census(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S105 (graphaudit/rules/structure.yaml): yields its findings over ``ctx``."""
    for st in ctx.stages:
        rows = Counter((op, w, dtype, pc) for _nid, op, w, dtype, pc in _qdq_rows(st))
        if not rows:
            continue
        total = sum(rows.values())
        n_q = sum(k for (op, _w, _d, _pc), k in rows.items() if op == "QuantizeLinear")
        n_dq = total - n_q
        w = sum(k for (_op, weight, _d, _pc), k in rows.items() if weight)
        pc = sum(k for (_op, _w, _d, per_channel), k in rows.items() if per_channel)
        dtypes: Counter = Counter()
        for (_op, _w, dtype, _pc), k in rows.items():  # first-seen order, as counting the nodes one by one
            dtypes[dtype] += k
        yield make_finding(
            "S105", f"{n_q} QuantizeLinear and {n_dq} DequantizeLinear nodes; {w} on weights, {total - w} on activations; "
            f"{pc} per-channel; dtypes {', '.join(f'{d} x{c}' for d, c in sorted(dtypes.items()))}", stage=st.name,
            evidence={"QuantizeLinear": n_q, "DequantizeLinear": n_dq, "weight": w, "activation": total - w,
                      "per_channel": pc, "dtypes": dict(dtypes)})


_FORMAT_SAYS = {"dynamic": "dynamic quantization (weights stored quantized, activations quantized at run time)",
                "QOperator": "QOperator format (quantized ops taking scales and zero points)"}


def check_quant_formats(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S112 (graphaudit/rules/structure.yaml): per stage, onnxruntime's dynamic and QOperator quantization
    with the count of each quantized op (Q/DQ-only stages are S105's), and whether stock onnxruntime runs them."""
    for st in ctx.stages:
        ops: dict[str, Counter] = {}
        first: dict[tuple[str, str], NodeInfo] = {}  # (domain, op type) -> its first node: the format is the op's
        counts: Counter = Counter()
        for n in st.nodes.values():
            key = (n.domain, n.op_type)
            counts[key] += 1
            if key not in first:
                first[key] = n
        for (domain, op_type), count in counts.items():
            f = quant_format(first[(domain, op_type)])
            if f is not None:
                d = "" if domain in ("", "ai.onnx") else domain + "."
                ops.setdefault(f, Counter())[d + op_type] += count
        if not ({"dynamic", "QOperator"} & set(ops)):
            continue
        parts = [f"{_FORMAT_SAYS.get(f, 'QuantizeLinear/DequantizeLinear at the boundaries')}: "
                 + ", ".join(f"{op} x{c}" for op, c in sorted(ops[f].items(), key=lambda kv: (-kv[1], kv[0])))
                 for f in ("dynamic", "QOperator", "QDQ") if f in ops]
        n_q = sum(sum(c.values()) for c in ops.values())
        no_kernel = sorted({op for c in ops.values() for op in c
                            if not ort_has_kernel(op.rpartition(".")[0], op.rpartition(".")[2])})
        run = (f"stock onnxruntime has no kernel for {', '.join(no_kernel)}" if no_kernel
               else "stock onnxruntime runs every one of them")
        yield make_finding(
            "S112", f"{'; '.join(parts)} ({n_q} of {len(st.nodes)} nodes; {run})", stage=st.name,
            evidence={"formats": {f: dict(c) for f, c in ops.items()}, "quantized_nodes": n_q,
                      "nodes": len(st.nodes), "no_kernel": no_kernel})


def _signature(st: StageGraph) -> list[tuple[str, list]]:
    return [(o, list(st.tensors[o].shape) if st.tensors[o].shape is not None else None) for o in st.outputs]


def check_output_signature(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S106 (graphaudit/rules/structure.yaml): yields its findings over ``ctx``."""
    for a, b in zip(ctx.stages, ctx.stages[1:]):
        sa, sb = _signature(a), _signature(b)
        if [n for n, _ in sa] == [n for n, _ in sb] and all(
                x is None or y is None or len(x) != len(y) or all(
                    not (isinstance(p, int) and isinstance(q, int)) or p == q for p, q in zip(x, y))
                for (_, x), (_, y) in zip(sa, sb)):
            continue
        fmt = lambda sig: "; ".join(f"{n} {s}" for n, s in sig)  # noqa: E731
        yield make_finding(
            "S106", f"{len(sa)} output(s) in {a.name} vs {len(sb)} in {b.name}: [{fmt(sa)}] vs [{fmt(sb)}]",
            stage=f"{a.name} -> {b.name}",
            evidence={"a": [{"name": n, "shape": s} for n, s in sa], "b": [{"name": n, "shape": s} for n, s in sb]})


def check_per_channel_opset(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S107 (graphaudit/rules/structure.yaml): yields its findings over ``ctx``."""
    for st in ctx.stages:
        opset = st.opsets.get("", 0)
        if opset >= 13:
            continue
        pc = [x for x in qdq_nodes(st) if x["per_channel"]]
        if pc:
            yield make_finding(
                "S107", f"{len(pc)} per-channel QuantizeLinear/DequantizeLinear node(s) (e.g. {pc[0]['node']!r}) "
                f"with ai.onnx opset {opset}; per-axis quantization needs opset >= 13", stage=st.name,
                location={"node": pc[0]["node"]}, evidence={"opset": opset, "per_channel_nodes": len(pc)})


def check_initializers_as_inputs(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S108 (graphaudit/rules/structure.yaml): yields its findings over ``ctx``."""
    for st in ctx.stages:
        names = [n for n, t in st.tensors.items() if t.also_graph_input]
        if names:
            yield make_finding(
                "S108", f"{len(names)} initializer(s) are also graph inputs (IR version {st.ir_version}), e.g. "
                f"{', '.join(names[:3])}", stage=st.name, evidence={"count": len(names), "examples": names[:10]})


def check_duplicate_initializers(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S113 (graphaudit/rules/structure.yaml): one finding per stage file whose graph lists an initializer
    name more than once (:attr:`graphaudit.stage.StageGraph.duplicate_initializers`, recorded by the loader from
    names alone)."""
    for st in ctx.stages:
        dup = st.duplicate_initializers
        if not dup:
            continue
        names = list(dup)
        listed = ", ".join(f"{n!r} x{dup[n]}" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5
                                                                    else "")
        yield make_finding(
            "S113", f"{st.path}: {len(names)} initializer name(s) listed more than once: {listed}. onnx.checker "
            "refuses the file; onnxruntime loads it and computes with the first initializer of each name (1.32.0, "
            "measured, although its warning says the last), and graphaudit compares the first too; a tool that "
            "keeps the last computes with other weights", stage=st.name, location={"file": str(st.path)},
            evidence={"names": {n: dup[n] for n in names[:50]}, "count": len(names)})


def check_unfused_batchnorm(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S109 (graphaudit/rules/structure.yaml): yields its findings over ``ctx``."""
    for i, st in enumerate(ctx.stages):
        if st.role != "optimized":
            continue
        view = StageView.of(st)
        left = []
        for n in st.nodes.values():
            if n.op_type != "BatchNormalization" or not n.inputs or not n.inputs[0]:
                continue
            p = st.producer(view.root.get(n.inputs[0], n.inputs[0]))
            if p is not None and p.op_type in ("Conv", "ConvTranspose"):
                left.append((n, p))
        if not left:
            continue
        cause = ""
        earlier_inputs = [s for s in ctx.stages[: i + 1] if any(t.also_graph_input for t in s.tensors.values())]
        if earlier_inputs:
            cause = f"; cause: initializers are declared as graph inputs in {earlier_inputs[0].name} (S108)"
        else:
            shared = [n for n, p in left if n.inputs[0] in st.tensors and len(st.tensors[n.inputs[0]].consumers) > 1]
            if shared:
                cause = f"; {len(shared)} of them read a Conv output that has other consumers"
            else:
                cause = ("; the weights are constant and the Conv outputs unshared, so the optimizer did not run "
                         "this fusion (optimization disabled or not supported by the toolchain)")
        yield make_finding(
            "S109", f"{len(left)} BatchNormalization node(s) after a Conv remain unfused, e.g. "
            f"{left[0][0].name or left[0][0].id!r} after {left[0][1].name or left[0][1].id!r}{cause}", stage=st.name,
            location={"node": left[0][0].id}, evidence={"count": len(left), "nodes": [n.id for n, _ in left][:20]})


def check_unaligned(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S110 (graphaudit/rules/structure.yaml): yields its findings over ``ctx``."""
    for i, cov in enumerate(ctx.coverage):
        if not cov.unmatched:
            continue
        a, b = ctx.stages[i], ctx.stages[i + 1]
        n_a = cov.a_total - cov.a_accounted
        n_b = cov.b_total - cov.b_accounted
        reasons = "; ".join(c.evidence for c in cov.unmatched[:3])
        yield make_finding(
            "S110", f"{n_a} node(s) of {a.name} and {n_b} of {b.name} not aligned ({cov.a_ratio:.1%} / {cov.b_ratio:.1%} "
            f"covered): {reasons}", stage=f"{a.name} -> {b.name}",
            evidence={"a_unaligned": n_a, "b_unaligned": n_b,
                      "regions": [{"a_nodes": c.a_nodes, "b_nodes": c.b_nodes, "reason": c.evidence}
                                  for c in cov.unmatched]})


def check_float_ops_left(ctx: AuditContext) -> Iterator[Finding]:
    """Rule S111 (graphaudit/rules/structure.yaml): yields its findings over ``ctx``."""
    for st in ctx.stages:
        view = StageView.of(st)
        quantize_nodes = [n for n in view.wrappers if view.wrappers[n] == "quantize"]
        if not quantize_nodes:
            continue
        left = []
        for n in st.nodes.values():
            if n.op_type not in WEIGHTED_OPS or n.domain not in ("", "ai.onnx") or len(n.inputs) < 2 or n.parent:
                continue
            w = n.inputs[1]
            if not view.is_param_root(w):
                continue  # activation x activation MatMul: judged by its inputs, not here
            if "quantize" not in view.kinds.get(w, frozenset()):
                left.append(n)
        if left:
            ops = Counter(n.op_type for n in left)
            yield make_finding(
                "S111", f"{len(left)} weighted op(s) keep float weights in a quantized stage "
                f"({', '.join(f'{op} x{c}' for op, c in sorted(ops.items()))}), e.g. "
                f"{', '.join(repr(n.name or n.id) for n in left[:3])}", stage=st.name, location={"node": left[0].id},
                evidence={"count": len(left), "ops": dict(ops), "nodes": [n.id for n in left][:50]})
