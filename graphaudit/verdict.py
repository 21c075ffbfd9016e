"""The verdict: what each transition does to the numbers and what to do, in sentences for a user who knows their model.

Built from the report alone (:class:`graphaudit.report.AuditReport`: findings, numeric summaries, run info), so the
verdict of a ``report.json`` can be rebuilt without the models. One line per cause, most important first:

1. ``harness`` — the data break a stage's input contract (input findings P201-P209, with their measured cost);
2. ``config`` — the conversion config is wrong (error findings C3xx, P210);
3. ``rewrite`` — stages documented as numerically equal (docs/HORIZON.md section 1) are not, on this data;
4. ``toolchain`` — another toolchain fault found in the structure (error findings such as S104 skipped calibration);
5. ``quantization`` — what quantizing costs at the outputs, and whether the loss sits in a few named nodes;
6. ``equal`` — stages that compute the same values on this data: a drop between them comes from the harness;
7. ``not-seen`` — what graphaudit could not measure (a stage not run, no data, the compiled model and the device).

Harness warnings (a suspicion such as a channel order that looks swapped, with no measured cost) rank after the
quantization lines. Within a cause, lines with a lower output SQNR come first.
"""

from __future__ import annotations

import math
import re

from .findings import Finding
from .numeric.summary import RegionSummary, TensorSummary, TransitionSummary, least_top1
from .report import VERDICT_CAUSES, AuditReport, VerdictLine
from .verdict_figures import cos_text as _cos, db_text as _db, number as _num
# one definition each: N404 and N401 judge as the verdict does
from .checks.numeric import NAMED_WITHIN_DB, OUTLIER_DB, SMALL_LOSS_DB, nonfinite_parting
from .toolchains.ops import is_fixed_point_op
from .verdict_notseen import is_horizon, not_seen_lines, sentence
from .verdict_toolchain import SYSTEMATIC_LSB, SYSTEMATIC_SPREAD, lowering_line, systematic

__all__ = ["build_verdict", "OUTLIER_DB", "NAMED_WITHIN_DB", "EQUAL_OUTPUT_SQNR_DB", "SMALL_LOSS_DB", "SYSTEMATIC_LSB",
           "SYSTEMATIC_SPREAD"]


#: Outputs at or above this SQNR (dB) count as the same values for transitions not documented as equal: the
#: threshold ``compare`` uses for documented-equal float stages (:data:`graphaudit.numeric.compare.FLOAT_EQUAL_SQNR_DB`).
EQUAL_OUTPUT_SQNR_DB = 60.0

#: Input findings that say the harness feeds a stage what its contract does not take.
HARNESS_CODES = ("P201", "P202", "P203", "P204", "P205", "P206", "P207", "P208", "P209", "P211")

_MAX_NAMED = 3


def build_verdict(report: AuditReport) -> list[VerdictLine]:
    """The verdict of a report, most important line first.

    Parameters
    ----------
    report : AuditReport
        Findings, numeric summaries and run info of one pipeline (``report.verdict`` is ignored).

    Returns
    -------
    list of VerdictLine
        Never empty: a report with nothing measured says so (``not-seen``).
    """
    random = report.run.random if report.run is not None else None
    lines = _harness_lines(report.findings) + _config_lines(report.findings)
    pairs = {(tr.a, tr.b): k for k, tr in enumerate(report.transitions)}
    for t in report.numeric or []:  # the render pair of a result (a refused stage leaves a gap in the results)
        lines.append(_transition_line(pairs.get((t.a, t.b), 0), t, report, random))
        off = systematic(t, _outputs(t)[1]) if lines[-1].cause == "quantization" else []
        if off:
            lines.append(lowering_line(pairs.get((t.a, t.b), 0), t, off, _region_name))
    lines += _toolchain_lines(report.findings, lines)
    lines += not_seen_lines(report)
    rank = {c: float(i) for i, c in enumerate(VERDICT_CAUSES)}

    def tier(v: VerdictLine) -> float:  # a suspicion about the data (a warning) ranks after measured losses
        return rank["quantization"] + 0.5 if v.cause == "harness" and v.text.startswith("Your data may") else \
            rank[v.cause]

    return sorted(lines, key=lambda v: (tier(v), _sort_db(v.sqnr_db)))


