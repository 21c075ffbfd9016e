"""Numeric checks (N4xx): read the comparison results in ``AuditContext.numeric`` (absent: no findings)."""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from ..findings import Finding
from ..stage import StageGraph
from ..toolchains.ops import DEQUANTIZE_OPS, QUANTIZE_OPS
from ..toolchains.roles import NUMERICALLY_EQUAL_TRANSITIONS
from .base import AuditContext, make_finding
from .saturation import Landing, landed_sqnr

__all__ = ["OUTLIER_DB", "MIN_PEERS", "NAMED_WITHIN_DB", "nonfinite_parting"]

#: A change whose isolated SQNR lies this many dB below the median of its peers (the changes of the same kind and
#: pattern in the transition) is where the loss concentrates (6 dB = half the signal-to-noise amplitude ratio).
OUTLIER_DB = 6.0

#: ... and is named only when its SQNR is at most this many dB above the transition's output SQNR: errors add roughly
#: in power, so a change 10 dB cleaner than the outputs carries about a tenth of their error at most (less once later
#: layers attenuate it); one far above cannot explain the loss (the verdict and N404 alike).
NAMED_WITHIN_DB = 10.0

#: Peers needed for a median to compare with.
MIN_PEERS = 3

#: Output SQNR (dB) at or above which, with every top-1 kept, a quantization transition costs little (a 40 dB SQNR is
#: an error amplitude of 1% of the signal).
SMALL_LOSS_DB = 40.0

_FLOAT_TRANSITIONS = NUMERICALLY_EQUAL_TRANSITIONS


def check_float_divergence(ctx: AuditContext) -> Iterator[Finding]:
    """Rule N401 (graphaudit/rules/numeric.yaml): yields its findings over ``ctx``.

    A first divergence at or after the first tensor where the test stage holds NaN or infinite values the reference
    does not (:func:`nonfinite_parting`) is not one: float stages that overflow differently (a fused Conv reaching inf where
    Conv then BatchNormalization stayed finite, on data at 3e38) measure the overflow, which P209, P211 and N406
    report, not a rewrite; every tensor after it reads those values."""
    for res in ctx.numeric or []:
        a, b = _pair(ctx, res)
        te = res.first_divergence
        if (a.role, b.role) not in _FLOAT_TRANSITIONS or te is None:
            continue
        part = nonfinite_parting((t, t.stats.nonfinite_a, t.stats.nonfinite_b) for t in res.tensors if t.stats.samples)
        if part is not None and part.order <= te.order:
            continue
        s = te.stats
        below = (f"cosine {s.cosine:.6f} < {res.threshold}" if s.cosine < res.threshold
                 else f"SQNR {s.sqnr_db:.1f} dB < {res.sqnr_threshold:g} dB")
        yield make_finding(
            "N401", f"{a.name} -> {b.name} should be numerically equal but first diverges at {te.b_tensor!r} "
            f"(from {te.a_tensor!r}): {below}; cosine {s.cosine:.6f}, SQNR {s.sqnr_db:.1f} dB, max abs error "
            f"{s.max_abs:.4g} over {s.samples} sample(s); produced by {te.change or 'a kept node'}",
            stage=f"{a.name} -> {b.name}", location={"tensor": te.b_tensor},
            evidence={"a_tensor": te.a_tensor, "b_tensor": te.b_tensor, "change": te.change, **s.to_dict()})


def nonfinite_parting(tensors):
    """The first of ``tensors`` (``(tensor, NaN/inf count in the reference, in the test stage)`` in the test stage's
    topological order) where the test stage holds more NaN or infinite values than the reference, or None: where
    the stages part in non-finite values (an overflow, NaN data) rather than in numbers. Fewer in the test stage (a
    Q/DQ pair saturating a float model's -inf mask, a rewrite putting -1e9 for -inf) or the same count (a mask both
    stages keep) is no parting: the comparison goes on past such tensors as before."""
    return next((t for t, na, nb in tensors if nb > na), None)


#: N402 lists only changes that lose accuracy: isolated SQNR below this (dB). Float rewrites (fusions) measure
#: above 100 dB (float32 rounding), int8 fake quantization 20-45 dB, int16 about 70-90 dB.
LOSSY_SQNR_DB = 60.0


