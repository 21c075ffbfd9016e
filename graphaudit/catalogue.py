"""The rule catalogue: metadata of every rule, read from ``graphaudit/rules/*.yaml`` (safe YAML)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .errors import RuleCatalogueError
from .findings import SEVERITIES

__all__ = ["Rule", "load_catalogue", "RULES_DIR", "MIRROR", "write_mirror"]

RULES_DIR = Path(__file__).parent / "rules"
#: The YAML files parsed once into JSON (:func:`write_mirror` writes it): used while the SHA-256 it
#: records of each YAML file still matches, since pure-Python YAML took 0.2-1 s of every run's start-up.
MIRROR = RULES_DIR / "catalogue.json"
_REQUIRED = ("code", "name", "summary", "why", "fix", "severity", "examples")


@dataclass(frozen=True)
class Rule:
    """Metadata of one rule: code (S1xx structure, P2xx inputs, C3xx config, N4xx numeric),
    kebab-case name, one-line summary, why it matters, how to fix it, default severity,
    and examples (``{"fail": [...], "pass": [...]}``, each a dict with ``stages``: a list of
    ``{"role": ..., "model": <onnx.parser text>}``; a failing example may state ``severity`` where the finding
    raises the default, e.g. P209 when every sample is blank)."""

    code: str
    name: str
    summary: str
    why: str
    fix: str
    severity: str
    examples: dict[str, list[dict[str, Any]]] = field(hash=False, compare=False)
    source: str = ""


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
            rules[e["code"]] = Rule(code=e["code"], name=e["name"], summary=" ".join(str(e["summary"]).split()),
                                    why=" ".join(str(e["why"]).split()), fix=" ".join(str(e["fix"]).split()), severity=e["severity"],
                                    examples=_plain(e["examples"]), source=f.name)
    return dict(sorted(rules.items()))


def _digests(files: list[Path]) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _parse(files: list[Path]) -> list[tuple[Path, Any]]:
    """Each YAML file's entries, read with the safe pure-Python loader (RuleCatalogueError on invalid YAML)."""
    yaml = YAML(typ="safe", pure=True)
    out = []
    for f in files:
        try:
            out.append((f, yaml.load(f.read_text(encoding="utf-8")) or []))
        except YAMLError as e:
            raise RuleCatalogueError(f"{f}: invalid YAML ({e.__class__.__name__})") from e
    return out


def _entries(d: Path) -> list[tuple[Path, Any]]:
    """(file, its list of entries) per ``*.yaml`` of ``d`` in name order: from :data:`MIRROR` when ``d`` is the
    package's rules directory and the mirror records the current SHA-256 of every file, else parsed."""
    files = sorted(d.glob("*.yaml"))
    if d.resolve() == RULES_DIR.resolve():
        try:
            mirror = json.loads(MIRROR.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            mirror = None
        if isinstance(mirror, dict) and mirror.get("sha256") == _digests(files):
            return [(f, mirror["files"][f.name]) for f in files]
    return _parse(files)


def write_mirror() -> Path:
    """Parse the package's rule YAML files and write :data:`MIRROR` (their entries and SHA-256 per file); returns
    its path. Run after editing a rule file (``python -c "from graphaudit.catalogue import write_mirror; write_mirror()"``); a stale mirror is only slower."""
    files = sorted(RULES_DIR.glob("*.yaml"))
    mirror = {"sha256": _digests(files), "files": {f.name: entries for f, entries in _parse(files)}}
    MIRROR.write_text(json.dumps(mirror, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    return MIRROR
