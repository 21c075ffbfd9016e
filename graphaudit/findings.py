"""Findings: what a rule reports (data only; renderers print them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Finding", "SEVERITIES", "severity_rank", "report_order"]

#: Severities from most to least serious.
SEVERITIES = ("error", "warning", "info")


def severity_rank(severity: str) -> int:
    """0 for error, 1 for warning, 2 for info (sort key: most serious first)."""
    return SEVERITIES.index(severity)


def report_order(f: "Finding") -> tuple:
    """Sort key of findings in a report: most serious first; within a severity, input findings (P2xx) first
    (a harness feeding the wrong data explains a drop before anything the toolchain did), then by code and line."""
    return severity_rank(f.severity), not f.code.startswith("P"), f.code, f.location.get("line", 0)


@dataclass
class Finding:
    """One result of a rule.

    Attributes
    ----------
    code : str
        Rule code, e.g. ``"S104"``; the rule's metadata is in ``graphaudit/rules/*.yaml``.
    severity : str
        ``"error"``, ``"warning"`` or ``"info"``.
    title : str
        The rule's summary line.
    message : str
        What was found, with the numbers behind it.
    stage : str
        Stage name (or ``"a -> b"`` for a transition), ``""`` when global.
    location : dict
        Node / tensor / config key the finding points at (``{"node": ..., "tensor": ...}``).
    evidence : dict
        The figures that back the message (counts, values), JSON-serialisable.
    fix : str
        What to do about it.
    """

    code: str
    severity: str
    title: str
    message: str
    stage: str = ""
    location: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        """Inverse of :meth:`to_dict`."""
        return cls(**d)
