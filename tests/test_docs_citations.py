"""The repository stands alone: every document the code and the tests cite is in docs/, with the section or case
cited, and no citation points at a file outside the repository."""

from __future__ import annotations

import re

import pytest

from .conftest import REPO

SOURCES = sorted([p for d in ("graphaudit", "tests", "samples", "bench", "docs") for p in (REPO / d).rglob("*")
                  if p.suffix in (".py", ".md", ".yaml", ".sh") and "build" not in p.relative_to(REPO).parts]
                 + [REPO / "README.md", REPO / "setup.sh", REPO / ".ci" / "run"])
CITATION = re.compile(r"docs/(HORIZON|CASES|INPUT_CONTRACTS)\.md,?\s+(sections?|cases?)\s+([0-9a-z]+)"
                      r"((?:\s*(?:,|and|-)\s*[0-9]+[a-z]?)*)")


def _headings(doc: str) -> set[str]:
    """Section numbers ("1", "6b") or case numbers ("12") of a document's headings."""
    text = (REPO / "docs" / f"{doc}.md").read_text(encoding="utf-8")
    return set(re.findall(r"^#{2,3} (?:Case )?([0-9]+[a-z]?)\b", text, flags=re.M))


def _cited() -> list[tuple[str, str, str]]:
    found = []
    for path in SOURCES:
        text = re.sub(r"\s+", " ", path.read_text(encoding="utf-8", errors="replace"))
        for m in CITATION.finditer(text):
            numbers = [m.group(3)] + re.findall(r"[0-9]+[a-z]?", m.group(4))
            found += [(str(path.relative_to(REPO)), m.group(1), n) for n in numbers]
    return found


def test_cited_sections_exist():
    cited = _cited()
    assert len(cited) > 50
    missing = [c for c in cited if c[2] not in _headings(c[1])]
    assert not missing, missing


@pytest.mark.parametrize("pattern", [r"/work/", r"\.\./shared", r"(?<![\w/])(HORIZON|CASES|DESIGN)\.md"])
def test_no_citation_leaves_the_repository(pattern):
    bad = [str(p.relative_to(REPO)) for p in SOURCES if p.name != "test_docs_citations.py"
           and re.search(pattern, p.read_text(encoding="utf-8", errors="replace"))]
    assert not bad, bad
