"""The rule table: one function per rule code, the codes of the rule catalogue (``graphaudit/rules/*.yaml``).

Every rule function takes an :class:`~graphaudit.checks.base.AuditContext` and yields
:class:`~graphaudit.findings.Finding` objects; it yields nothing when the context lacks what it reads (data,
numeric results, a config). :func:`run_checks` runs the table. The config rules (C3xx) are :class:`ConfigRule`
entries: their modules (and the config parser they use) are imported on the first call with a config, so that a
run without one (``graphaudit diff``, ``explain`` of bare stages) does not import them. :func:`validate_table`
checks the table against the catalogue (tests/test_rules.py runs it; not at import, which would parse every rule
file where a run's findings need their own family's file only).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Callable, Iterable

from ..catalogue import load_catalogue
from ..errors import RuleCatalogueError
from ..findings import Finding, report_order
from . import inputs as P
from . import numeric as N
from . import structure as S
from .base import AuditContext

__all__ = ["RULES", "CONFIG_CODES", "run_checks", "code_order", "validate_table", "markdown_table"]

Rule = Callable[[AuditContext], Iterable[Finding]]


def _config_modules() -> dict:
    """The modules of the config rules, by the letter :data:`RULES` names them with (imported on first use)."""
    from . import config_cross, config_heuristics, config_schema

    return {"C": config_schema, "X": config_cross, "H": config_heuristics}


class ConfigRule:
    """A config rule (C3xx) of :data:`RULES`: ``module`` (C config_schema, X config_cross, H config_heuristics) and
    function ``name``. Called with a context that holds a config, it imports the module and runs the function;
    without one it yields nothing, as every config rule does (they read ``ctx.config``; test_rules.py checks it)."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    @property
    def function(self) -> Rule:
        """The rule function itself (its module imported now)."""
        return getattr(_config_modules()[self.module], self.name)

    @property
    def __name__(self) -> str:  # as the function's, for messages naming it
        return self.name

    def __call__(self, ctx: AuditContext) -> Iterable[Finding]:
        return () if ctx.config is None else self.function(ctx)

    def __repr__(self) -> str:
        return f"ConfigRule({self.module!r}, {self.name!r})"


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
    "C301": ConfigRule("C", "unknown_keys"),
    "C302": ConfigRule("C", "deprecated"),
    "C303": ConfigRule("C", "wrong_types"),
    "C304": ConfigRule("C", "invalid_values"),
    "C305": ConfigRule("C", "per_input_counts"),
    "C306": ConfigRule("C", "channel_counts"),
    "C307": ConfigRule("C", "separators"),
    "C308": ConfigRule("C", "scale_and_std"),
    "C309": ConfigRule("C", "norm_type_mismatch"),
    "C310": ConfigRule("C", "type_pairs"),
    "C311": ConfigRule("C", "type_shape"),
    "C312": ConfigRule("C", "featuremap_norm"),
    "C313": ConfigRule("C", "bt601_needs_nv12"),
    "C314": ConfigRule("C", "input_source_type"),
    "C315": ConfigRule("C", "balance_factor"),
    "C316": ConfigRule("C", "max_percentile"),
    "C317": ConfigRule("C", "unknown_items"),
    "C318": ConfigRule("C", "required_keys"),
    "C320": ConfigRule("X", "input_names"),
    "C321": ConfigRule("X", "input_layout"),
    "C322": ConfigRule("X", "input_shape"),
    "C323": ConfigRule("X", "node_names"),
    "C324": ConfigRule("X", "preprocess_mismatch"),
    "C325": ConfigRule("X", "cal_data_dtype"),
    "C326": ConfigRule("X", "cal_data_normalized"),
    "C330": ConfigRule("H", "unit_range_normalization"),
    "C331": ConfigRule("H", "imagenet_channel_order"),
    "C332": ConfigRule("H", "name_tokens"),
    "C333": ConfigRule("H", "scale_only_range"),
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
    seen: dict[object, str] = {}
    for code, fn in rules.items():
        key = (fn.module, fn.name) if isinstance(fn, ConfigRule) else id(fn)
        if key in seen:
            problems.append(f"{code} reuses the function of {seen[key]} ({fn.__name__})")
        seen[key] = code
    if list(rules) != sorted(rules, key=code_order):
        problems.append("the table is not in code order")
    if problems:
        raise RuleCatalogueError("graphaudit/checks/table.py: " + "; ".join(problems))



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
