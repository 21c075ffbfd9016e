"""The context every rule function reads, and the finding constructor they share (the table is in :mod:`.table`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalogue import catalogue_rule
from ..classify import Change, Coverage
from ..findings import Finding
from ..lineage import Lineage
from ..stage import StageGraph

__all__ = ["AuditContext", "make_finding"]


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
    input_stats: dict | None = None  # input name -> graphaudit.data.stats.InputStats of the user's data
    data_stage: int = 0  # index of the stage whose input contract the data follow
    config: object | None = None  # graphaudit.config.ConversionConfig: the conversion YAML, when given
    config_model: StageGraph | None = None  # the ONNX model the config converts (lint cross-checks)
    config_lineage: Lineage | None = None  # the stages with config_model as stage 0, when it is not a stage
    config_data: object | None = None  # calibration data directory overriding the config's cal_data_dir
    data_from_pixel_files: bool = False  # the data are hb_mapper raw pixel files (cal_data_dir), fed as x - 128
    data_unreadable: list = field(default_factory=list)  # (path, reason): data files left out, unreadable (P212)
    data_files_read: int = 0  # data files the input checks and the comparison read (P212)
    data_paired_inputs: list = field(default_factory=list)  # inputs whose files pair into one sample (P212 counts samples)
    numeric_left_out: list = field(default_factory=list)  # (sample label, input): left out of the comparison, NaN/inf
    numeric_samples: int | None = None  # samples the numeric comparison used (None: it did not run)
    stage_failures: list = field(default_factory=list)  # (stage index, reason): stages the runtime could not run
    metric: object | None = None  # graphaudit.numeric.summary.MetricSection: the user's metric per stage (--eval)


def make_finding(code: str, message: str, stage: str = "", location: dict | None = None,
                 evidence: dict | None = None, severity: str | None = None, fix: str | None = None,
                 variant: str | None = None) -> Finding:
    """A :class:`Finding` with title, default severity and fix taken from the rule catalogue (``severity`` and
    ``fix`` override them where the finding knows better, e.g. the exact transpose; ``variant`` takes the fix of
    that variant from the rule's ``fixes``, KeyError when the rule has none such)."""
    rule = catalogue_rule(code)  # the code's family file alone, until the whole catalogue is loaded
    return Finding(code=code, severity=severity or rule.severity, title=rule.summary, message=message,
                   stage=stage, location=location or {}, evidence=evidence or {},
                   fix=fix or (rule.fixes[variant] if variant is not None else rule.fix))