def _sort_db(x: float | None) -> float:
    return math.inf if x is None or not isinstance(x, (int, float)) or math.isnan(x) else x


def _firstsentence(text: str) -> str:
    head = text.split("; ")[0].split(". ")[0].strip()
    return head.rstrip(".?!") + ("?" if head.endswith("?") else "")


# --- harness and config -------------------------------------------------------------------------------------------

def _effect(f: Finding) -> tuple[float | None, str]:
    """(lowest output SQNR, sentence) of the measured cost of an input finding (``evidence["effect"]``)."""
    eff = f.evidence.get("effect") if isinstance(f.evidence, dict) else None
    outs = eff.get("outputs") if isinstance(eff, dict) else None
    if not outs:
        return None, ""
    worst = min(outs.items(), key=lambda kv: _sort_db(_num(kv[1].get("sqnr_db"))))
    db = _num(worst[1].get("sqnr_db"))
    return db, (f"fed as the stage expects, its output {worst[0]} changes to SQNR {_db(db)} dB "
                f"(cosine {_cos(worst[1].get('cosine'))}) on {eff.get('samples', '?')} samples")


def _unmeasured(f: Finding, tensor: str) -> str:
    """The evidence of an input finding without a measured cost at the outputs: the count P209's NaN/inf variant
    measured (its rule summary is about constant, duplicate and noise samples), else the rule's summary."""
    n = f.evidence.get("nonfinite") if isinstance(f.evidence, dict) else None
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return (f"measured: {n:,} NaN or infinite value(s) in the data for input {tensor!r}; the stages are not "
                "compared on such data, so their cost at the outputs is not measured")
    return f.title


def _harness_lines(findings: list[Finding]) -> list[VerdictLine]:
    """One line per input the data break. Its sentence is the finding that names the mistake (layout, form,
    normalization) rather than P211, which only sees that the data leave the calibrated range; it counts as an
    error when any finding on that input is one."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        if f.code in HARNESS_CODES and f.severity != "info":
            groups.setdefault(f.location.get("tensor") or f.stage, []).append(f)
    out = []
    for tensor, group in groups.items():
        f = next((g for g in group if g.code != "P211"), group[0])
        error = any(g.severity == "error" for g in group)
        db, effect = _effect(f)
        nodes = list(dict.fromkeys(x for x in (f.location.get("tensor"), f.location.get("node")) if x))
        what = "break" if error else "may not match"
        out.append(VerdictLine(
            cause="harness", scope=f.stage,
            text=sentence(f"Your data {what} the input contract of the {f.stage} stage: "
                           f"{_firstsentence(f.message)}"),
            evidence=effect or _unmeasured(f, tensor), action=f.fix, stage=f.stage, nodes=nodes,
            codes=list(dict.fromkeys(g.code for g in group)),
            sqnr_db=db if db is not None else (-math.inf if error else None)))
    return out


def _config_lines(findings: list[Finding]) -> list[VerdictLine]:
    errs = [f for f in findings if f.severity == "error" and (f.code.startswith("C3") or f.code == "P210")]
    out = []
    for f in errs[:_MAX_NAMED]:
        where = f.location.get("node") or f.location.get("tensor") or ""
        text = sentence(f"The conversion config{_config_place(f)}: {_firstsentence(f.message)}")
        out.append(VerdictLine(cause="config", scope=f.stage, text=text,
                               evidence=f.title, action=f.fix, stage=f.stage, nodes=[where] if where else [],
                               codes=[f.code]))
    if len(errs) > _MAX_NAMED:
        out[-1].evidence += f" ({len(errs) - _MAX_NAMED} more config errors among the findings)"
    return out


def _config_place(f: Finding) -> str:
    """``" (config.yaml:18:3, input_parameters.norm_type)"``: where a config finding points (file:line:col and key,
    as the lint prints them), or ``""`` without one."""
    at = ":".join(str(f.location[k]) for k in ("file", "line", "col") if f.location.get(k) not in (None, ""))
    parts = [x for x in (at, f.location.get("key") or "") if x]
    return f" ({', '.join(parts)})" if parts else ""


def _toolchain_lines(findings: list[Finding], lines: list[VerdictLine]) -> list[VerdictLine]:
    covered = {c for v in lines for c in v.codes} | {"N401", "N402", "N403", "P210"}
    out, seen = [], set()
    for f in findings:
        if f.severity != "error" or f.code[0] not in "SN" or f.code in covered or f.code in seen:
            continue
        seen.add(f.code)
        where = f.location.get("node") or ""
        out.append(VerdictLine(cause="toolchain", scope=f.stage, text=sentence(_firstsentence(f.message)),
                               evidence=f.title, action=f.fix, stage=f.stage, nodes=[where] if where else [],
                               codes=[f.code]))
    return out


# --- transitions ----------------------------------------------------------------------------------------------------

def _outputs(t: TransitionSummary) -> tuple[float | None, float | None, str]:
    """(lowest output cosine, lowest output SQNR dB, "cosine ..., SQNR ... dB[, top-1 agrees on n/m[ (output)]]"): the
    top-1 of the class-score output that agrees least, named when the transition has several outputs (the cosine
    and SQNR are the worst output's, which may be a regression without top-1: MTCNN ONet's box ``dense_5``)."""
    cos = [c for c in (_num(o.cosine) for o in t.outputs) if c is not None]
    dbs = [d for d in (_num(o.sqnr_db) for o in t.outputs) if d is not None]
    c, d = (min(cos) if cos else None), (min(dbs) if dbs else None)
    top = least_top1(t.outputs)
    text = f"outputs: cosine {_cos(c)}, SQNR {_db(d)} dB"
    if top:  # the class-score output that agrees least (rows of one output are its samples)
        name, (agree, rows) = top
        text += f", top-1 agrees on {agree}/{rows} samples" + (f" ({name})" if len(t.outputs) > 1 else "")
    return c, d, text


def _samples_phrase(t: TransitionSummary, random: int | None, report: AuditReport | None = None) -> str:
    """``"your data (N samples)"`` or ``"N random samples"``: N the samples the outputs were compared on, else those
    of the tensors compared (outputs of integer type are not compared: it said "0 random samples"), else the run's."""
    n = max((o.samples for o in t.outputs), default=0) or max((ts.samples for ts in t.tensors), default=0)
    if not n and report is not None and report.run is not None:
        n = report.run.samples_used or 0
    if random:
        return f"{n} random sample{'s' if n != 1 else ''}"
    return f"your data ({n} sample{'s' if n != 1 else ''})" if n else "your data"


