"""Rich terminal rendering of reports and of the rule catalogue."""

from __future__ import annotations

import json
from collections import defaultdict

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..catalogue import Rule
from ..report import AuditReport, Transition
from ..toolchains.ops import HORIZON_DOMAIN
from .brief import render_brief, render_brief_findings, render_opening, run_line
from .metric import render_metric
from .styles import KIND_STYLE as _KIND_STYLE
from .styles import SEV_STYLE as _SEV_STYLE
from .styles import fmt as _fmt
from .styles import cosine_order
from .text import needs_escape, print_line, printable

#: Fused changes listed per pattern without --verbose (the rest counted: "... and N more"); the report's JSON lists
#: every one. A pattern of 12,500 fusions (a generated 100k-node model) made one console line of 733 KB.
FUSED_SHOWN = 20

#: The change kinds :func:`_transition` lists by pattern (the others are counted; unmatched changes get lines of their
#: own), without and with --verbose.
_BY_PATTERN = ("fused", "replaced", "modified")
_BY_PATTERN_VERBOSE = _BY_PATTERN + ("removed", "inserted")

__all__ = ["render_explain", "render_diff", "render_rules", "render_numeric", "render_findings", "render_input_stats",
           "render_toolchain"]


def _stage_table(report: AuditReport) -> Table:
    t = Table(title="Stages", title_justify="left", show_lines=False)
    for col in ("#", "stage", "role", "file", "nodes", "opsets", "not runnable in onnxruntime"):
        t.add_column(col, overflow="fold")
    for i, s in enumerate(report.stages):
        opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in s.opsets.items()
                           if d in ("", HORIZON_DOMAIN) or any(k.startswith(f"{d}::") for k in s.custom_ops))
        custom = ", ".join(f"{k.split('::')[1]} x{v}" for k, v in s.custom_ops.items()) or "-"
        t.add_row(str(i), escape(s.name), s.role, escape(s.path.rsplit("/", 1)[-1]), str(s.nodes), escape(opsets),
                  escape(custom))
    return t


def _transition(console: Console, tr: Transition, verbose: bool) -> None:
    cov = tr.coverage
    print_line(console, Text.assemble(("\n", ""), (f"{tr.a} -> {tr.b}", "bold"),
                                f"   aligned or classified: {cov['a_accounted']}/{cov['a_nodes']} nodes "
                                f"({cov['a_ratio']:.1%}) of {tr.a}, {cov['b_accounted']}/{cov['b_nodes']} "
                                f"({cov['b_ratio']:.1%}) of {tr.b}"))
    t = Table(show_header=True, box=None, pad_edge=False)
    t.add_column("change", no_wrap=True)
    t.add_column("count", justify="right")
    t.add_column("patterns", overflow="fold")
    for kind, n in tr.counts.items():
        if not n:
            continue
        pats = tr.patterns.get(kind, {})
        shown = list(pats.items())[:8]
        more = f", ... {len(pats) - 8} more" if len(pats) > 8 else ""
        t.add_row(Text(kind, _KIND_STYLE[kind]), str(n), escape(", ".join(f"{p} x{c}" for p, c in shown) + more))
    console.print(t)
    if tr.opset_delta:
        print_line(console, "  opsets: " + escape(", ".join(f"{d or 'ai.onnx'} {va or '-'} -> {vb or '-'}"
                                                       for d, (va, vb) in tr.opset_delta.items())))
    if tr.op_delta:
        print_line(console, "  op count delta: " + escape(", ".join(f"{op} {d:+d}" for op, d in tr.op_delta.items())))
    by_pattern: dict[str, list[str]] = defaultdict(list)
    listed = _BY_PATTERN_VERBOSE if verbose else _BY_PATTERN
    for c in tr.changes:
        if c.kind in listed:
            a_names = "+".join(n for n, op in zip(c.a_nodes, c.a_ops) if op != "Constant") or "-"
            b_names = "+".join(c.b_nodes) or "-"
            what = f" ({c.evidence})" if c.kind == "modified" else ""
            by_pattern[f"{c.kind}: {c.pattern}"].append(f"{a_names} -> {b_names}{what}")
    for pat, items in by_pattern.items():
        limit = len(items) if verbose else FUSED_SHOWN if pat.startswith("fused") else 6
        tail = f" ... and {len(items) - limit} more (--verbose)" if len(items) > limit else ""
        print_line(console, f"  [bold]{escape(pat)}[/] ({len(items)}): " + escape("; ".join(items[:limit])) + tail,
                      highlight=False)
    for c in tr.changes:
        if c.kind == "unmatched":
            print_line(console, Text.assemble(("  unmatched ", "bold red"), f"{c.pattern[:120]}: {c.evidence}"))


