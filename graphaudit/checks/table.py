"""The rule table: one function per rule code, checked against the rule catalogue (``graphaudit/rules/*.yaml``) at import.

Every rule function takes an :class:`~graphaudit.checks.base.AuditContext` and yields
:class:`~graphaudit.findings.Finding` objects; it yields nothing when the context lacks what it reads (data,
numeric results, a config). :func:`run_checks` runs the table.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Callable, Iterable

from ..catalogue import load_catalogue
from ..errors import RuleCatalogueError
from ..findings import Finding, report_order
from . import config_cross as X
from . import config_heuristics as H
from . import config_schema as C
from . import inputs as P
from . import numeric as N
from . import structure as S
from .base import AuditContext

__all__ = ["RULES", "CONFIG_CODES", "run_checks", "code_order", "validate_table", "markdown_table"]

Rule = Callable[[AuditContext], Iterable[Finding]]

#: Rule code -> rule function ``(AuditContext) -> Iterable[Finding]``, in code order (S1xx, P2xx, C3xx, N4xx).
RULES: dict[str, Rule] = {
    "S101": S.check_custom_ops,
    "S102": S.check_hzpreprocess,
    "S103": S.check_hzcalibration_census,
    "S104": S.check_calibration_skipped,
    "S105": S.check_qdq_census,
    "S106": S.check_output_signature,
    "S107": S.check_per_channel_opset,
    "S108": S.check_initializers_as_inputs,
    "S109": S.check_unfused_batchnorm,
    "S110": S.check_unaligned,
    "S111": S.check_float_ops_left,
    "S112": S.check_quant_formats,
    "S113": S.check_duplicate_initializers,
    "P201": P.check_layout,
    "P202": P.check_dtype,
    "P203": P.check_double_normalization,
    "P204": P.check_missing_normalization,
    "P205": P.check_offset,
    "P206": P.check_unit_range,
    "P207": P.check_channel_order,
    "P208": P.check_static_shape,
    "P209": P.check_sample_quality,
    "P210": P.check_unit_range_preprocess,
    "P211": P.check_calibrated_range,
    "P212": P.check_unreadable_files,
    "C301": C.unknown_keys,
    "C302": C.deprecated,
    "C303": C.wrong_types,
    "C304": C.invalid_values,
    "C305": C.per_input_counts,
    "C306": C.channel_counts,
    "C307": C.separators,
    "C308": C.scale_and_std,
    "C309": C.norm_type_mismatch,
    "C310": C.type_pairs,
    "C311": C.type_shape,
    "C312": C.featuremap_norm,
    "C313": C.bt601_needs_nv12,
    "C314": C.input_source_type,
    "C315": C.balance_factor,
    "C316": C.max_percentile,
    "C317": C.unknown_items,
    "C318": C.required_keys,
    "C320": X.input_names,
    "C321": X.input_layout,
    "C322": X.input_shape,
    "C323": X.node_names,
    "C324": X.preprocess_mismatch,
    "C325": X.cal_data_dtype,
    "C326": X.cal_data_normalized,
    "C330": H.unit_range_normalization,
    "C331": H.imagenet_channel_order,
    "C332": H.name_tokens,
    "C333": H.scale_only_range,
    "N401": N.check_float_divergence,
    "N402": N.check_worst_isolated,
    "N403": N.check_stage_not_run,
    "N404": N.check_isolated_outlier,
    "N405": N.check_eval_hook_failed,
    "N406": N.check_nonfinite_outputs,
}

#: The config rule codes (``graphaudit lint``), in code order.
CONFIG_CODES = tuple(code for code in RULES if code.startswith("C"))


def code_order(code: str) -> tuple[int, str]:
    """Sort key of rule codes by number: S101 < P201 < C301 < N401 (the family letter follows the hundreds)."""
    return int(code[1:]), code


def validate_table(rules: dict[str, Rule]) -> None:
    """Raise RuleCatalogueError unless ``rules`` and the catalogue name the same codes, each once, in code order.

    Raises
    ------
    RuleCatalogueError
        A catalogue rule has no function, a function has no catalogue entry, a function serves two codes, or the
        table is not in code order.
    """
    catalogue = load_catalogue()
    problems = []
    if missing := [c for c in catalogue if c not in rules]:
        problems.append(f"rules without a function: {', '.join(sorted(missing, key=code_order))}")
    if extra := [c for c in rules if c not in catalogue]:
        problems.append(f"functions without a catalogue entry (graphaudit/rules/*.yaml): {', '.join(extra)}")
    seen: dict[int, str] = {}
    for code, fn in rules.items():
        if id(fn) in seen:
            problems.append(f"{code} reuses the function of {seen[id(fn)]} ({fn.__name__})")
        seen[id(fn)] = code
    if list(rules) != sorted(rules, key=code_order):
        problems.append("the table is not in code order")
    if problems:
        raise RuleCatalogueError("graphaudit/checks/table.py: " + "; ".join(problems))


validate_table(RULES)


def run_checks(ctx: AuditContext, codes: Iterable[str] | None = None) -> list[Finding]:
    """Run the rules of :data:`RULES` (all, or the given codes) once each over ``ctx``.

    Parameters
    ----------
    ctx : AuditContext
        What the rules read; a rule whose input is absent (data, numeric results, config) yields nothing.
    codes : iterable of str, optional
        Rule codes to run, e.g. :data:`CONFIG_CODES`; default every rule of the table.

    Returns
    -------
    list of Finding
        Most serious first (:func:`graphaudit.findings.report_order`).

    Raises
    ------
    KeyError
        A code in ``codes`` is not in the table.
    """
    selected = list(codes) if codes is not None else list(RULES)
    findings: list[Finding] = []
    for code in selected:
        findings.extend(RULES[code](ctx))
    findings = merge_repeated(findings, [st.name for st in ctx.stages])
    findings.sort(key=report_order)
    return findings


def merge_repeated(findings: list[Finding], stage_names: list[str]) -> list[Finding]:
    """One finding per cause: findings that say the same thing (code, severity, message, location, evidence) about
    several stages become one, kept at the first stage, with ``evidence["stages"]`` listing every stage and the
    message naming them. Findings about a transition or the config are kept as they are.

    Parameters
    ----------
    findings : list of Finding
    stage_names : list of str
        Stage names in pipeline order.

    Returns
    -------
    list of Finding
        In the order of their first occurrence.
    """
    names = set(stage_names)
    groups: dict[str, list[Finding]] = {}
    order: list[str | int] = []
    for i, f in enumerate(findings):
        if f.stage not in names:
            order.append(i)
            continue
        key = json.dumps([f.code, f.severity, f.message, f.location, f.evidence], sort_keys=True, default=str)
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(f)
    out = []
    for k in order:
        if isinstance(k, int):
            out.append(findings[k])
            continue
        same = groups[k]
        if len(same) == 1:
            out.append(same[0])
            continue
        stages = [f.stage for f in same]
        out.append(replace(same[0], message=f"{same[0].message} (the same in stages {', '.join(stages)})",
                           evidence={**same[0].evidence, "stages": stages}))
    return out


def markdown_table() -> str:
    """The rule table as Markdown, one row per entry of :data:`RULES` (code order) with the catalogue's metadata.

    Returns
    -------
    str
        ``| code | name | severity | summary |`` rows, newline-terminated; README.md holds this text between
        ``<!-- rules:start -->`` and ``<!-- rules:end -->`` (``graphaudit rules --markdown`` prints it).
    """
    catalogue = load_catalogue()
    rows = ["| code | name | severity | summary |", "|---|---|---|---|"]
    for code in RULES:
        r = catalogue[code]
        summary = r.summary.replace("|", r"\|")  # a pipe would end the cell
        rows.append(f"| {r.code} | {r.name} | {r.severity} | {summary} |")
    return "\n".join(rows) + "\n"