def _transition_line(i: int, t: TransitionSummary, report: AuditReport, random: int | None) -> VerdictLine:
    scope = f"{t.a} -> {t.b}"
    c, d, figures = _outputs(t)
    on = _samples_phrase(t, random, report)
    documented_equal = t.sqnr_threshold is not None
    part = nonfinite_parting((ts, *(list(ts.nonfinite) + [0, 0])[:2]) for ts in t.tensors if ts.samples)
    if part is not None and (t.first_divergence is None or part.order <= t.first_divergence.order):
        return _nonfinite_line(t, part, report, scope, figures, d, on)
    if not t.outputs and t.first_divergence is None:  # nothing says the outputs agree: not "the same values"
        return _outputs_not_compared(t, scope, on)
    if t.first_divergence is None and (documented_equal or d is None or d >= EQUAL_OUTPUT_SQNR_DB):
        text = f"{t.a} and {t.b} compute the same values on {on}"
        action = ""
        if documented_equal:
            text += ", so if your evaluation shows an accuracy drop between them, it comes from how it feeds them."
            horizon = any(is_horizon(report, st.name) for st in report.stages)
            action = ("Feed each stage its own input contract: `graphaudit check-inputs STAGES --data DIR` shows what "
                      "each stage takes (layout, colour order, normalization"
                      + (", the -128 offset of *_128 inputs)." if horizon else ")."))
        else:
            text += "."
        return VerdictLine(cause="equal", scope=scope, text=text, evidence=figures, action=action,
                           sqnr_db=d)
    if documented_equal:
        return _rewrite_line(i, t, report, scope, figures, d)
    return _quantization_line(t, report, scope, figures, d, on, random)