def render_findings(report: AuditReport, console: Console, verbose: bool = False,
                    codes: tuple[str, ...] | None = None) -> None:
    """Print the findings (all, or those with the given codes), most serious first, each fix once (per code and
    text: a variant of a rule with its own fix, such as P209 on NaN values, shows its own)."""
    _findings(safe_report(report), console, verbose, codes)


def _findings(report: AuditReport, console: Console, verbose: bool = False,
              codes: tuple[str, ...] | None = None) -> None:
    findings = [f for f in report.findings if codes is None or f.code in codes]
    if not findings:
        print_line(console, "\n[green]No findings.[/]")
        return
    print_line(console, Text("\nFindings (most serious first)", style="bold"))
    fixed: set[tuple[str, str]] = set()
    for f in findings:
        where = f" [{f.stage}]" if f.stage else ""
        print_line(console, Text.assemble((f"{f.severity.upper():8}", _SEV_STYLE[f.severity]), (f"{f.code} ", "bold"),
                                    (where + " ", "dim"), f.message))
        if (f.severity != "info" or verbose) and (f.code, f.fix) not in fixed:  # a variant's own fix shows too
            fixed.add((f.code, f.fix))
            print_line(console, Text("          fix: " + " ".join(f.fix.split()), style="dim"))


def _printable(x):
    """``x`` (a report dict) with every string's control characters escaped (:func:`printable`): names and
    messages come from the user's files and must not drive the terminal (escape sequences, bidi overrides)."""
    if isinstance(x, str):
        return printable(x)
    if isinstance(x, dict):
        return {k: _printable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_printable(v) for v in x]
    return x


def safe_report(report: AuditReport) -> AuditReport:
    """A copy of ``report`` fit for a terminal (see :func:`_printable`); ``report`` itself when no string in it
    needs escaping (one C-speed JSON pass instead of a copy: a 50,000-node stage makes a report of 50,000 tensor
    entries, whose copy and re-validation took most of a run's time)."""
    d = report.to_dict()
    # JSON writes C0 controls as backslash escapes and the others as they are: a backslash or a control means a copy
    text = json.dumps(d, ensure_ascii=False, default=str)
    if "\\" not in text and (text.isascii() and "\x7f" not in text or not needs_escape(text)):
        return report  # an ASCII text with no backslash can hold no control but DEL (printable's only other one)
    return AuditReport.from_dict(_printable(d))


def render_explain(report: AuditReport, console: Console, verbose: bool = False) -> None:
    """Print the explanation: the verdict first, then one screen (stage table, change counts, output agreement,
    one line per finding) or, ``verbose``, the full lists (changes, tensors, worst changes, findings with fixes)."""
    report = safe_report(report)
    if report.title:
        console.rule(f"[bold]{escape(report.title)}")
    render_opening(report, console, verbose)
    if not verbose:
        render_brief(report, console)
        render_metric(report, console)
        _toolchain(report, console, False, top=5)
        render_brief_findings(report, console)
        return
    console.print(_stage_table(report))
    run_line(report, console)
    for tr in report.transitions:
        _transition(console, tr, verbose)
    _numeric(report, console)  # report already made safe above
    render_metric(report, console)
    _toolchain(report, console, verbose)
    _findings(report, console, verbose)


