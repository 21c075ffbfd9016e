"""The verdict's sentences about the toolchain: the ``toolchain`` line for a fixed-point op that computes another
function than the node it lowers, and the toolchain log's own figures.

A change measured alone in Horizon's calibrated -> quantized transition reads the fixed-point op's integer output on
its own grid against the calibrated stage's fake-quantized value on that same grid (``lsb_mean``, ``lsb_max`` of
the region, :class:`graphaudit.numeric.summary.RegionSummary`). A faithful lowering only rounds its intermediate
steps differently; an error of several steps on average, over most elements, is the lowering computing another
function, which no precision setting changes (README "The verdict").
"""

from __future__ import annotations

import math
from typing import Callable

from .checks.numeric import NAMED_WITHIN_DB
from .numeric.summary import RegionSummary, TransitionSummary
from .report import AuditReport, VerdictLine
from .verdict_figures import cos_text as _cos, db_text as _db, number as _num

__all__ = ["SYSTEMATIC_LSB", "SYSTEMATIC_SPREAD", "SYSTEMATIC_MAX_LSB", "offset_error", "systematic", "lowering_line",
           "toolchain_log_figures"]

_MAX_NAMED = 3

#: A change measured alone whose output is on average this many steps (LSB) or more off its own quantization grid,
#: with most of its elements off (:data:`SYSTEMATIC_SPREAD`), computes another function, not the same one rounded.
#: Only changes whose output is read on a grid carry ``lsb_mean``: a fixed-point stage's integer tensor against the
#: calibrated stage's fake-quantized value on that same grid (Horizon calibrated -> quantized), where a faithful
#: lowering only rounds its intermediate steps differently: within 1 LSB per element, 0.003 on average for the
#: median change of the bundled real sets. HardSigmoid -> HzLut (alpha 0.2 in the model, a table of slope 1/6 in
#: Horizon's runtime): 2.1-5.7 on PP-OCR cls, 2.0-3.9 on PP-OCRv4 det; with alpha 1/6 at most 0.22 (README "The
#: verdict"). Other changes above 1.5: PRelu -> HzSPRelu 2.15, split GlobalAveragePool chains up to 2.25 (below).
SYSTEMATIC_LSB = 1.5

#: ... and most elements are off when the mean error is at least this fraction of the largest (``lsb_mean /
#: lsb_max``): 0.18-0.72 for the HardSigmoid -> HzLut of alpha 0.2; an error confined to a few elements (a
#: value saturated in one stage and not in the other) is a small fraction: 0.033 for MTCNN RNet's PRelu ->
#: HzSPRelu (2.2 LSB on average, up to 66), 0.004 for ONet's.
SYSTEMATIC_SPREAD = 0.15

#: ... and some element is more than this many LSB off: the same function rounded through a chain of fixed-point
#: steps stays within a few LSB (PP-OCRv4 det bernoulli2 splits a GlobalAveragePool into up to six average pools:
#: 1.3-2.2 LSB on average, at most 3-4 where the mean passes 1.5, 6 and 12 where it is 1.27 and 1.39); HardSigmoid
#: -> HzLut of alpha 0.2: at most 6-11.
SYSTEMATIC_MAX_LSB = 4.5


def _dbs(r: RegionSummary) -> float:
    """A change's isolated SQNR (dB), +inf when not a number."""
    v = _num(r.sqnr_db)
    return math.inf if v is None or math.isnan(v) else v


def systematic(t: TransitionSummary, output_db: float | None = None) -> list[RegionSummary]:
    """Changes measured alone whose error is systematic (:func:`offset_error`) and, given the transition's output
    SQNR, at most :data:`NAMED_WITHIN_DB` above it (as :func:`_outliers` names), largest mean error first: the
    lowering computes another function there, which no precision setting changes."""
    return sorted((r for r in (t.regions or t.worst_regions) if r.kind not in ("kept", "inserted") and offset_error(r)
                   and (output_db is None or _dbs(r) <= output_db + NAMED_WITHIN_DB)),
                  key=lambda r: -_num(r.lsb_mean))


