"""The rule catalogue: metadata of every rule, read from ``graphaudit/rules/*.yaml`` (safe YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import RuleCatalogueError
from .findings import SEVERITIES

__all__ = ["Rule", "load_catalogue", "catalogue_rule", "RULES_DIR", "FAMILY_FILES"]

RULES_DIR = Path(__file__).parent / "rules"

#: The file of :data:`RULES_DIR` that holds each rule family (the code's letter): :func:`catalogue_rule` reads it alone.
FAMILY_FILES = {"S": "structure.yaml", "P": "inputs.yaml", "C": "config.yaml", "N": "numeric.yaml"}
_REQUIRED = ("code", "name", "summary", "why", "fix", "severity", "examples")


@dataclass(frozen=True)
class Rule:
    """Metadata of one rule: code (S1xx structure, P2xx inputs, C3xx config, N4xx numeric),
    kebab-case name, one-line summary, why it matters, how to fix it, default severity,
    and examples (``{"fail": [...], "pass": [...]}``, each a dict with ``stages``: a list of
    ``{"role": ..., "model": <onnx.parser text>}``; a failing example may state ``severity`` where the finding
    raises the default, e.g. P209 when every sample is blank). ``fixes`` (optional in the YAML): variant name ->
    the fix of a variant of the finding whose cause differs from the rule's usual one (P209 ``nonfinite``: NaN or
    infinite values), used instead of ``fix`` by the check that yields that variant."""

    code: str
    name: str
    summary: str
    why: str
    fix: str
    severity: str
    examples: dict[str, list[dict[str, Any]]] = field(hash=False, compare=False)
    source: str = ""
    fixes: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


@lru_cache(maxsize=1)
def load_catalogue(rules_dir: str | None = None) -> dict[str, Rule]:
    """Read every ``*.yaml`` in the rules directory; code -> :class:`Rule`, ordered by code.

    Raises
    ------
    RuleCatalogueError
        A file is not valid YAML, an entry lacks a required key, a severity is unknown or a
        code is duplicated.
    """
    d = Path(rules_dir) if rules_dir else RULES_DIR
    rules: dict[str, Rule] = {}
    for f, entries in _entries(d):
        _add(rules, f, entries)
    return dict(sorted(rules.items()))


def catalogue_rule(code: str) -> Rule:
    """``load_catalogue()[code]``, read from the file of the code's family alone (:data:`FAMILY_FILES`) while the
    whole catalogue has not been loaded: a run whose findings are all structure findings (``graphaudit diff``)
    parses one file of four. KeyError for a code the catalogue lacks."""
    if not load_catalogue.cache_info().currsize and code[:1] in FAMILY_FILES:
        found = _family(code[:1]).get(code)
        if found is not None:
            return found
    return load_catalogue()[code]


@lru_cache(maxsize=None)
def _family(letter: str) -> dict[str, Rule]:
    """The rules of one family's file (:data:`FAMILY_FILES`), checked as :func:`load_catalogue` checks them."""
    rules: dict[str, Rule] = {}
    for f, entries in _parse([RULES_DIR / FAMILY_FILES[letter]]):
        _add(rules, f, entries)
    return rules


def _add(rules: dict[str, Rule], f: Path, entries: Any) -> None:
    """Check the entries of file ``f`` and add them to ``rules`` (RuleCatalogueError as :func:`load_catalogue`)."""
    if not isinstance(entries, list):
        raise RuleCatalogueError(f"{f}: expected a list of rules")
    for e in entries:
        missing = [k for k in _REQUIRED if not e.get(k)]
        if missing:
            raise RuleCatalogueError(f"{f}: rule {e.get('code', '?')} lacks {', '.join(missing)}")
        if e["severity"] not in SEVERITIES:
            raise RuleCatalogueError(f"{f}: rule {e['code']} has unknown severity {e['severity']!r}")
        if e["code"] in rules:
            raise RuleCatalogueError(f"{f}: duplicate rule code {e['code']}")
        fixes = e.get("fixes") or {}
        if not isinstance(fixes, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                                  for k, v in fixes.items()):
            raise RuleCatalogueError(f"{f}: rule {e['code']}: fixes must map variant names to fix texts")
        rules[e["code"]] = Rule(code=e["code"], name=e["name"], summary=" ".join(str(e["summary"]).split()),
                                why=" ".join(str(e["why"]).split()), fix=" ".join(str(e["fix"]).split()), severity=e["severity"],
                                examples=_plain(e["examples"]), source=f.name,
                                fixes={k: " ".join(v.split()) for k, v in fixes.items()})


def _parse(files: list[Path]) -> list[tuple[Path, Any]]:
    """Each YAML file's entries, read with ruamel's safe loader (its C parser, ruamel.yaml.clib, where installed:
    0.04 s for the whole catalogue where the pure-Python parser takes 0.3 s of every run's start-up);
    RuleCatalogueError on invalid YAML. ruamel is imported here: a run that makes no finding never reads the
    catalogue."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    yaml = YAML(typ="safe")
    out = []
    for f in files:
        try:
            out.append((f, yaml.load(f.read_text(encoding="utf-8")) or []))
        except YAMLError as e:
            raise RuleCatalogueError(f"{f}: invalid YAML ({e.__class__.__name__})") from e
    return out


def _entries(d: Path) -> list[tuple[Path, Any]]:
    """(file, its list of entries) per ``*.yaml`` of ``d`` in name order."""
    return _parse(sorted(d.glob("*.yaml")))
