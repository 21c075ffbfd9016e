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


def test_output_directories_that_cannot_be_created_are_refused_before_any_work(tmp_path, two_stages):  # noqa: F811
    """A dangling symlink as --out used to print the whole report, then "cannot create the directory (File
    exists)"; /proc/rep ran every sample first. Now: refused first (nothing on stdout), saying what is wrong."""
    dangling = tmp_path.parent / f"{tmp_path.name}_dangling"
    dangling.symlink_to(tmp_path.parent / "no_such_dir_f10")
    p = run("explain", str(tmp_path), "--out", str(dangling))
    assert_user_error(p, f"{dangling}: is a dangling symbolic link (to {tmp_path.parent / 'no_such_dir_f10'})")
    assert p.stdout == ""
    p = run("explain", str(tmp_path), "--out", str(dangling / "sub"))
    assert_user_error(p, f"{dangling} is a dangling symbolic link")
    if Path("/proc/self").is_dir():  # Linux: procfs takes no new directories, not even from root
        p = run("explain", str(tmp_path), "--out", "/proc/graphaudit_report")
        assert_user_error(p, "/proc/graphaudit_report: cannot be created under /proc: ")
        assert p.stdout == ""


def test_check_output_dir_names_the_obstacle(tmp_path):
    from graphaudit.fileio import check_output_dir

    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(GraphAuditError, match=f"^{f}/a/b: {f} is not a directory$"):
        check_output_dir(f / "a" / "b")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        try:  # root ignores permission bits: then the directory can be created, and must be accepted
            (ro / "x").mkdir()
            (ro / "x").rmdir()
            writable = True
        except PermissionError:
            writable = False
        if writable:
            assert check_output_dir(ro / "new") == ro / "new"
        else:
            with pytest.raises(GraphAuditError, match=f"^{ro}/new: cannot be created under {ro}: Permission denied$"):
                check_output_dir(ro / "new")
        assert not (ro / "new").exists() and list(ro.iterdir()) == []  # the probe leaves nothing
    finally:
        ro.chmod(0o755)
    assert check_output_dir(tmp_path / "n1" / "n2") == tmp_path / "n1" / "n2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "ro"]
