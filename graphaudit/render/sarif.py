"""SARIF 2.1.0 output of findings located in files (config lint), for code-scanning UIs."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from ..catalogue import Rule
from ..findings import Finding
from .json_out import json_safe

__all__ = ["to_sarif", "sarif_text", "SARIF_SCHEMA_URI", "SARIF_LEVEL"]

#: The OASIS schema of SARIF 2.1.0 (errata 01), as ``$schema`` of the log.
SARIF_SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
#: graphaudit severity -> SARIF result level (SARIF 2.1.0 section 3.27.10).
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _uri(path: str) -> str:
    """A SARIF ``artifactLocation.uri``: relative paths as POSIX URI references, absolute ones as ``file://`` URIs."""
    p = Path(path)
    return p.as_uri() if p.is_absolute() else quote(p.as_posix())


def _rule(r: Rule) -> dict:
    return {"id": r.code, "name": r.name, "shortDescription": {"text": r.summary}, "fullDescription": {"text": r.why},
            "help": {"text": r.fix}, "defaultConfiguration": {"level": SARIF_LEVEL[r.severity]}}


def to_sarif(findings: list[Finding], rules: dict[str, Rule], tool_version: str, scope=None) -> dict:
    """A SARIF 2.1.0 log (one run) of ``findings``.

    Parameters
    ----------
    findings : list of Finding
        Findings whose ``location`` may carry ``file``, ``line`` and ``col`` (1-based, Unicode code points).
    rules : dict
        The rule catalogue (:func:`graphaudit.catalogue.load_catalogue`); the rules cited are described in
        ``tool.driver.rules``.
    tool_version : str
    scope : LintScope, optional
        What was checked and what was skipped (:func:`graphaudit.lint.lint_scope`): written as
        ``invocations[0].toolExecutionNotifications`` (SARIF 2.1.0 sections 3.20.21, 3.58), level ``note`` for
        a check run and ``warning`` for a check skipped.

    Returns
    -------
    dict
        JSON-ready; valid against the OASIS SARIF 2.1.0 schema (tested with the schema vendored in
        ``tests/data/lint/``). Source: OASIS SARIF v2.1.0 (results 3.27, physicalLocation 3.29, region 3.30).
    """
    cited = sorted({f.code for f in findings if f.code in rules})
    index = {code: i for i, code in enumerate(cited)}
    results = []
    for f in findings:
        res: dict = {"ruleId": f.code, "level": SARIF_LEVEL.get(f.severity, "note"),
                     "message": {"text": f"{f.message}" + (f" Fix: {f.fix}" if f.fix else "")}}
        if f.code in index:
            res["ruleIndex"] = index[f.code]
        loc = f.location or {}
        if loc.get("file"):
            phys: dict = {"artifactLocation": {"uri": _uri(str(loc["file"]))}}
            if isinstance(loc.get("line"), int) and loc["line"] >= 1:
                phys["region"] = {"startLine": loc["line"]}
                if isinstance(loc.get("col"), int) and loc["col"] >= 1:
                    phys["region"]["startColumn"] = loc["col"]
            entry: dict = {"physicalLocation": phys}
            if loc.get("key"):
                entry["logicalLocations"] = [{"fullyQualifiedName": str(loc["key"]), "kind": "member"}]
            res["locations"] = [entry]
        if f.evidence:
            res["properties"] = {"evidence": f.evidence}
        results.append(res)
    run: dict = {"tool": {"driver": {"name": "graphaudit", "version": tool_version,
                                     "rules": [_rule(rules[c]) for c in cited]}}}
    if scope is not None:
        notes = [{"level": "note", "message": {"text": f"checked: {t}"}} for t in scope.checked]
        notes += [{"level": "warning", "message": {"text": f"skipped: {t}"}} for t in scope.skipped]
        run["invocations"] = [{"executionSuccessful": True, "toolExecutionNotifications": notes}]
    run.update({"columnKind": "unicodeCodePoints", "results": results})
    return {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def sarif_text(findings: list[Finding], rules: dict[str, Rule], tool_version: str, scope=None) -> str:
    """:func:`to_sarif` serialized as indented standard JSON text (with a final newline); non-finite numbers in
    evidence are written as the strings ``"nan"``, ``"inf"``, ``"-inf"``."""
    return json.dumps(json_safe(to_sarif(findings, rules, tool_version, scope)), indent=1, default=str,
                      allow_nan=False) + "\n"