def render_diff(report: AuditReport, console: Console, verbose: bool = False) -> None:
    """Print the changes per stage pair only (the transitions made safe as :func:`safe_report` makes a report)."""
    for tr in report.transitions:
        _transition(console, tr if _plain(tr, verbose) else Transition.from_dict(_printable(tr.to_dict())), verbose)



def _plain(tr: Transition, verbose: bool = True) -> bool:
    """Whether no string of ``tr`` that :func:`_transition` prints (keys included) holds a character
    :func:`printable` escapes: its names joined in one text and tested at C speed, without the dict copy and JSON
    text of :func:`safe_report`. The changes of kinds only counted are not printed and not read (the 100k-node
    pair's 150,000 inserted and kept changes took 0.4 s here)."""
    parts = [tr.a, tr.b, *tr.coverage, *tr.counts, *tr.patterns, *tr.op_delta, *tr.opset_delta]
    for pats in tr.patterns.values():
        parts += pats
    add = parts.append
    extend = parts.extend
    listed = (_BY_PATTERN_VERBOSE if verbose else _BY_PATTERN) + ("unmatched",)
    for c in tr.changes:
        if c.kind not in listed:
            continue
        add(c.kind)
        add(c.pattern)
        add(c.evidence)
        extend(c.a_nodes)
        extend(c.b_nodes)
        extend(c.a_ops)
        extend(c.b_ops)
        extend(c.tensors)
    try:
        text = " ".join(parts)
    except TypeError:  # a value that is not a string (not written by graphaudit): the JSON test of safe_report
        text = json.dumps(tr.to_dict(), ensure_ascii=False, default=str)
        return "\\" not in text and not needs_escape(text)
    return text.isprintable() or not needs_escape(text)


def render_rules(rules: dict[str, Rule], console: Console, explain: str | None = None) -> None:
    """List the rule catalogue, or print one rule in full."""
    if explain:
        r = rules[explain]
        print_line(console, Text.assemble((f"{r.code} ", "bold"), (r.name, "bold cyan"), f"  ({r.severity})"))
        console.print(r.summary)
        print_line(console, Text("\nWhy it matters", style="bold"))
        console.print(r.why)
        print_line(console, Text("Fix", style="bold"))
        console.print(r.fix)
        for variant, text in r.fixes.items():
            print_line(console, Text(f"Fix ({variant} variant)", style="bold"))
            console.print(text)
        print_line(console, Text(f"Examples: {len(r.examples.get('fail', []))} failing, "
                           f"{len(r.examples.get('pass', []))} passing (graphaudit/rules/{r.source})", style="dim"))
        return
    t = Table(title="graphaudit rules", title_justify="left")
    for col in ("code", "name", "severity", "summary"):
        t.add_column(col, overflow="fold")
    for r in rules.values():
        t.add_row(r.code, r.name, Text(r.severity, _SEV_STYLE[r.severity]), r.summary)
    console.print(t)


def render_numeric(report: AuditReport, console: Console) -> None:
    """Print the numeric comparison: what the run was given (config, data, samples, runtime), then per transition
    the outputs, the first divergence and the worst regions."""
    rep = safe_report(report)
    run_line(rep, console, blank_before=False)
    _numeric(rep, console)
    render_metric(rep, console)


