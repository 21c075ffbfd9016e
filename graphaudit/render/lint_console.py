"""Rendering of config-lint findings: ``file:line:col CODE message`` with a fix line (rich), and the JSON document."""

from __future__ import annotations

import json

from rich.console import Console
from rich.text import Text

from ..findings import SEVERITIES, Finding
from .json_out import json_safe
from .text import printable

__all__ = ["render_lint", "lint_json_text", "printable", "LINT_SCHEMA_VERSION"]

#: 1.1: ``scope`` (what was checked and what was skipped, and why); non-finite numbers as "nan"/"inf"/"-inf".
LINT_SCHEMA_VERSION = "1.1"
_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _where(f: Finding) -> str:
    loc = f.location or {}
    return printable(f"{loc.get('file', '')}:{loc.get('line', 1)}:{loc.get('col', 1)}")


def render_lint(findings: list[Finding], console: Console, header: str = "", scope=None) -> None:
    """Print one ``file:line:col CODE severity message`` line per finding, its fix below, then a count line.

    ``header`` (e.g. the config and its detected family) is printed first when given, then what was checked and
    what was skipped and why (``scope``, a :class:`graphaudit.lint.LintScope`). Control characters from
    the user's files (escape sequences in keys) are printed escaped (:func:`printable`).
    """
    if header:
        console.print(Text(printable(header), "bold"), soft_wrap=True)
    if scope is not None:
        for line in scope.checked:
            console.print(Text.assemble(("  checked: ", "dim"), printable(line)), soft_wrap=True)
        for line in scope.skipped:
            console.print(Text.assemble(("  skipped: ", "yellow"), printable(line)), soft_wrap=True)
    for f in findings:
        console.print(Text.assemble((_where(f), "bold"), " ", (f.code, _STYLE.get(f.severity, "")), " ",
                                    (f.severity, _STYLE.get(f.severity, "")), " ", printable(f.message)),
                      soft_wrap=True)
        if f.fix:
            console.print(Text.assemble(("    fix: ", "dim"), (printable(f.fix), "dim")), soft_wrap=True)
    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}
    summary = ", ".join(f"{n} {s}{'s' if n != 1 and s != 'info' else ''}" for s, n in counts.items())
    console.print(Text("no findings" if not findings else summary, "green" if not findings else ""))


def lint_json_text(findings: list[Finding], config_path: str, family: str, family_reason: str,
                   tool_version: str, scope=None) -> str:
    """The JSON document of ``graphaudit lint --format json``.

    ``{"schema_version", "tool": {"name", "version"}, "config", "family", "family_reason",
    "counts": {"error", "warning", "info"}, "scope": {"model", "data_dirs", "checked", "skipped"} (when given),
    "findings": [Finding.to_dict()]}``; each finding's ``location`` is ``{"file", "line", "col", "key"}``
    (1-based). Standard JSON (RFC 8259): non-finite numbers are written as the strings ``"nan"``, ``"inf"``,
    ``"-inf"``.
    """
    doc = {"schema_version": LINT_SCHEMA_VERSION, "tool": {"name": "graphaudit", "version": tool_version},
           "config": config_path, "family": family, "family_reason": family_reason,
           "counts": {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}}
    if scope is not None:
        doc["scope"] = scope.to_dict()
    doc["findings"] = [f.to_dict() for f in findings]
    return json.dumps(json_safe(doc), indent=1, default=str, allow_nan=False) + "\n"
