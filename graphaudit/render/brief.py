"""The short terminal view of a report (the default of ``graphaudit explain``) and what every explain opens with.

Every explain opens with the caution of a ``--random`` run and the verdict (:func:`render_opening`); the short view
then gives one screen: what the run was given, a compact stage table, one line of change counts per transition, one
line of output agreement per measured transition, and one line per finding (:func:`render_brief`). ``-v`` prints the
full lists instead (:func:`graphaudit.render.console.render_explain`). The report given here is already terminal-safe
(:func:`graphaudit.render.console.safe_report`).
"""

from __future__ import annotations

import math

from rich.console import Console, Group
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..numeric.summary import least_top1
from ..report import AuditReport, RunInfo
from .styles import CAUSE_TAG, KIND_STYLE, SEV_STYLE, fmt

__all__ = ["render_opening", "render_brief", "render_brief_findings", "run_line", "RANDOM_CAUTION", "MAX_BRIEF_FINDINGS",
           "MAX_BRIEF_VERDICT"]

#: The one-line caution of a run on random samples (``--random``).
RANDOM_CAUTION = "random samples: they show where stages part, not accuracy; give --data"

#: Findings listed by the short view (the rest are counted; ``-v`` lists them all).
MAX_BRIEF_FINDINGS = 12

#: Verdict lines shown by the short view (the rest are counted; ``-v`` shows them all).
MAX_BRIEF_VERDICT = 6

#: Custom ops named per stage in the short stage table.
_MAX_OPS = 4


def render_opening(report: AuditReport, console: Console, verbose: bool = False) -> None:
    """The caution of a ``--random`` run, then the verdict: each line's text, its evidence and what to do."""
    if report.run is not None and report.run.random:
        console.print(Text(f"Caution: {report.run.random} {RANDOM_CAUTION}", style="bold yellow"))
    lines = report.verdict or []
    if not lines:
        return
    console.print(Text("Verdict", style="bold"))
    shown = lines if verbose else lines[:MAX_BRIEF_VERDICT]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for v in shown:
        label, style = CAUSE_TAG.get(v.cause, (v.cause.upper(), "bold"))
        parts: list = [Text(v.text)]
        if v.evidence:
            parts.append(Padding(Text(v.evidence, style="dim"), (0, 0, 0, 2)))
        if v.action:
            do = Table.grid(padding=(0, 1))
            do.add_column(no_wrap=True)
            do.add_column(overflow="fold")
            do.add_row(Text("do:", style="bold"), Text(v.action))
            parts.append(Padding(do, (0, 0, 0, 2)))
        grid.add_row(Text(f" {label} ", style=style), Group(*parts))
    console.print(grid)
    if len(lines) > len(shown):
        console.print(Text(f"  ... {len(lines) - len(shown)} more verdict lines (-v)", style="dim"))


def run_line(report: AuditReport, console: Console, blank_before: bool = True) -> None:
    """What the run was given: config (linted), data or random samples, toolchain log (one line; a terminal wraps
    it, a file keeps it whole)."""
    run = report.run or RunInfo()
    if blank_before:
        console.print()
    parts = []
    if run.config:
        n = sum(1 for f in report.findings if f.code.startswith("C"))
        parts.append(f"config {run.config} ({run.config_family}) linted against the stages: "
                     f"{n or 'no'} finding{'s' if n != 1 else ''}")
    if run.numeric_skipped:
        given = (f"data {run.data}" if run.data else f"{run.random} random samples" if run.random
                 else "the config's cal_data_dir" if run.data_from_config else None)
        parts.append(f"{given} (numeric comparison skipped, see below)" if given else
                     f"numeric comparison not run: {run.numeric_skipped}")
    elif run.data:
        n = run.samples_used
        used = f", {n} sample{'s' if n != 1 else ''}" if n else ""
        src = " (the config's cal_data_dir" + used + ")" if run.data_from_config else (f" ({used[2:]})" if used else "")
        parts.append(f"data {run.data}{src}")
    elif run.random:
        parts.append(f"{run.random} random samples")
    else:
        parts.append("numeric comparison not run (give --data, --config with a cal_data_dir, or --random)")
    if run.log:
        parts.append(f"toolchain log {run.log}")
    labels = sorted(set((run.runtimes or {}).values()))
    if labels:
        parts.append("measured by " + ", ".join(labels) + f" ({', '.join(run.runtimes or {})})")
    if console.is_terminal:
        console.print(Text("Run: " + "; ".join(parts), style="dim"))
    else:
        console.print(Text("Run: " + "; ".join(parts), style="dim"), no_wrap=True, overflow="ignore", crop=False)
    if run.log_skipped:  # found logs left out (unreadable, of another model): said, and the report goes on
        console.print(Text(f"Toolchain log not read: {run.log_skipped}", style="yellow"), no_wrap=True,
                      overflow=line_overflow(console), crop=console.is_terminal)


