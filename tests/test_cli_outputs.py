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


@pytest.fixture
def cls_stages(tmp_path, samples):
    """Copies of the bundled onnxruntime PP-OCR cls stage files in tmp_path/stages (given as files below)."""
    import shutil

    d = tmp_path / "stages"
    d.mkdir()
    for name in ("ppocr_cls_original.onnx", "ppocr_cls_qdq.onnx"):
        shutil.copy(samples / "ort" / "ppocr_cls" / name, d / name)
    return d


def _tree(d: Path) -> dict:
    return {p.relative_to(d): p.read_bytes() if p.is_file() else None for p in sorted(d.rglob("*"))}


@pytest.mark.parametrize("cmd", [
    ("explain", "{a}", "{b}", "--out", "{o}"),
    ("explain", "{a}", "{b}", "--no-report", "--json", "{o}.json"),
    ("explain", "{a}", "{b}", "--no-report", "--html", "{o}.html"),
    ("explain", "{a}", "{b}", "--no-report", "--model-explorer", "{o}"),
    ("diff", "{a}", "{b}", "--json", "{o}.json"),
    ("compare", "{a}", "{b}", "--random", "1", "--json", "{o}.json"),
    ("bisect", "{a}", "{b}", "--random", "1", "--json", "{o}.json"),
    ("render", "{a}", "{b}", "-o", "{o}.svg"),
    ("check-inputs", "{b}", "--data", "{data}", "--json", "{o}.json"),
    ("lower", "{b}", "-o", "{o}.onnx"),
])
@pytest.mark.parametrize("where", ["", "sub/"])
def test_no_output_lands_in_the_directory_of_stage_files_given(cls_stages, samples, cmd, where):
    """Given as files, the stage files' directory was not protected as a stage directory given is: ``explain a b
    --out DIR/rep`` wrote the reports beside the toolchain's stage files (and --json, --html, --model-explorer,
    render -o, lower -o, check-inputs/bisect/diff/compare --json there too). Now refused before any work, one line
    naming the output and the stage file; the stage directory is left as it was."""
    a, b = cls_stages / "ppocr_cls_original.onnx", cls_stages / "ppocr_cls_qdq.onnx"
    before = _tree(cls_stages)
    o = cls_stages / f"{where}out"
    p = run(*[x.format(a=a, b=b, o=o, data=samples / "data" / "ppocr_cls" / "x") for x in cmd])
    given = a if cmd[0] not in ("check-inputs", "lower") else b
    out = cmd[-1].format(o=o)
    assert_user_error(p, f"{out}: is or lies inside {cls_stages}, the directory of the stage file {given}; "
                         "refusing to write there")
    assert p.stdout == ""
    assert _tree(cls_stages) == before


def test_outputs_elsewhere_and_relative_runs_still_work(cls_stages, tmp_path):
    """Typed outside the stage files' directory, outputs are written; run from that directory, a typed relative
    place inside it is refused (as the default ./graphaudit_report/ is) and ``../`` is honoured."""
    a, b = "ppocr_cls_original.onnx", "ppocr_cls_qdq.onnx"
    before = _tree(cls_stages)
    assert_user_error(run("explain", a, b, "--out", "rep", cwd=cls_stages),
                      f"rep: is or lies inside ., the directory of the stage file {a}")
    assert_user_error(run("lower", b, "-o", "low.onnx", cwd=cls_stages),
                      f"low.onnx: is or lies inside ., the directory of the stage file {b}")
    assert _tree(cls_stages) == before
    p = run("explain", a, b, "--out", "../rep", "--json", "../r.json", cwd=cls_stages)
    assert p.returncode in (0, 1), p.stderr
    assert (tmp_path / "rep" / "report.html").is_file() and (tmp_path / "r.json").is_file()
    p = run("lower", b, "-o", "../low.onnx", cwd=cls_stages)
    assert p.returncode == 0 and (tmp_path / "low.onnx").is_file(), p.stderr
    assert _tree(cls_stages) == before


def test_write_reports_keeps_out_of_the_stage_files_directory(cls_stages, tmp_path):
    """The library as the CLI: an ``out`` typed into the directory of a stage file given is refused; a project
    directory holding only the float model given as source takes the reports."""
    import shutil

    import graphaudit

    qdq = cls_stages / "ppocr_cls_qdq.onnx"
    au = graphaudit.audit([cls_stages / "ppocr_cls_original.onnx", qdq])
    with pytest.raises(GraphAuditError, match=f"^{cls_stages}/rep: is or lies inside {cls_stages}, the directory of "
                                              "the stage file"):
        graphaudit.write_reports(au, cls_stages / "rep")
    assert not (cls_stages / "rep").exists()
    project = tmp_path / "project"
    project.mkdir()
    src = shutil.copy(cls_stages / "ppocr_cls_original.onnx", project / "float.onnx")
    au = graphaudit.audit([qdq], source=src)
    assert [p.name for _w, p in graphaudit.write_reports(au, project / "rep")] == ["report.json", "report.html"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="Linux: procfs takes no new files, not even from root")
@pytest.mark.parametrize("cmd", [
    ("explain", "{a}", "{b}", "--no-report", "--json", "/proc/r.json"),
    ("explain", "{a}", "{b}", "--no-report", "--html", "/proc/r.html"),
    ("diff", "{a}", "{b}", "--json", "/proc/r.json"),
    ("compare", "{a}", "{b}", "--random", "1", "--json", "/proc/r.json"),
    ("bisect", "{a}", "{b}", "--random", "1", "--json", "/proc/r.json"),
    ("render", "{a}", "{b}", "-o", "/proc/r.svg"),
    ("check-inputs", "{b}", "--data", "{data}", "--json", "/proc/r.json"),
    ("lint", "{cfg}", "--data", "{missing}", "-o", "/proc/r.txt"),  # the missing --data would be said after
    ("lower", "{quantized}", "-o", "/proc/r.onnx"),  # fixed-point ops: lowering fails, after the output check
])
def test_output_files_that_cannot_be_written_are_refused_before_any_work(cls_stages, samples, cmd):
    """An output file in a directory no file can be written in (here /proc, which refuses even root) was found out
    after the whole run: the report printed, then 'cannot write'; lint and lower did their work (and said its error)
    first. Now: one line naming the path and the directory, nothing on stdout."""
    a, b = cls_stages / "ppocr_cls_original.onnx", cls_stages / "ppocr_cls_qdq.onnx"
    hb = samples / "hb" / "mtcnn_pnet_bernoulli2"
    p = run(*[x.format(a=a, b=b, data=samples / "data" / "ppocr_cls" / "x", cfg=hb / "config.yaml",
                       missing=cls_stages / "no_such_dir", quantized=hb / "model_output" / "mtcnn_pnet_quantized_model.onnx")
              for x in cmd])
    assert_user_error(p, f"{cmd[-1]}: cannot write in /proc: ")
    assert p.stdout == ""


def test_report_files_of_an_existing_out_directory_are_checked_before_any_work(cls_stages, tmp_path):
    """--out DIR whose report.json (or report.html) is a directory: the report was printed, then the write failed."""
    for name in ("report.json", "report.html"):
        out = tmp_path / f"out_{name}"
        (out / name).mkdir(parents=True)
        p = run("explain", str(cls_stages / "ppocr_cls_original.onnx"), str(cls_stages / "ppocr_cls_qdq.onnx"),
                "--out", str(out))
        assert_user_error(p, f"{out / name}: is a directory")
        assert p.stdout == "" and [q.name for q in out.iterdir()] == [name]