def offset_error(r: RegionSummary) -> bool:
    """Whether a change's isolated error is systematic: a mean of :data:`SYSTEMATIC_LSB` steps or more of its output's
    grid, spread over most elements (:data:`SYSTEMATIC_SPREAD`), some more than :data:`SYSTEMATIC_MAX_LSB` off. Inserted changes are left to the quantization line:
    a requantization computes no function of the model, only moves values to another grid."""
    lsb, top = _num(r.lsb_mean), _num(r.lsb_max)
    if lsb is None or top is None or not (math.isfinite(lsb) and math.isfinite(top)) or top <= 0:
        return False
    return lsb >= SYSTEMATIC_LSB and lsb >= SYSTEMATIC_SPREAD * top and top > SYSTEMATIC_MAX_LSB


def lowering_line(i: int, t: TransitionSummary, off: list[RegionSummary],
                  name_of: Callable[[TransitionSummary, RegionSummary], tuple[str, bool]]) -> VerdictLine:
    """The ``toolchain`` line of transition ``i`` (its render pair) with changes that compute another function
    (``off``, :func:`systematic`); ``name_of`` gives a change's node name (the verdict's)."""
    scope = f"{t.a} -> {t.b}"
    names = list(dict.fromkeys(name_of(t, r)[0] for r in off))
    shown = names[:_MAX_NAMED] + ([f"{len(names) - _MAX_NAMED} more"] if len(names) > _MAX_NAMED else [])
    pats = ", ".join(dict.fromkeys(f"{r.kind} {r.pattern}" for r in off))
    w = off[0]
    lo, hi = _num(off[-1].lsb_mean), _num(w.lsb_mean)
    mean = f"{hi:.2f}" if len(off) == 1 else f"{lo:.2f}-{hi:.2f}"
    top = max(_num(r.lsb_max) for r in off)
    text = (f"The toolchain's lowering of {t.a} into {t.b} computes another function at {', '.join(shown)} "
            f"({pats}): measured alone, {'its' if len(names) == 1 else 'their'} output is off by {mean} LSB on "
            f"average (at most {top:g}) of {'its' if len(names) == 1 else 'their'} own quantization grid, where "
            f"rounding leaves less than 1 LSB: a systematic error, not quantization noise (SQNR {_db(w.sqnr_db)} dB "
            f"alone at {names[0]}, cosine {_cos(w.cosine)}).")
    b_node = w.b_nodes[0] if w.b_nodes else names[0]
    action = (f"Not a precision setting: int16 keeps the same lowering. Compare the op's definition in {t.a} with what "
              f"{t.b} runs (`graphaudit render STAGES --pair {i} --focus {b_node}`) and report it to the toolchain's "
              "vendor with this stage pair; to avoid it, express the function with other ops in the float model or "
              "keep the node off that lowering, then run graphaudit again.")
    return VerdictLine(cause="toolchain", scope=scope, text=text, evidence="isolated errors: " + ", ".join(
        f"{name_of(t, r)[0]} {_num(r.lsb_mean):.2f} LSB mean, {_db(r.sqnr_db)} dB" for r in off[:_MAX_NAMED]),
        action=action, stage=t.b, nodes=names, codes=["N402"], sqnr_db=_num(w.sqnr_db))


def toolchain_log_figures(report: AuditReport) -> str:
    """The toolchain log's own figures, for a report that measured nothing: its lowest output cosine and its lowest
    node cosine (hb_mapper's similarity of the calibrated model against the float one on its first calibration
    sample, README "Toolchain logs"), or "" without a log holding them."""
    tc = report.toolchain
    if tc is None:
        return ""
    outs = [(o.cosine, o.output) for o in tc.outputs if isinstance(o.cosine, (int, float))]
    nodes = [(n.cosine, n.node) for n in tc.nodes if isinstance(n.cosine, (int, float))]
    if not outs and not nodes:
        return ""
    parts = []
    if outs:
        c, name = min(outs)
        parts.append(f"output {name} at cosine {c:.6f}")
    if nodes:
        c, name = min(nodes)
        parts.append(f"its lowest node {name} at {c:.6f}")
    return f" The toolchain's own log ({tc.tool}) measured {' and '.join(parts)}."