def line_overflow(console: Console) -> str:
    """How a one-line item that is longer than the screen ends: cut with "…" on a terminal, kept whole when the
    output goes to a file or a pipe (the same lines, nothing lost; an editor or ``less -S`` shows them)."""
    return "ellipsis" if console.is_terminal else "ignore"


def render_brief(report: AuditReport, console: Console) -> None:
    """The short view after the opening, up to the toolchain section: run, stages, changes, numeric comparison."""
    run_line(report, console)
    _stages(report, console)
    _changes(report, console)
    _numeric(report, console)


def _stages(report: AuditReport, console: Console) -> None:
    t = Table(title="Stages", title_justify="left", title_style="bold", box=None, pad_edge=False)
    for col in ("#", "stage", "role", "nodes", "not runnable in stock onnxruntime"):
        t.add_column(col, no_wrap=col != "not runnable in stock onnxruntime", overflow="ellipsis")
    for i, s in enumerate(report.stages):
        ops = [f"{k.split('::')[1]} x{v}" for k, v in s.custom_ops.items()]
        more = f", ... {len(ops) - _MAX_OPS} more" if len(ops) > _MAX_OPS else ""
        t.add_row(str(i), escape(s.name), s.role, str(s.nodes), escape(", ".join(ops[:_MAX_OPS]) + more or "-"))
    console.print(t)


def _changes(report: AuditReport, console: Console) -> None:
    if not report.transitions:
        return
    console.print(Text("Changes per transition (-v lists them)", style="bold"))
    t = Table(box=None, pad_edge=False, show_header=False)
    t.add_column(no_wrap=True, min_width=max(len(f"{tr.a} -> {tr.b}") for tr in report.transitions))
    t.add_column(no_wrap=True, overflow="ellipsis")
    for tr in report.transitions:
        counts = Text()
        for kind, n in tr.counts.items():
            if n:
                counts.append(", " if counts else "")
                counts.append(f"{n} {kind}", style=KIND_STYLE.get(kind, ""))
        cov = tr.coverage
        counts.append(f"; nodes aligned {cov['a_ratio']:.0%} / {cov['b_ratio']:.0%}", style="dim")
        t.add_row(escape(f"{tr.a} -> {tr.b}"), counts)
    console.print(t)