def _outputs_not_compared(t: TransitionSummary, scope: str, on: str) -> VerdictLine:
    """The line of a transition none of whose outputs was compared (integer outputs, such as an ArgMax's indices or
    a detector's int64 labels: graphaudit compares float tensors) and where no compared tensor diverged: that is no
    evidence that the stages compute the same outputs (it said they did, also with nothing compared at all)."""
    agree = (f" The {t.tensors_compared} float tensor(s) compared before them agree." if t.tensors_compared else
             " No float tensor of theirs was compared either.")
    text = (f"The outputs of {t.a} and {t.b} were not compared on {on}: graphaudit compares float tensors, and no "
            f"output of {t.b} is one it could pair (integer outputs such as an ArgMax's indices are not compared)."
            + agree)
    action = ("Measure what your application reads from these outputs with --eval MODULE:FUNCTION (your metric per "
              "stage), or give the stages the float tensor they are computed from (the scores an ArgMax reads) as a "
              "graph output.")
    return VerdictLine(cause="not-seen", scope=scope, text=text, evidence="outputs: not compared", action=action,
                       stage=t.b)


def _nonfinite_line(t: TransitionSummary, part: TensorSummary, report: AuditReport, scope: str, figures: str,
                    d: float | None, on: str) -> VerdictLine:
    """The line of a transition whose stages part in NaN or infinite values before they part in numbers: nothing
    after that tensor is measured (its figures are NaN, or compare values computed from NaN/inf), so neither a
    rewrite (N401 leaves it out too) nor quantization is judged there."""
    na, nb = (list(part.nonfinite) + [0, 0])[:2]
    node = _node_of(t, part)
    text = (f"{t.a} and {t.b} were not compared on {on}: they part in NaN or infinite values at {part.b_tensor} "
            f"(node {node}: {na:,} such values in {t.a}, {nb:,} in {t.b}, of {part.elements:,}), and every figure "
            "after it measures those values, not a rewrite or quantization.")
    action = ("First fix the data (the harness line above): values outside what the stages were built for overflow "
              "differently in each stage." if _harness_error(report) else
              "Find where the NaN or infinite values come from (finding N406 names the outputs that hold them): "
              "check the data with numpy.isfinite, then the model's ops at that node.")
    return VerdictLine(cause="not-seen", scope=scope, text=text, evidence=figures, action=action, stage=t.b,
                       nodes=[node] if node else [], sqnr_db=d)


def _node_of(t: TransitionSummary, ts: TensorSummary) -> str:
    return ts.b_node or ts.b_tensor


def _rewrite_line(i: int, t: TransitionSummary, report: AuditReport, scope: str, figures: str,
                  d: float | None) -> VerdictLine:
    fd = t.first_divergence
    node = _node_of(t, fd) if fd is not None else ""
    what = fd.change if fd is not None and fd.change else "a node the toolchain kept"
    text = (f"The toolchain's rewrite of {t.a} into {t.b} changes the numbers: they first part at node {node} "
            f"({what}: cosine {_cos(fd.cosine)}, SQNR {_db(fd.sqnr_db)} dB)." if fd is not None else
            f"The toolchain's rewrite of {t.a} into {t.b} changes the numbers.")
    worst = _worst_changes(t)
    if worst and worst[0].b_nodes and _num(worst[0].sqnr_db) is not None and _num(worst[0].sqnr_db) < EQUAL_OUTPUT_SQNR_DB:
        r = worst[0]
        text += f" Measured alone, the worst change is {r.kind} {r.pattern} at {r.b_nodes[0]} (SQNR {_db(r.sqnr_db)} dB)."
    action = (f"Look at the rewrite around {node}: `graphaudit render STAGES --pair {i} --focus {node}`; a fusion or "
              "replacement that changes values is a toolchain fault to report with this stage pair.")
    if _harness_error(report):
        action = ("First fix the data (the harness line above): float stages can part on values they were never "
                  "meant to see (overflow, NaN), so this is a toolchain fault only if it remains on correct data.")
    nodes = [node] if node else []
    return VerdictLine(cause="rewrite", scope=scope, text=text, evidence=figures, action=action, stage=t.b,
                       nodes=nodes, codes=["N401"], sqnr_db=d)


