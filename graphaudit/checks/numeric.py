"""Numeric checks (N4xx): read the comparison results in ``AuditContext.numeric`` (absent: no findings)."""

from __future__ import annotations

from typing import Iterator

from ..findings import Finding
from ..toolchains.roles import NUMERICALLY_EQUAL_TRANSITIONS
from .base import AuditContext, make_finding

__all__: list[str] = []

_FLOAT_TRANSITIONS = NUMERICALLY_EQUAL_TRANSITIONS


def check_float_divergence(ctx: AuditContext) -> Iterator[Finding]:
    """Rule N401 (graphaudit/rules/numeric.yaml): yields its findings over ``ctx``."""
    for i, res in enumerate(ctx.numeric or []):
        a, b = ctx.stages[i], ctx.stages[i + 1]
        if (a.role, b.role) not in _FLOAT_TRANSITIONS or res.first_divergence is None:
            continue
        te = res.first_divergence
        s = te.stats
        below = (f"cosine {s.cosine:.6f} < {res.threshold}" if s.cosine < res.threshold
                 else f"SQNR {s.sqnr_db:.1f} dB < {res.sqnr_threshold:g} dB")
        yield make_finding(
            "N401", f"{a.name} -> {b.name} should be numerically equal but first diverges at {te.b_tensor!r} "
            f"(from {te.a_tensor!r}): {below}; cosine {s.cosine:.6f}, SQNR {s.sqnr_db:.1f} dB, max abs error "
            f"{s.max_abs:.4g} over {s.samples} sample(s); produced by {te.change or 'a kept node'}",
            stage=f"{a.name} -> {b.name}", location={"tensor": te.b_tensor},
            evidence={"a_tensor": te.a_tensor, "b_tensor": te.b_tensor, "change": te.change, **s.to_dict()})


#: N402 lists only changes that lose accuracy: isolated SQNR below this (dB). Float rewrites (fusions) measure
#: above 100 dB (float32 rounding), int8 fake quantization 20-45 dB, int16 about 70-90 dB.
LOSSY_SQNR_DB = 60.0


def check_worst_isolated(ctx: AuditContext) -> Iterator[Finding]:
    """Rule N402 (graphaudit/rules/numeric.yaml): yields its findings over ``ctx``."""
    for i, res in enumerate(ctx.numeric or []):
        worst = [r for r in res.worst_regions(3) if r.stats.sqnr_db < LOSSY_SQNR_DB]
        if not worst:
            continue
        a, b = ctx.stages[i], ctx.stages[i + 1]
        nodes = [_node_of(res, r) for r in worst]
        parts = [f"{r.change.pattern} at {node} ({', '.join(o[1] for o in r.outputs[:2])}; SQNR "
                 f"{r.stats.sqnr_db:.1f} dB, cosine {r.stats.cosine:.5f})" for r, node in zip(worst, nodes)]
        yield make_finding(
            "N402", f"worst changes measured alone in {a.name} -> {b.name}: " + "; ".join(parts),
            stage=f"{a.name} -> {b.name}", location={"tensor": worst[0].outputs[0][1]},
            evidence={"regions": [{"pattern": r.change.pattern, "node": node, "b_nodes": r.change.b_nodes,
                                   "outputs": [list(o) for o in r.outputs], **r.stats.to_dict()}
                                  for r, node in zip(worst, nodes)]})


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


def check_stage_not_run(ctx: AuditContext) -> Iterator[Finding]:
    """Rule N403 (graphaudit/rules/numeric.yaml): one finding per stage the runtime refused (``ctx.stage_failures``)."""
    for i, why in ctx.stage_failures:
        st = ctx.stages[i]
        later = [s.name for s in ctx.stages[i + 1:]]
        yield make_finding(
            "N403", f"{st.name} could not be run, so it and the stages after it ({', '.join(later) or 'none'}) are "
            f"missing from the numeric comparison: {why}", stage=st.name, location={"file": str(st.path)},
            evidence={"stage_index": i, "reason": why, "not_compared": [st.name, *later]})