def _numeric(report: AuditReport, console: Console) -> None:
    if not report.numeric:
        if report.run and report.run.numeric_skipped:
            console.print(Text(f"Numeric comparison skipped: {report.run.numeric_skipped}", style="bold yellow"),
                          no_wrap=True, overflow=line_overflow(console), crop=console.is_terminal)
        return
    n = max((o.samples for tr in report.numeric for o in (tr.outputs or tr.tensors)), default=0) or (
        report.run.samples_used if report.run is not None and report.run.samples_used else 0)  # integer outputs
    console.print(Text(f"Numeric comparison on {n} sample{'s' if n != 1 else ''}: outputs against the stage before "
                       "(-v: tensors)", style="bold"))
    ref = report.numeric[0].reference if len(report.numeric) > 1 else None
    heads = ["transition", "cosine", "SQNR dB", "top-1"] + ([f"vs {ref} dB"] if ref else [])
    rows = []
    for tr in report.numeric:
        worst = min(tr.outputs, key=lambda o: _key(o.cosine), default=None)
        top = least_top1(tr.outputs)  # class-score outputs only, named when the cosine and SQNR may be another's
        top1 = (f"{top[1][0]}/{top[1][1]}" + (f" ({top[0]})" if len(tr.outputs) > 1 else "")) if top else "-"
        fd = tr.first_divergence
        if fd is None:
            crit = f"cosine {tr.threshold}" + (f" or SQNR {tr.sqnr_threshold:g} dB"
                                               if tr.sqnr_threshold is not None else "")
            div = Text(f"none (no tensor below {crit})", style="green")
            if tr.inner_divergence:
                k = len(tr.inner_divergence)
                div = Text(f"none; {k} tensor(s) below {crit} heal at the linear op reading them, e.g. "
                           f"{tr.inner_divergence[0]}: a scale the toolchain folded forward, not a loss", style="green")
        else:
            node = fd.b_node or fd.b_tensor
            div = Text(f"{node} (cosine {fmt(fd.cosine, '.6f')}, SQNR {fmt(fd.sqnr_db, '.1f')} dB)", style="red")
        many = f" (worst of {len(tr.outputs)})" if len(tr.outputs) > 1 else ""
        acc = [fmt(min((o.sqnr_db for o in tr.vs_reference), key=_sqnr_key), ".1f") if tr.vs_reference else "-"
               ] if ref else []
        rows.append(([f"{tr.a} -> {tr.b}", fmt(worst.cosine if worst else None, ".6f") + many,
                      fmt(worst.sqnr_db if worst else None, ".1f"), top1, *acc], div))
    t = Table(box=None, pad_edge=False)
    for k, head in enumerate(heads):  # figures are never cut: only the first divergence gives way on a narrow screen
        t.add_column(head, no_wrap=True, min_width=max(len(head), *(len(r[0][k]) for r in rows)))
    t.add_column("first divergence", no_wrap=True, overflow="ellipsis")
    for cells, div in rows:
        t.add_row(*(escape(c) for c in cells), div)
    console.print(t)
    for why in (report.run.numeric_not_run if report.run else []):
        console.print(Text(f"not run: {why}", style="yellow"), no_wrap=True, overflow=line_overflow(console),
                      crop=console.is_terminal)


def _sqnr_key(x) -> float:
    """Sort key of an SQNR, lowest first; nan first, missing last."""
    if x is None:
        return math.inf
    return float(x) if not isinstance(x, str) or x != "nan" else -math.inf


def _key(x) -> float:
    """Sort key of a cosine, lowest first; nan first, missing last."""
    if x is None:
        return 2.0
    if isinstance(x, str):
        return -2.0 if x == "nan" else 2.0
    return x


def render_brief_findings(report: AuditReport, console: Console) -> None:
    """One line per finding (code, severity, stage, message cut to the line), most serious first."""
    findings = report.findings
    if not findings:
        console.print("\n[green]No findings.[/]")
        return
    console.print(Text("\nFindings (most serious first; -v: full messages and fixes)", style="bold"))
    for f in findings[:MAX_BRIEF_FINDINGS]:
        where = f"[{f.stage}] " if f.stage else ""
        console.print(Text.assemble((f"{f.severity.upper():8}", SEV_STYLE[f.severity]), (f"{f.code} ", "bold"),
                                    (where, "dim"), " ".join(f.message.split())),
                      no_wrap=True, overflow=line_overflow(console), crop=console.is_terminal)
    rest = findings[MAX_BRIEF_FINDINGS:]
    if rest:
        by_sev = ", ".join(f"{sum(1 for f in rest if f.severity == s)} {s}" for s in SEV_STYLE
                           if any(f.severity == s for f in rest))
        console.print(Text(f"... {len(rest)} more findings ({by_sev}): -v or the HTML report", style="dim"))