def check_worst_isolated(ctx: AuditContext) -> Iterator[Finding]:
    """Rule N402 (graphaudit/rules/numeric.yaml): yields its findings over ``ctx``. Its evidence ``landed`` lists
    every lossy change whose error is bounded higher after its saturating readers than where it is measured
    (:mod:`graphaudit.checks.saturation`): N404 and the verdict judge those changes by that bound."""
    for res in ctx.numeric or []:
        worst = [r for r in res.worst_regions(3) if r.stats.sqnr_db < LOSSY_SQNR_DB]
        if not worst:
            continue
        a, b = _pair(ctx, res)
        nodes = [_node_of(res, r) for r in worst]
        parts = [f"{r.change.pattern} at {node} ({', '.join(o[1] for o in r.outputs[:2])}; SQNR "
                 f"{r.stats.sqnr_db:.1f} dB, cosine {r.stats.cosine:.5f})" for r, node in zip(worst, nodes)]
        landed = [(r, _node_of(res, r), ld) for r, ld in _landings(b, res).values()]
        landed.sort(key=lambda x: x[0].stats.sqnr_db)
        said = ""
        if landed:
            said = (f"; {len(landed)} of the lossy changes clip where every reader saturates, so their error after "
                    "those readers is bounded far higher (judged there by N404 and the verdict): "
                    + ", ".join(f"{node} {r.stats.sqnr_db:.1f} dB alone, at least {_say_db(ld.sqnr_db)} dB after "
                                f"{', '.join(ld.consumers)}" for r, node, ld in landed[:3])
                    + (f", {len(landed) - 3} more" if len(landed) > 3 else ""))
        yield make_finding(
            "N402", f"worst changes measured alone in {a.name} -> {b.name}: " + "; ".join(parts) + said,
            stage=f"{a.name} -> {b.name}", location={"tensor": worst[0].outputs[0][1]},
            evidence={"regions": [{"pattern": r.change.pattern, "node": node, "b_nodes": r.change.b_nodes,
                                   "outputs": [list(o) for o in r.outputs], **r.stats.to_dict()}
                                  for r, node in zip(worst, nodes)],
                      "landed": [{"node": node, "b_nodes": r.change.b_nodes, "consumers": ld.consumers,
                                  "sqnr_db_alone": round(r.stats.sqnr_db, 3), "sqnr_db": _json_db(ld.sqnr_db),
                                  "bound": ld.bound, "clip": list(ld.clip)} for r, node, ld in landed]})


#: A figure above every finite SQNR a change can have (dB): exact peers (inf) are ranked at it for the median.
_EXACT_DB = 1e9


def _say_db(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.1f}"


def _json_db(x: float) -> float | str:
    return "inf" if math.isinf(x) else round(x, 3)


def _landings(b: StageGraph, res) -> dict[int, tuple]:
    """``{id(region): (region, Landing)}`` of the lossy changes of a transition (isolated SQNR below
    :data:`LOSSY_SQNR_DB`) whose error after their saturating readers is bounded above their isolated SQNR
    (:func:`graphaudit.checks.saturation.landed_sqnr`)."""
    out: dict[int, tuple] = {}
    for r in res.regions:
        if not r.stats.samples or r.change.kind == "kept" or len(r.outputs) != 1 or \
                not r.stats.sqnr_db < LOSSY_SQNR_DB:
            continue
        ld = landed_sqnr(b, r.change.b_nodes, r.outputs[0][1], res.tensors)
        if ld is not None and ld.sqnr_db > r.stats.sqnr_db:
            out[id(r)] = (r, ld)
    return out


def _node_of(res, region) -> str:
    """The node a change is about, by the name the toolchain's config and log use: the reference stage's node
    computing the value the change quantizes (``Conv@50`` for an HzCalibration on its output), ``input x`` on a
    graph input, else the change's own first node in the test stage."""
    by_a = {te.a_tensor: te for te in res.tensors}
    for a_t, _b_t in region.outputs:
        te = by_a.get(a_t)
        if te is not None:
            return te.a_node or f"input {a_t}"
    return region.change.b_nodes[0] if region.change.b_nodes else "?"


def _quant_params(stage: StageGraph, node_ids: list[str]) -> dict[str, list[float]]:
    """The thresholds (HzCalibration) or scales (HzCalibration ``scales``, Q/DQ scale input) of a change's
    quantization nodes in the test stage, read from the graph: ``{"threshold": [...], "scale": [...]}``."""
    out: dict[str, list[float]] = {}
    for nid in node_ids:
        n = stage.nodes.get(nid)
        if n is None:
            continue
        if n.op_type == "HzCalibration":
            for key, attr in (("threshold", "thresholds"), ("scale", "scales")):
                v = n.attributes.get(attr)
                if isinstance(v, list) and v and key not in out:
                    out[key] = [float(x) for x in v]
        elif n.op_type in QUANTIZE_OPS | DEQUANTIZE_OPS and len(n.inputs) > 1 and "scale" not in out:
            t = stage.tensors.get(n.inputs[1])
            v = t.value() if t is not None else None
            if v is not None:
                out["scale"] = [float(x) for x in np.asarray(v, np.float64).ravel()]
    return out


