"""Write a report as JSON, atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..fileio import check_output_path, write_atomic
from ..jsonvalues import json_safe
from ..report import AuditReport

__all__ = ["write_json", "json_safe", "input_check_json", "write_atomic", "check_output_path"]  # the last two re-exported from fileio


def write_json(report: AuditReport | list[AuditReport], path: str | os.PathLike,
               protect: list[Path] | None = None) -> Path:
    """Write one report (a JSON object) or several (a JSON list of objects) to ``path`` (see :func:`write_atomic`)."""
    data = [r.to_dict() for r in report] if isinstance(report, list) else report.to_dict()
    return write_atomic(path, json.dumps(json_safe(data), indent=1, default=str, allow_nan=False) + "\n", protect)


def input_check_json(stage_path: str, contracts: dict, stats: dict, findings: list) -> str:
    """JSON text of ``check-inputs``: the stage, each input's contract and data statistics, the findings.

    ``contracts`` maps input names to :class:`graphaudit.toolchains.contracts.InputContract`, ``stats`` to
    :class:`graphaudit.data.stats.InputStats`.
    """
    from dataclasses import asdict

    from ..data.stats import stats_dict

    return json.dumps(json_safe({"stage": stage_path,
                       "contracts": {k: {**asdict(ic), "value_domain": ic.value_domain} for k, ic in contracts.items()},
                       "inputs": {k: stats_dict(v) for k, v in stats.items()},
                       "findings": [f.to_dict() for f in findings]}), indent=1, default=str, allow_nan=False) + "\n"