def _worst_changes(t: TransitionSummary, landed: dict | None = None, quant: bool = False) -> list[RegionSummary]:
    """Measured changes (not kept nodes), lowest SQNR first: isolated, or where the error lands (``landed``,
    :func:`_landed`). With ``quant``, only those whose error can be quantization's (not :func:`graphaudit.verdict_toolchain.systematic`)."""
    off = {id(r) for r in systematic(t, _outputs(t)[1])} if quant else set()
    regions = [r for r in (t.regions or t.worst_regions) if r.kind != "kept" and _num(r.sqnr_db) is not None
               and id(r) not in off]
    return sorted(regions, key=lambda r: _figure(r, landed))


def _landed(report: AuditReport, t: TransitionSummary) -> dict[tuple[str, ...], dict]:
    """The changes of a transition whose error is bounded higher after their saturating readers than where it is
    measured alone (finding N402's evidence ``landed``, :mod:`graphaudit.checks.saturation`), by their test-stage
    nodes: ``{b_nodes: {"sqnr_db": bound, "consumers": [...], ...}}``. A change clipped at 3 before a HardSigmoid
    that saturates at 2.5 measures 7 dB alone and loses nothing of its clipping after it: the verdict judges it
    there, as N404 does."""
    return {tuple(e["b_nodes"]): e for f in report.findings
            if f.code == "N402" and f.stage == f"{t.a} -> {t.b}" and isinstance(f.evidence, dict)
            for e in f.evidence.get("landed") or []
            if isinstance(e, dict) and isinstance(e.get("b_nodes"), list) and _num(e.get("sqnr_db")) is not None}


def _figure(r: RegionSummary, landed: dict | None) -> float:
    """A change's SQNR (dB) where its error lands: the N402 bound after its readers when it has one, else its
    isolated SQNR."""
    e = (landed or {}).get(tuple(r.b_nodes))
    return max(_sort_db(_num(r.sqnr_db)), _sort_db(_num(e["sqnr_db"]))) if e else _sort_db(_num(r.sqnr_db))


def _alone(n: str, r: RegionSummary, landed: dict | None) -> str:
    """``"Conv@50 7.3 dB"``, with ``", at least 48.6 dB after HardSigmoid@8"`` for a change judged where it lands."""
    e = (landed or {}).get(tuple(r.b_nodes))
    after = f" (at least {_db(e['sqnr_db'])} dB after {', '.join(e.get('consumers') or [])})" if e else ""
    return f"{n} {_db(r.sqnr_db)} dB{after}"


def _region_name(t: TransitionSummary, r: RegionSummary) -> tuple[str, bool]:
    """(name, is a node of the reference stage) of the compute node a change is about: the node of the reference
    stage whose output it quantizes (the name the toolchain's ``node_info`` and ``nodes_to_exclude`` take); for a
    change on a graph input ``"input <name>"``; else its own node in the test stage."""
    by_a = {ts.a_tensor: ts for ts in t.tensors}
    for a_t, _b_t in r.outputs:
        ts = by_a.get(a_t)
        if ts is not None and ts.a_node:
            return ts.a_node, True
        if ts is not None and not ts.a_node:
            return f"input {a_t}", False
    if r.outputs and not r.a_nodes:  # inserted on a tensor the comparison does not hold (a graph input, a weight)
        return f"tensor {r.outputs[0][0]}", False
    return (r.b_nodes[0] if r.b_nodes else (r.a_nodes[0] if r.a_nodes else "?")), False


#: graphaudit's id of an unnamed node (``"<op_type>:<first output>"`` or ``"<op_type>#<index>"``,
#: :class:`graphaudit.stage.NodeInfo`): no toolchain setting can name it.
_UNNAMED_ID = re.compile(r"^[A-Z][A-Za-z0-9]*[:#]")