def _say_params(params: dict[str, list[float]]) -> str:
    parts = []
    for key, v in params.items():
        if len(v) == 1:
            parts.append(f"{key} {v[0]:.6g}")
        else:
            parts.append(f"{len(v)} per-channel {key}s {min(v):.6g}..{max(v):.6g}")
    return ", ".join(parts)


def check_isolated_outlier(ctx: AuditContext) -> Iterator[Finding]:
    """Rule N404 (graphaudit/rules/numeric.yaml): per transition, the lossy changes whose SQNR is
    :data:`OUTLIER_DB` or more below the median of their peers (same kind and pattern, at least
    :data:`MIN_PEERS`), worst first, each named by its node with its threshold or scale.

    A change's SQNR here is where its error lands: its isolated SQNR, or the bound after its readers when every
    reader saturates and the bound is higher (:mod:`graphaudit.checks.saturation`: clipping a HardSigmoid's input
    at 3 costs nothing after it, however much the clipped tensor itself loses). As in the verdict, a change more
    than :data:`NAMED_WITHIN_DB` above the transition's lowest output SQNR is not named: on PP-OCR cls's calibrated
    -> quantized (outputs at 16.2 dB) fixed-point Convs at 45-55 dB, 7 dB below their peers, carry a few percent of
    the outputs' error at most."""
    for res in ctx.numeric or []:
        a, b = _pair(ctx, res)
        landed = {k: ld for k, (_r, ld) in _landings(b, res).items()}
        outs = [t.stats.sqnr_db for t in res.outputs() if t.stats.samples and t.stats.sqnr_db == t.stats.sqnr_db]
        ceiling = min(outs) + NAMED_WITHIN_DB if outs else math.inf
        groups: dict[tuple[str, str], list] = {}
        for r in res.regions:
            if r.stats.samples and r.change.kind != "kept" and r.stats.sqnr_db == r.stats.sqnr_db:
                groups.setdefault((r.change.kind, r.change.pattern), []).append(r)
        out = []
        for (kind, pattern), peers in groups.items():
            if len(peers) < MIN_PEERS:
                continue
            import statistics  # here: a structure-only run (no numeric results) does not import it

            # exact peers (inf dB) sort above every finite figure; a median at that bound is read as inf
            med = statistics.median(min(_figure(r, landed), _EXACT_DB) for r in peers)
            med = math.inf if med >= _EXACT_DB else med
            out += [(r, med, len(peers), f"{kind} {pattern}") for r in peers
                    if _figure(r, landed) <= min(med - OUTLIER_DB, ceiling) and _figure(r, landed) < LOSSY_SQNR_DB]
        if not out:
            continue
        out.sort(key=lambda x: _figure(x[0], landed))
        items, says = [], []
        for r, med, n, group in out:
            params, node, ld = _quant_params(b, r.change.b_nodes), _node_of(res, r), landed.get(id(r))
            items.append({"node": node, "b_nodes": r.change.b_nodes, "group": group, "peers": n,
                          "peers_median_sqnr_db": _json_db(med), "outputs": [list(o) for o in r.outputs], **params,
                          **r.stats.to_dict(), **_landed_evidence(ld)})
            said = f"; {_say_params(params)}" if params else ""
            after = f", at least {_say_db(ld.sqnr_db)} dB after {', '.join(ld.consumers)}" if ld else ""
            fig = _figure(r, landed)
            says.append(f"{node} ({group}{said}): SQNR {r.stats.sqnr_db:.1f} dB alone{after}, "
                        + (f"where most of its {n} peers are exact (median inf dB)" if math.isinf(med) else
                           f"{med - fig:.1f} dB below the median {med:.1f} dB of its {n} peers"))
        says = says[:3]
        more = f"; {len(items) - 3} more" if len(items) > 3 else ""
        small = _little_at_outputs(res)
        yield make_finding(
            "N404", f"{len(items)} change(s) in {a.name} -> {b.name} lose far more than the others of their kind: "
            + "; ".join(says) + more + ("; the outputs keep SQNR >= "
                                        f"{SMALL_LOSS_DB:g} dB and every top-1, so this costs little" if small else ""),
            stage=f"{a.name} -> {b.name}", location={"tensor": out[0][0].outputs[0][1]},
            evidence={"outlier_db": OUTLIER_DB, "outliers": items}, severity="info" if small else None)