def _numeric(report: AuditReport, console: Console) -> None:
    if not report.numeric:
        if report.run and report.run.numeric_skipped:
            print_line(console, Text(f"\nNumeric comparison skipped: {report.run.numeric_skipped}", style="bold yellow"))
        return
    print_line(console, Text("\nNumeric comparison (same samples through every stage's input contract)", style="bold"))
    bad = sorted({f.code for f in report.findings if f.code.startswith("P") and f.severity == "error"})
    if bad:
        print_line(console, Text(f"Caution: the data violate the input contract ({', '.join(bad)}, below): these errors "
                           "measure the data as much as the toolchain; fix the data first.", style="bold yellow"))
    for why in (report.run.numeric_not_run if report.run else []):
        print_line(console, Text(f"not run: {why}", style="yellow"))
    for tr in report.numeric:
        wt = tr.worst_tensor
        print_line(console, Text.assemble(("\n", ""), (f"{tr.a} -> {tr.b}", "bold"),
                                    f"   {tr.tensors_compared} aligned tensors compared; lowest cosine "
                                    f"{_fmt(tr.min_cosine, '.6f')} at {wt.b_tensor if wt is not None else '-'}"
                                    + (f" ({_fmt(wt.lsb_max, '.1f')} LSB max)" if wt is not None and wt.lsb_max
                                       else "")))
        t = Table(box=None, pad_edge=False, title_justify="left")
        for col in ("output", "cosine", "SQNR dB", "rel L2", "max abs", "top-1"):
            t.add_column(col, overflow="fold")
        for o in tr.outputs:
            top1 = f"{o.top1_agreement[0]}/{o.top1_agreement[1]}" if o.top1_agreement else "-"
            t.add_row(escape(o.b_tensor), _fmt(o.cosine, ".6f"), _fmt(o.sqnr_db, ".1f"),
                      _fmt(o.rel_l2, ".3g"), _fmt(o.max_abs, ".3g"), top1)
        console.print(t)
        fd = tr.first_divergence
        crit = f"cosine < {tr.threshold}" + (f" or SQNR < {tr.sqnr_threshold:g} dB"
                                              if tr.sqnr_threshold is not None else "")
        if fd is not None:
            print_line(console, Text.assemble(("  first divergence ", "bold red"),
                                        f"({crit}): {fd.b_tensor}{_by_node(fd.b_node)} in {tr.b} (from "
                                        f"{fd.a_tensor}{_by_node(fd.a_node)} in {tr.a}): cosine "
                                        f"{_fmt(fd.cosine, '.6f')}, SQNR {_fmt(fd.sqnr_db, '.1f')} dB; "
                                        f"{fd.change or 'kept node'}"))
        elif tr.inner_divergence:
            k = len(tr.inner_divergence)
            print_line(console, Text(f"  no first divergence; {k} tensor(s) with {crit} heal at the Conv/MatMul "
                                     f"reading them ({', '.join(tr.inner_divergence[:3])}{', ...' if k > 3 else ''}): "
                                     "a scale the toolchain folded forward into its weights, so each pair holds two "
                                     "different quantities, not a loss", style="green"))
        else:
            print_line(console, Text(f"  no tensor with {crit}", style="green"))
        if tr.worst_regions:
            skipped = (f", {tr.regions_skipped} skipped: a boundary tensor without the same value in {tr.a}, or "
                       "not runnable alone" if tr.regions_skipped else "")
            print_line(console, f"  worst changes measured alone ({tr.regions_measured} measured{skipped}):")
            for r in tr.worst_regions[:5]:
                outs = ", ".join(o[1] for o in r.outputs[:2])
                print_line(console, Text(f"    {r.kind}: {r.pattern} -> {outs}: SQNR {_fmt(r.sqnr_db, '.1f')} dB, "
                                   f"cosine {_fmt(r.cosine, '.6f')}"
                                   + (f", max {_fmt(r.lsb_max, '.1f')} LSB" if r.lsb_max else "")))


def _by_node(node: str) -> str:
    """" (node NAME)" after a tensor name: the brief's first-divergence column names the node, this line both."""
    return f" (node {node})" if node else ""


def render_input_contracts(contracts: dict, stage, console: Console) -> None:
    """Print what each graph input of ``stage`` takes (:class:`graphaudit.toolchains.contracts.InputContract`)."""
    t = Table(title=f"Input contract of {printable(stage.name)}", title_justify="left")
    for col in ("input", "dtype", "shape", "layout", "values", "colour"):
        t.add_column(col, overflow="fold")
    for name, ic in contracts.items():
        layout = f"{ic.layout} ({ic.layout_source})" if ic.layout else "-"
        color = f"{ic.color} ({ic.color_source})" if ic.color else "-"
        t.add_row(escape(printable(name)), ic.dtype, str(list(ic.shape)) if ic.shape is not None else "?", escape(layout),
                  escape(ic.value_domain), escape(color))
    console.print(t)


