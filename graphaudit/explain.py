"""The main job as a library call: stage files -> lineage -> changes -> findings -> AuditReport."""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import __version__
from .checks import AuditContext, run_checks
from .checks.structure import custom_ops
from .classify import Change, Coverage, classify, coverage
from .errors import StagesUnrelatedError
from .findings import report_order
from .lineage import Lineage, align_chain
from .load import load_stage
from .report import AuditReport, make_transition, summarize_stage
from .stage import StageGraph
from .toolchains import discover_stages

__all__ = ["Audit", "audit", "explain", "load_pipeline", "MIN_RELATED_COVERAGE"]

#: Below this share of aligned-or-classified nodes on both sides, two stages are not one pipeline.
MIN_RELATED_COVERAGE = 0.5


@dataclass
class Audit:
    """Intermediate results of an audit (for callers that need more than the report)."""

    stages: list[StageGraph]
    lineage: Lineage
    changes: list[list[Change]]
    coverage: list[Coverage]
    report: AuditReport
    config: object | None = None  # graphaudit.config.ConversionConfig when a conversion YAML was given


def load_pipeline(paths: list[str | os.PathLike], source: str | os.PathLike | None = None) -> list[StageGraph]:
    """Discover, order and load the stages (see :func:`graphaudit.toolchains.discover_stages`).

    Raises
    ------
    StageDiscoveryError, ModelLoadError
    """
    files = discover_stages(paths, source)
    return [load_stage(f.path, role=f.role, name=f.name) for f in files]


def audit(stages: list[StageGraph], title: str = "", config=None) -> Audit:
    """Align, classify and check already-loaded stages (pipeline order).

    With ``config`` (a :class:`graphaudit.config.ConversionConfig`), the conversion YAML is linted
    against the stages (C3xx findings join the report) and declares layout and colour order of the
    stages' inputs for the input and numeric checks.

    Raises
    ------
    StagesUnrelatedError
        When two consecutive stages share no structure, or less than :data:`MIN_RELATED_COVERAGE`
        of the nodes of both align.
    """
    lineage = align_chain(stages)
    changes = [classify(al) for al in lineage.alignments]
    covs = [coverage(al, ch) for al, ch in zip(lineage.alignments, changes)]
    for al, cov in zip(lineage.alignments, covs):
        if max(cov.a_ratio, cov.b_ratio) < MIN_RELATED_COVERAGE:
            raise StagesUnrelatedError(
                f"{al.a.path} and {al.b.path}: the stages share almost no structure ({cov.a_ratio:.0%} and "
                f"{cov.b_ratio:.0%} of their nodes align); are they stages of the same model, in pipeline order?")
    ctx = AuditContext(stages=stages, lineage=lineage, changes=changes, coverage=covs, config=config)
    findings = [f for f in run_checks(ctx) if not f.code.startswith("C")]
    if config is not None:
        from .lint import lint_config

        findings.extend(lint_config(config, stages=stages, lineage=lineage))
        findings.sort(key=report_order)
    report = AuditReport(
        stages=[summarize_stage(s, custom_ops(s)) for s in stages],
        transitions=[make_transition(a, b, ch, cv) for a, b, ch, cv in zip(stages, stages[1:], changes, covs)],
        findings=findings, title=title, tool_version=__version__)
    return Audit(stages, lineage, changes, covs, report, config)


def explain(paths: list[str | os.PathLike], source: str | os.PathLike | None = None, title: str = "") -> AuditReport:
    """Explain a pipeline: ``graphaudit explain`` as a function.

    Parameters
    ----------
    paths : list of path-like
        A stage directory or stage files in pipeline order.
    source : path-like, optional
        The user's pre-toolchain float model (stage 0).

    Returns
    -------
    AuditReport

    Raises
    ------
    GraphAuditError
        Bad paths, unreadable models, unrelated stages.
    """
    return audit(load_pipeline(paths, source), title=title).report