def _outliers(t: TransitionSummary, output_db: float | None = None, landed: dict | None = None
              ) -> list[tuple[str, bool, RegionSummary, float, int]]:
    """Changes whose SQNR is :data:`OUTLIER_DB` below the median of the changes of the same kind and pattern (at
    least 3 of them), and, given the transition's output SQNR, at most :data:`NAMED_WITHIN_DB` above it (a change
    far cleaner than the outputs adds little of their error, however it compares with its peers):
    ``[(node name, is a reference-stage node, region, peers' median dB, peers)]``, worst first, one per node.

    A change's SQNR is where its error lands (:func:`_figure`): its isolated SQNR, or, for a change all of whose
    readers saturate inside its clip range, the bound after them (``landed``, N402's evidence). The isolated figure
    is measured on the quantized tensor itself and counts clipping that a HardSigmoid removes one node later;
    naming such a change, and advising int16 for it, would point at an error that never reaches the outputs.
    Changes that compute another function (:func:`graphaudit.verdict_toolchain.systematic`) are neither named nor counted among the peers:
    the toolchain line names them, and a higher precision does not change them."""
    by_pattern: dict[str, list[RegionSummary]] = {}
    for r in _worst_changes(t, landed, quant=True):
        by_pattern.setdefault(f"{r.kind} {r.pattern}", []).append(r)
    out = []
    import statistics  # here: a structure-only run (no numeric results) does not import it

    for peers in by_pattern.values():
        if len(peers) < 3:
            continue
        med = statistics.median(_figure(r, landed) for r in peers)
        ceiling = med - OUTLIER_DB if output_db is None else min(med - OUTLIER_DB, output_db + NAMED_WITHIN_DB)
        out += [(r, med, len(peers)) for r in peers if _figure(r, landed) <= ceiling]
    out.sort(key=lambda x: _figure(x[0], landed))
    named: dict[str, tuple] = {}
    for r, med, n in out:
        name, in_a = _region_name(t, r)
        named.setdefault(name, (name, in_a, r, med, n))
    return list(named.values())[:_MAX_NAMED]


def _harness_error(report: AuditReport) -> bool:
    """The data break a stage's input contract: an error among the harness findings, but P209 on samples left out."""
    return any(f.severity == "error" and f.code in HARNESS_CODES and not (f.evidence or {}).get("left_out_count")
               for f in report.findings)


def _small_loss(t: TransitionSummary, d: float | None) -> bool:
    """Outputs within :data:`SMALL_LOSS_DB` and every classifier row's top-1 kept: quantization costs little."""
    top = [o.top1_agreement for o in t.outputs if o.top1_agreement]
    return d is not None and d >= SMALL_LOSS_DB and all(x[0] == x[1] for x in top)


def _bisect_hint(report: AuditReport, t: TransitionSummary) -> str:
    """Where ``graphaudit bisect`` measures which nodes recover the drop of ``t`` together: that transition, or, when
    its test stage is the fixed-point one (which bisect cannot revert: integers in NHWC), the transition before it,
    where the calibrated stage simulates the same quantization in float; "" when there is none."""
    names = [s.name for s in report.stages]
    if t.a not in names or t.b not in names:
        return ""
    i = names.index(t.a)
    b = report.stages[names.index(t.b)]
    if not any(is_fixed_point_op(op.rpartition("::")[2]) for op in b.custom_ops):
        return f"; `graphaudit bisect --pair {i}` measures which nodes recover the drop together"
    if i > 0 and report.stages[i].role == "calibrated":
        return (f"; `graphaudit bisect --pair {i - 1}` measures which nodes recover the drop together on "
                f"{names[i - 1]} -> {t.a}, where the same quantization is simulated in float")
    return ""


def _precision_action(report: AuditReport, t: TransitionSummary, names: list[str]) -> str:
    """The toolchain setting that keeps ``names`` (reference-stage nodes) in higher precision."""
    settable = [n for n in names if not _UNNAMED_ID.match(n)]
    unnamed = [n for n in names if _UNNAMED_ID.match(n)]
    if is_horizon(report, t.b):
        tool = "hb_compile" if report.run is not None and report.run.config_family == "3.x" else "hb_mapper"
        # the mapping form: hb_mapper 1.x's string form takes one node only (mapper_conf_parser.py; lint C304)
        action = (f"Keep {'them' if len(settable) > 1 else 'it'} in int16 and re-run {tool}: in the config's "
                  "model_parameters, node_info: {" + ", ".join(f"'{n}': {{'OutputType': 'int16'}}" for n in settable)
                  + "} (names of the optimized_float model" + _bisect_hint(report, t) + ").")
    else:
        action = (f"Leave {'them' if len(settable) > 1 else 'it'} in float and re-quantize: quantize_static(..., nodes_to_exclude=["
                  + ", ".join(repr(n) for n in settable) + "]).")
    if unnamed:
        action = ((action + " ") if settable else "") + (
                  f"{', '.join(unnamed)} have no name in the model (graphaudit's ids shown): name them in the "
                  "float model before quantizing to exclude them.")
    return action