def render_input_stats(stats: dict, stage, console: Console) -> None:
    """Print per-input data statistics (to set beside :func:`render_input_contracts`)."""
    t = Table(title=f"Data for {printable(stage.name)}", title_justify="left")
    for col in ("input", "dtype", "shape", "layout", "samples", "range", "mean per channel", "std per channel"):
        t.add_column(col, overflow="fold")
    for name, st in stats.items():
        t.add_row(escape(printable(name)), st.dtype, str(list(st.shape)), st.layout or "-", str(st.samples),
                  f"[{st.minimum:.4g}, {st.maximum:.4g}]", ", ".join(f"{x:.4g}" for x in st.channel_mean),
                  ", ".join(f"{x:.4g}" for x in st.channel_std))
    console.print(t)


def render_toolchain(report: AuditReport, console: Console, verbose: bool = False, top: int = 10) -> None:
    """Print the toolchain's own per-node similarity beside graphaudit's: worst rows first, ``top`` unless verbose."""
    _toolchain(safe_report(report), console, verbose, top)


def _toolchain(report: AuditReport, console: Console, verbose: bool = False, top: int = 10) -> None:
    tc = report.toolchain
    if tc is None:
        return
    tool = " ".join(x for x in (tc.tool, tc.toolchain_version) if x)
    print_line(console, Text("\nToolchain similarity vs graphaudit", style="bold"))
    print_line(console, Text(f"  {tool}, {tc.source.rsplit('/', 1)[-1]}: {tc.nodes_total} node rows, "
                       f"{tc.nodes_mapped} found in {tc.stage or 'no stage'}"))
    rows = [n for n in tc.nodes if n.cosine is not None]
    if not rows:
        print_line(console, "  the file has no per-node cosine similarity (checker log, aborted run or skip mode)")
    else:
        print_line(console, Text("  toolchain: the calibrated model with fake quantization on vs off, on its first calibration "
                           "sample; graphaudit: " + (tc.compared + ", on the first sample of this run (same quantity "
                                                     "when the data are the config's cal_data_dir) and on all samples"
                                                     if tc.compared else "no numeric run (see the Run line)"),
                           style="dim"))
        rows.sort(key=lambda n: cosine_order(n.cosine))
        shown = rows if verbose else rows[:top]
        t = Table(box=None, pad_edge=False)
        for col in ("node", "type", "ON", "toolchain cosine", "graphaudit, 1st sample", "graphaudit, all samples",
                    f"node in {tc.stage or '-'}"):
            t.add_column(col, overflow="fold")
        for n in shown:
            t.add_row(escape(("..." if n.truncated else "") + n.node), escape(n.type or "-"), n.on or "-",
                      _fmt(n.cosine, ".6f"), _fmt(n.graphaudit_first_sample_cosine, ".6f"),
                      _fmt(n.graphaudit_cosine, ".6f"), escape(n.node_id or "-"))
        console.print(t)
        if len(rows) > len(shown):
            print_line(console, Text(f"  ... {len(rows) - len(shown)} more rows (--verbose)", style="dim"))
    for o in tc.outputs:
        print_line(console, f"  output {escape(o.output)}: toolchain cosine {_fmt(o.cosine, '.6f')}, L1 "
                      f"{_fmt(o.l1, '.6g')}, L2 {_fmt(o.l2, '.6g')}, Chebyshev {_fmt(o.chebyshev, '.6g')}; "
                      f"graphaudit cosine {_fmt(o.graphaudit_first_sample_cosine, '.6f')} (1st sample), "
                      f"{_fmt(o.graphaudit_cosine, '.6f')} (all samples)")
