"""Check registry and the context every check reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..catalogue import load_catalogue
from ..classify import Change, Coverage
from ..findings import Finding, report_order
from ..lineage import Lineage
from ..stage import StageGraph

__all__ = ["AuditContext", "CHECKS", "check", "run_checks", "make_finding"]


@dataclass
class AuditContext:
    """What checks may read: the stages in pipeline order, their lineage and the classified changes.

    ``changes[i]`` and ``coverage[i]`` belong to the transition ``stages[i] -> stages[i + 1]``.
    """

    stages: list[StageGraph]
    lineage: Lineage | None = None
    changes: list[list[Change]] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)
    numeric: list | None = None  # list of graphaudit.numeric.compare.TransitionNumeric when data were run
    input_stats: dict | None = None  # input name -> graphaudit.numeric.datastats.InputStats of the user's data
    data_stage: int = 0  # index of the stage whose input contract the data follow
    config: object | None = None  # graphaudit.config.ConversionConfig: the conversion YAML, when given
    config_model: StageGraph | None = None  # the ONNX model the config converts (lint cross-checks)
    config_data: object | None = None  # calibration data directory overriding the config's cal_data_dir
    data_from_pixel_files: bool = False  # the data are hb_mapper raw pixel files (cal_data_dir), fed as x - 128
    stage_failures: list = field(default_factory=list)  # (stage index, reason): stages the runtime could not run


#: Rule code -> check function ``(AuditContext) -> Iterable[Finding]``.
CHECKS: dict[str, Callable[[AuditContext], Iterable[Finding]]] = {}


def check(code: str) -> Callable:
    """Decorator registering a check function under a rule code (the rule must exist in graphaudit/rules/)."""

    def register(fn: Callable[[AuditContext], Iterable[Finding]]) -> Callable:
        if code in CHECKS:
            raise ValueError(f"check {code} registered twice")
        CHECKS[code] = fn
        return fn

    return register


def make_finding(code: str, message: str, stage: str = "", location: dict | None = None,
                 evidence: dict | None = None, severity: str | None = None) -> Finding:
    """A :class:`Finding` with title, default severity and fix taken from the rule catalogue."""
    rule = load_catalogue()[code]
    return Finding(code=code, severity=severity or rule.severity, title=rule.summary, message=message,
                   stage=stage, location=location or {}, evidence=evidence or {}, fix=rule.fix)


def run_checks(ctx: AuditContext, codes: Iterable[str] | None = None) -> list[Finding]:
    """Run the registered checks (all, or the given codes) and return findings, most serious first."""
    selected = list(codes) if codes is not None else sorted(CHECKS)
    findings: list[Finding] = []
    for code in selected:
        findings.extend(CHECKS[code](ctx))
    findings.sort(key=report_order)
    return findings