#: The action of a loss spread over the model in the step from Horizon's calibrated stage to its fixed-point one.
_FIXED_POINT_SPREAD = ("This step keeps the calibrated stage's thresholds, so another calibration does not target "
                       "it: what it adds is the integer arithmetic's rounding (requantizations, table lookups) "
                       "spread over the model. Compare with the toolchain's quantized cosines (its log); where one "
                       "node dominates, keep it in int16 (node_info OutputType) or on the CPU, else accept it.")


def _fixed_point_step(report: AuditReport, t: TransitionSummary) -> bool:
    """Whether transition ``t`` runs from Horizon's calibrated stage into its fixed-point (quantized) stage."""
    roles = {s.name: s.role for s in report.stages}
    return roles.get(t.a) == "calibrated" and roles.get(t.b) == "quantized" and is_horizon(report, t.b)


def _quantization_line(t: TransitionSummary, report: AuditReport, scope: str, figures: str, d: float | None,
                       on: str, random: int | None) -> VerdictLine:
    landed = _landed(report, t)
    named = _outliers(t, d, landed)
    off = list(dict.fromkeys(_region_name(t, r)[0] for r in systematic(t, d)))
    text = f"Quantizing {t.a} into {t.b} brings the outputs to SQNR {_db(d)} dB on {on}"
    if off:
        text += f" (with the lowering of {', '.join(off[:_MAX_NAMED])}{' and more' if len(off) > _MAX_NAMED else ''}" \
                " the toolchain line names)"
    small = _small_loss(t, d)
    if small:
        text += " — little at the outputs: quantization alone is unlikely to explain an accuracy drop"
    if named:
        groups = list(dict.fromkeys((med, k, f"{r.kind} {r.pattern}") for _n, _a, r, med, k in named))
        alone = "; ".join(", ".join(_alone(n, r, landed) for n, _a, r, m, k in named
                                    if (m, k, f"{r.kind} {r.pattern}") == g)
                          + f" against a median of {_db(g[0])} dB over the {g[1]} changes of the same kind, "
                          f"{g[2]}" for g in groups)
        text += (f"; {'the largest single contributors are' if small else 'the loss concentrates in'} "
                 f"{', '.join(n for n, *_ in named)} (SQNR measured alone: {alone}).")
        names = [n for n, in_a, *_ in named if in_a]
        action = _precision_action(report, t, names) if names else (
            "The loss sits at the graph inputs' quantization: check that the data match the calibration data.")
    else:
        worst = _worst_changes(t, landed, quant=True)
        text += "; the loss is spread over the model rather than in a few nodes"
        text += (f" (worst change alone: {_alone(_region_name(t, worst[0])[0] + ' at SQNR', worst[0], landed)})."
                 if worst else ".")
        named = [(*_region_name(t, worst[0]), worst[0], None, 0)] if worst else []
        action = _FIXED_POINT_SPREAD if _fixed_point_step(report, t) else (
            "Improve calibration rather than single nodes: more and more representative samples, another "
            "calibration_type, or per-channel weights.")
    if small:
        action = "Nothing to do here for accuracy; if you still measure a drop, look at the harness and the device."
    if random and not small:
        action = ("Measured on random samples, which show where the stages part, not what your data lose: run your "
                  "data (--data, or --config with its cal_data_dir) before acting. " + action)
    if off and not small:
        action = ("First fix the lowering the toolchain line names: its error is in these outputs. Then: "
                  + action[0].lower() + action[1:])
    if _harness_error(report):
        action = ("First fix the data (the harness line above): these figures are measured on data that break a "
                  "stage's input contract, so they do not say what quantization costs on correct data.")
    return VerdictLine(cause="quantization", scope=scope, text=text, evidence=figures,
                       action=action, stage=t.a, nodes=[n if in_a else n.split(" ", 1)[-1] for n, in_a, *_ in named],
                       codes=["N402"], sqnr_db=d)