def _figure(r, landed: dict[int, Landing]) -> float:
    """A change's SQNR where its error lands: the bound after its saturating readers when there is one (it is
    above the isolated figure by construction of :func:`_landings`), else its isolated SQNR."""
    ld = landed.get(id(r))
    return ld.sqnr_db if ld is not None else r.stats.sqnr_db


def _landed_evidence(ld: Landing | None) -> dict:
    return {} if ld is None else {"sqnr_db_landed": _json_db(ld.sqnr_db), "landed_after": ld.consumers}


def _little_at_outputs(res) -> bool:
    """The transition's outputs stay at or above :data:`SMALL_LOSS_DB` with every top-1 kept (as the verdict's
    "little at the outputs")."""
    outs = [t for t in res.outputs() if t.stats.samples]
    return bool(outs) and all(t.stats.sqnr_db >= SMALL_LOSS_DB and t.top1[0] == t.top1[1] for t in outs)


def _pair(ctx: AuditContext, res) -> tuple:
    """The stages a numeric result compares, by name (a result may span a stage the runtime refused)."""
    by = {st.name: st for st in ctx.stages}
    return by[res.a], by[res.b]


def check_stage_not_run(ctx: AuditContext) -> Iterator[Finding]:
    """Rule N403 (graphaudit/rules/numeric.yaml): one finding per stage the runtime refused (``ctx.stage_failures``).
    The stages after a refused one are still compared, with the last stage run before it; ``not_compared`` lists
    the stages no numeric result covers."""
    covered = {n for res in ctx.numeric or [] for n in (res.a, res.b)}
    for i, why in ctx.stage_failures:
        st = ctx.stages[i]
        missing = [s.name for s in ctx.stages[i:] if s.name not in covered or s is st]
        spans = [f"{r.a} -> {r.b}" for r in ctx.numeric or [] if
                 ctx.stages.index(_pair(ctx, r)[0]) < i < ctx.stages.index(_pair(ctx, r)[1])]
        after = (f"; {spans[0]} is compared across it" if spans else
                 f"; not compared either: {', '.join(missing[1:])}" if missing[1:] else "")
        yield make_finding(
            "N403", f"{st.name} could not be run, so it is missing from the numeric comparison{after}: {why}",
            stage=st.name, location={"file": str(st.path)},
            evidence={"stage_index": i, "reason": why, "not_compared": missing})


def check_eval_hook_failed(ctx: AuditContext) -> Iterator[Finding]:
    """Rule N405 (graphaudit/rules/numeric.yaml): one finding per stage on which the user's eval hook raised or
    returned something else than numbers (``ctx.metric``, :class:`graphaudit.numeric.summary.MetricSection`)."""
    if ctx.metric is None:
        return
    for m in ctx.metric.stages:
        if m.error is None:
            continue
        st = next((s for s in ctx.stages if s.name == m.stage), None)
        yield make_finding(
            "N405", f"the eval hook {ctx.metric.hook} failed on {m.stage} after {m.samples} sample(s): {m.error}; "
            "its metric is missing for that stage only", stage=m.stage,
            location={"file": str(st.path)} if st is not None else {},
            evidence={"hook": ctx.metric.hook, "error": m.error, "samples": m.samples, "runtime": m.runtime})


def check_nonfinite_outputs(ctx: AuditContext) -> Iterator[Finding]:
    """Rule N406 (graphaudit/rules/numeric.yaml): one finding per stage whose graph outputs held NaN or infinite
    values on the data (counted by :class:`graphaudit.numeric.metrics.ErrorStats`: ``nonfinite_a`` for the
    transition's reference stage, ``nonfinite_b`` for its test stage). Where both stages of a transition are NaN
    there is no divergence to find, and every figure compared against them is NaN: this says so."""
    seen: dict[str, list] = {}
    for res in ctx.numeric or []:
        for te in res.outputs():
            s = te.stats
            for name, tensor, bad in ((res.a, te.a_tensor, s.nonfinite_a), (res.b, te.b_tensor, s.nonfinite_b)):
                if bad and (tensor, bad) not in seen.setdefault(name, []):
                    seen[name].append((tensor, bad))
    for name, items in seen.items():
        listing = ", ".join(f"{t!r} {n:,}" for t, n in items)
        yield make_finding(
            "N406", f"output values of {name} are NaN or infinite on the data ({listing} value(s)): the "
            "comparisons with this stage measure nothing there", stage=name, location={"tensor": items[0][0]},
            evidence={"outputs": [{"tensor": t, "nonfinite": n} for t, n in items]})
