"""Output places refused before any work: empty names, places that cannot be created."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphaudit.errors import GraphAuditError
from graphaudit.outputs import plan_reports

from .test_cli import assert_user_error, run, two_stages  # noqa: F401 - the fixture


@pytest.mark.parametrize("args, needle", [
    (["explain", "{s}", "--out", ""], "argument --out: empty directory name"),
    (["explain", "{s}", "--html", ""], "argument --html: empty file name"),
    (["explain", "{s}", "--json", ""], "argument --json: empty file name"),
    (["diff", "{a}", "{b}", "--json", ""], "argument --json: empty file name"),
    (["render", "{s}", "-o", ""], "argument -o/--output: empty file name"),
    (["lower", "{a}", "-o", ""], "argument -o/--output: empty file name"),
])
def test_empty_output_names_are_refused_and_nothing_is_written(tmp_path, two_stages, args, needle):  # noqa: F811
    """``--out ""`` used to be Path("") == ".": report.html and report.json landed beside the stage files, and
    ``--html ""`` silently fell back to OUT/report.html."""
    before = sorted(p.name for p in tmp_path.iterdir())
    a, b = two_stages
    p = run(*[x.format(s=".", a=a.name, b=b.name) for x in args], cwd=tmp_path)
    assert_user_error(p, needle)
    assert p.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_plan_reports_refuses_empty_names():
    with pytest.raises(GraphAuditError, match="^out: empty directory name$"):
        plan_reports("", protect=[Path("x.onnx")])
    with pytest.raises(GraphAuditError, match="^--out: empty directory name$"):
        plan_reports("", option="--out DIR")
    with pytest.raises(GraphAuditError, match="html: empty file name"):
        plan_reports("/tmp/somewhere", html="")
