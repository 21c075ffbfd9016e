"""Command line: parse arguments, call the library, pick a renderer, set the exit code.

Exit codes: 0 clean, 1 findings at or above ``--fail-on``, 2 bad input, 130 Ctrl-C, 143/129 SIGTERM/SIGHUP.
"""

from __future__ import annotations

import _signal  # the C module: `import signal` builds enums first (milliseconds a Ctrl-C can fall in)


def _startup_interrupt(_signum, _frame) -> None:
    """SIGINT while the modules below import (onnx, numpy, ruamel: seconds), before :func:`main` can catch it."""
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # exiting: another Ctrl-C must not print a traceback
    print("graphaudit: interrupted", file=__import__("sys").stderr)
    raise SystemExit(130)


try:  # only over Python's own handler, and only in the main thread (elsewhere signal.signal raises ValueError)
    _STARTUP = _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
    if _STARTUP:
        _signal.signal(_signal.SIGINT, _startup_interrupt)
except ValueError:
    _STARTUP = False

import argparse
import gc
import os
import signal
from dataclasses import replace
import io
import sys
import threading
import warnings
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ._version import __version__
from .catalogue import load_catalogue
from .errors import GraphAuditError
from .fileio import check_output_path, write_atomic
from .findings import report_order, severity_rank
from .load import load_stage
from .cliargs import build_parser
from .cliopts import audit_args, load_config, raw_shape, say_notes, small_job_note
from .outputs import plan_reports, write_reports
from .report import AuditReport
from .toolchains.discovery import discover_stages, role_of
from .pipeline import audit, contract_errors, load_pipeline, user_inputs
from .render import (render_diff, render_explain, render_findings, render_input_stats, render_numeric, render_rules,
                     write_json)
from .render.brief import line_overflow
from .samples import bundled_config, bundled_data, bundled_pipelines
from .numeric.backends import keep_malloc_settings
from .stopsignals import exit_line, install as install_stop_signals, settle as settle_stop_signals

__all__ = ["main", "build_parser"]  # build_parser lives in cliargs


#: Samples run per bundled pipeline by a bare `graphaudit explain` (keeps the demo quick).
DEFAULT_SAMPLE_RUN = 4


def _lower(args: argparse.Namespace, console: Console) -> int:
    from .numeric.lower import lower_file

    check_output_path(args.output, user_inputs([args.stage]))  # not the stage, nor beside it; before the work
    res = lower_file(args.stage, args.output)
    done = ", ".join(f"{op} x{c}" for op, c in sorted(res.lowered.items()))
    console.print(Text(f"{args.output}: " + (f"lowered {done}" if done else "no Horizon op to lower; written unchanged")),
                  soft_wrap=True)
    hz = res.verified.get("horizon")
    agree = ("agrees with Horizon's runtime on the original (outputs: " + "; ".join(
        _agreement(n, v) for n, v in list(hz.items())[:3]) + ")" if isinstance(hz, dict) and hz else (hz or ""))
    console.print(Text(f"checked: loads and runs in onnxruntime ({res.verified.get('outputs', 0)} output(s)); {agree}"),
                  soft_wrap=True)
    return 0


def _agreement(name: str, v: dict) -> str:
    """One output's agreement with Horizon's runtime, by the rule that accepted it
    (:func:`graphaudit.numeric.lower.verify.verify_lowered`): the cosine, or, where the cosine is below
    AGREEMENT_COSINE, the max difference within the absolute tolerance (an output near zero: cosine is unstable)."""
    from .numeric.lower.verify import AGREEMENT_COSINE

    if v["cosine"] >= AGREEMENT_COSINE:
        return f"{name} cosine {v['cosine']:.6f}, max |diff| {v['max_abs']:.3g}"
    return (f"{name} max |diff| {v['max_abs']:.3g} within the tolerance {v.get('atol', 0):.3g} (cosine "
            f"{v['cosine']:.6f}: its values are near zero, where cosine says little)")


def _render(args: argparse.Namespace, console: Console) -> int:
    from .errors import GraphvizMissingError
    from .render.diffgraph import build_diff_graph, picture_format

    picture_format(args.output)
    notes: list[str] = []
    kw = audit_args(args, notes)
    protect = user_inputs(args.paths, args.source, args.data, args.config)
    if kw["config"] is not None:  # the model and calibration data the config names are inputs too
        from .config import config_inputs

        protect += config_inputs(kw["config"])
    out = check_output_path(args.output, protect)
    say_notes(notes)  # after the output check: a refusal is the first line the user sees
    au = audit(args.paths, **kw)
    bad = sorted({f"{f.code} {f.message}" for f in contract_errors(au.report.findings)})
    if bad:  # the shading would blame the toolchain for the data
        console.print(Text(f"warning: the data violate the stage's input contract: {bad[0]}"
                           + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                           + "; the error shading measures the data, not only the toolchain", style="yellow"))
    if au.report.run and au.report.run.numeric_skipped:
        console.print(Text(f"warning: no error shading: {au.report.run.numeric_skipped}", style="yellow"))
    if kw["config"] is not None:  # the config linted against the stages, listed as explain lists them
        console.print(Text(f"config: {kw['config'].path} (linted against the stages, C3xx)", style="bold"))
        render_findings(replace(au.report, findings=[f for f in au.report.findings if f.code.startswith("C")]),
                        console)
    small_job_note(kw["numeric"], [au])
    src = au.diff_source()
    g = build_diff_graph(src, pair=args.pair, focus=args.focus, radius=args.radius, expand=args.expand,
                         max_nodes=args.max_nodes, rankdir=args.rankdir)
    try:
        g.write(out)
    except GraphvizMissingError as e:
        dot_path = check_output_path(out.with_suffix(".dot"), protect)
        g.write(dot_path)
        raise GraphvizMissingError(f"{out}: {e}; the graph was written as DOT to {dot_path}") from e
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(g.kind_counts.items()))
    view = (f"nodes of {au.stages[-1].name}, each with its change over the whole lineage" if args.pair is None
            else f"nodes of {au.stages[args.pair + 1].name}")
    console.print(Text(f"{out}: {g.node_count} nodes drawn ({kinds}; {view}"
                       + ("" if args.expand else "; wrappers as edge badges, --expand draws them") + ")"
                       + (f"; automatic focus on findings, {g.total_nodes} nodes in all" if g.focused else "")
                       + (f"; {g.collapsed} kept nodes collapsed into chains" if g.collapsed else "")))
    return 0


def _check_inputs(args: argparse.Namespace, console: Console) -> int:
    from .inputcheck import check_inputs
    from .render.console import render_input_contracts
    from .render.json_out import input_check_json
    from .toolchains.contracts import stage_contracts

    paths = args.paths
    cfg = load_config(args.config)
    found_line = None  # a config found beside the stages, as explain and compare find it (said after the checks)
    if cfg is None and not args.no_config:
        cfg, found_line = _found_config(paths, runs_data=True)
    protect = user_inputs(paths, args.source, args.data, args.config)
    if cfg is not None:
        from .config import config_inputs

        protect += config_inputs(cfg)
    if args.json is not None:
        check_output_path(args.json, protect)
    if found_line is not None:
        console.print(found_line)
    if len(paths) == 1 and not Path(paths[0]).is_dir() and not args.source:
        stages = [load_stage(paths[0], role=role_of(Path(paths[0]))[0])]
    else:
        stages = load_pipeline(paths, source=args.source)
    idx = 1 if stages[0].role == "source" and len(stages) > 1 else 0
    stats, findings = check_inputs(stages, args.data, idx, args.raw_dtype, raw_shape(args.raw_shape), args.max_samples,
                                   cfg)
    if cfg is not None:  # the config is linted against the stages, as explain does
        from .lint import lint_config

        findings = sorted(findings + lint_config(cfg, stages=stages), key=report_order)
    contracts = stage_contracts(stages[idx], cfg)
    render_input_contracts(contracts, stages[idx], console)
    render_input_stats(stats, stages[idx], console)
    render_findings(AuditReport(stages=[], transitions=[], findings=findings, title="check-inputs",
                                tool_version=__version__), console)
    if args.json is not None:
        write_atomic(args.json, input_check_json(stages[idx].path, contracts, stats, findings), protect)
    if args.fail_on != "never" and any(severity_rank(f.severity) <= severity_rank(args.fail_on) for f in findings):
        return 1
    return 0


def _lint(args: argparse.Namespace, console: Console) -> int:
    from .config import config_inputs, load_config_or_log
    from .lint import lint_config, lint_scope
    from .fileio import write_atomic
    from .render.lint_console import lint_json_text, render_lint
    from .render.sarif import sarif_text

    for flag in ("stages", "model", "data"):
        if getattr(args, flag) == "":
            raise GraphAuditError(f"--{flag}: empty path")
    cfg = load_config_or_log(args.config, toolchain=args.toolchain)
    protect = [Path(p) for p in (args.config, args.model, args.stages, args.data) if p] + config_inputs(cfg)
    if args.output is not None:
        check_output_path(args.output, protect)
    stages = load_pipeline([args.stages]) if args.stages else None
    scope = lint_scope(cfg, model=args.model, stages=stages, data=args.data)
    findings = lint_config(cfg, model=args.model, stages=stages, data=args.data)
    header = f"{args.config}: {cfg.family} ({cfg.family_reason}), {len(cfg.inputs)} input(s)"
    if args.format == "text" and args.output is None:
        render_lint(findings, console, header, scope)
    else:
        if args.format == "sarif":
            text = sarif_text(findings, load_catalogue(), __version__, scope)
        elif args.format == "json":
            text = lint_json_text(findings, args.config, cfg.family, cfg.family_reason, __version__, scope)
        else:
            buf = Console(record=True, file=io.StringIO(), width=120, color_system=None)
            render_lint(findings, buf, header, scope)
            text = buf.export_text()
        if args.output is None:
            sys.stdout.write(text)
        else:
            write_atomic(args.output, text, protect)
    if args.fail_on != "never" and any(severity_rank(f.severity) <= severity_rank(args.fail_on) for f in findings):
        return 1
    return 0


def _rules(args: argparse.Namespace, console: Console) -> int:
    if args.markdown:
        from .checks.table import markdown_table

        sys.stdout.write(markdown_table())
        return 0
    rules = load_catalogue()
    if args.explain and args.explain.upper() not in rules:
        raise GraphAuditError(f"{args.explain}: no such rule (see `graphaudit rules`)")
    render_rules(rules, console, args.explain.upper() if args.explain else None)
    return 0


def _pipelines(args: argparse.Namespace) -> tuple[list[tuple[str, list]], bool]:
    """The pipelines to explain as ``(title, paths)``: the paths given, or the bundled samples (True) when none."""
    if args.command == "explain" and not args.paths:
        for flag in ("source", "data", "log", "config", "eval_hook", "eval_samples"):
            if getattr(args, flag, None):
                name = "eval" if flag == "eval_hook" else flag.replace("_", "-")
                raise GraphAuditError(f"--{name} needs stage paths (it belongs to one pipeline)")
        return bundled_pipelines(), True
    return [(_title(args.paths), args.paths)], False


def _title(paths: list[str]) -> str:
    """The report's title for stages the user named: the directory given (its name; ``PROJECT`` for
    ``PROJECT/model_output``), else "" (explicit files)."""
    if len(paths) != 1 or not os.path.isdir(paths[0]):
        return ""
    p = Path(os.path.abspath(paths[0]))
    return p.parent.name if p.name == "model_output" and p.parent.name else p.name


def _explain(args: argparse.Namespace, console: Console) -> int:
    """explain, diff and compare: the main job over one pipeline (or the bundled samples), then the renderers.

    Each audit is frozen once built (``gc.freeze``): the collections of the rendering and report writing do not walk
    it again (about 1 s on 37,500 nodes); an in-process caller gets its collector back as it was (unfrozen at the
    end), and ``python -m graphaudit`` freezes again before exiting (the interpreter's last collection skips it)."""
    own = not gc.get_freeze_count()  # a caller's own frozen objects are never unfrozen
    try:
        return _explain_run(args, console, own)
    finally:
        if own:
            gc.unfreeze()


def _explain_run(args: argparse.Namespace, console: Console, freeze: bool) -> int:
    """:func:`_explain`; ``freeze``: freeze each audit once built."""
    pipelines, default_run = _pipelines(args)
    notes: list[str] = []
    kw = audit_args(args, notes)
    finds = args.command in ("explain", "compare")  # compare reads raw calibration files with it too
    found_line = None  # said once the outputs are checked: a refusal comes before any other output
    if finds and not default_run and kw["config"] is None and not args.no_config:
        kw["config"], found_line = _found_config(args.paths, runs_data=args.command == "compare")
        # explain runs a found config's cal_data_dir only when asked (--config): structure stays fast
        kw["config_data"] = args.command == "compare"
    if args.command == "compare" and not (args.data or args.random or kw["config"] or kw.get("eval_hook")):
        raise GraphAuditError("compare needs samples: give --data PATH, --random N, or --config YAML (its "
                              "cal_data_dir; found by itself when the config's working_dir holds the stages), "
                              "or --eval MODULE:FUNCTION")
    given = [p for _t, paths in pipelines for p in user_inputs(paths, args.source, getattr(args, "config", None),
                                                                 getattr(args, "data", None), kw["log"],
                                                                 getattr(args, "eval_samples", None), _hook_file(args))]
    protect = given + [p for _t, paths in pipelines for p in _found_logs(paths, kw["find_log"])]
    if kw["config"] is not None:  # a config found beside the stages, the model and data it names are inputs too
        from .config import config_inputs

        protect += [Path(kw["config"].path), *config_inputs(kw["config"])]
    plan = None
    if args.command == "explain":
        if not default_run:  # a missing or mistaken stage path is named before where the reports go
            discover_stages(args.paths, args.source, min_stages=1)
        # the default --out must not land next to the stage files the user gave (the toolchain's output); a
        # project directory holding the config, the float model or a log is where users run it, and stays allowed
        stage_files = [p for _t, paths in pipelines for p in user_inputs(paths)]
        plan = plan_reports(args.out, args.html, args.json, args.no_report, args.model_explorer, protect,
                            inputs=stage_files, option="--out DIR")
    elif args.json is not None:
        check_output_path(args.json, protect)
    say_notes(notes)  # the notes of argument reading: after the output checks, a refusal comes first
    if found_line is not None:
        console.print(found_line, no_wrap=True, overflow=line_overflow(console), crop=console.is_terminal)
    audits = []
    for title, paths in pipelines:
        one = dict(kw)
        if default_run:
            one.update(config=load_config(bundled_config(title)), find_log=False,
                       data=bundled_data(title) if args.random is None else None,
                       numeric=replace(kw["numeric"], max_samples=args.max_samples if args.max_samples is not None
                                       else DEFAULT_SAMPLE_RUN))
        audits.append(audit(paths, title=title, min_stages=1 if args.command == "explain" else 2, **one))
        if freeze:
            gc.freeze()
    reports = [au.report for au in audits]
    unreadable = any(f.code == "P212" for f in reports[0].findings)  # --data, none of whose files can be read
    if args.command == "compare" and (not (args.data or args.random) or unreadable) and reports[0].numeric is None \
            and reports[0].metric is None and not contract_errors(reports[0].findings):  # else: as with --data
        run = reports[0].run
        why = run.numeric_skipped if run is not None and run.numeric_skipped else (
            f"{run.config if run is not None else 'the config'} names no cal_data_dir")
        raise GraphAuditError(f"compare needs samples: {why}")
    for rep in reports:
        if args.command == "explain":
            render_explain(rep, console, args.verbose)
        elif args.command == "compare":
            render_numeric(rep, console)
            render_findings(rep, console)
        else:
            render_diff(rep, console, args.verbose)
    small_job_note(kw["numeric"], audits)
    if plan is not None:
        for what, path in write_reports(audits, plan=plan, json=args.json, rankdir=args.rankdir):
            console.print(Text(f"{what}: {path}"))
    elif args.json is not None:
        write_json(reports[0] if len(reports) == 1 else reports, args.json, protect=protect)
        console.print(Text(f"\nJSON report: {args.json}"))
    fail_on = getattr(args, "fail_on", "never")
    if fail_on != "never" and any(severity_rank(f.severity) <= severity_rank(fail_on)
                                  for rep in reports for f in rep.findings):
        return 1
    return 0


def _bisect(args: argparse.Namespace, console: Console) -> int:
    """bisect: the library's bisection over one transition, printed and optionally written as JSON."""
    from .bisection import bisect
    from .render.bisect_console import render_bisect, render_bisect_start, render_bisect_step

    notes: list[str] = []
    kw = audit_args(args, notes)
    found_line = None
    if kw["config"] is None and not args.no_config and not (args.data or args.random):
        kw["config"], found_line = _found_config(args.paths, runs_data=True)
    protect = user_inputs(args.paths, args.source, args.config, args.data, args.eval_samples, _hook_file(args))
    if kw["config"] is not None:  # a config found beside the stages, and what it names (cal_data_dir), are inputs
        from .config import config_inputs

        protect += [Path(kw["config"].path), *config_inputs(kw["config"])]
    if args.json is not None:
        check_output_path(args.json, protect)
    say_notes(notes)  # after the output check: a refusal comes first
    if found_line is not None:
        console.print(found_line, no_wrap=True, overflow=line_overflow(console), crop=console.is_terminal)
    rep = bisect(args.paths, args.pair, source=args.source, config=kw["config"], data=args.data,
                 numeric=kw["numeric"], target=args.target, budget=args.budget,
                 progress=lambda step: render_bisect_step(step, console),
                 on_start=lambda *a: render_bisect_start(*a, console), eval_hook=kw.get("eval_hook"),
                 eval_samples=kw.get("eval_samples"))
    render_bisect(rep, console)
    if args.json is not None:
        write_json(rep, args.json, protect=protect)
        console.print(Text(f"\nJSON: {args.json}"))
    return 0 if rep.reached else 1


def _hook_file(args: argparse.Namespace) -> Path | None:
    """The file of an ``--eval path/to/file.py:function`` hook (an input: never overwritten), else None."""
    spec = getattr(args, "eval_hook", None) or ""
    head = spec.rpartition(":")[0]
    return Path(head) if head.endswith(".py") else None


#: Sub-command -> handler ``(args, console) -> exit code``.
HANDLERS = {"explain": _explain, "diff": _explain, "compare": _explain, "bisect": _bisect, "render": _render,
            "check-inputs": _check_inputs, "lint": _lint, "lower": _lower, "rules": _rules}


def _found_config(paths: list, runs_data: bool) -> tuple[object, Text | None]:
    """The conversion config beside the stages (:func:`graphaudit.config.find_config`) and the console line that
    says so (``runs_data``: whether its cal_data_dir is run, else how to run it), or that several were found;
    printed by the caller once the output paths are checked."""
    from .config import find_config

    cfg, files = find_config(paths[0]) if paths else (None, [])
    if cfg is not None:
        how = "" if runs_data else f"; its cal_data_dir runs with --config {cfg.path}"
        return cfg, Text(f"config: {cfg.path} (its working_dir holds the stages{how}; --no-config to leave it out)",
                         style="dim")
    if len(files) > 1:
        return cfg, Text(f"config: {len(files)} configs write into these stages' directory ("
                         + ", ".join(str(f) for f in files) + "): give one with --config", style="yellow")
    return cfg, None


def _found_logs(paths: list, find_log: bool) -> list[Path]:
    """The toolchain logs explain may read beside the stages, the first that can be used and those it falls back
    to (inputs too: never overwritten)."""
    if not find_log:
        return []
    from .toolchain_log import toolchain_candidates

    return [Path(f) for f in toolchain_candidates(paths)]


class _TrimmedLines:
    """A text stream that writes complete lines without their trailing blanks (rich pads table rows to the width;
    a file or a pipe should not carry that padding). ``close`` writes what is left of the last line."""

    def __init__(self, stream):
        self.stream, self.pending = stream, ""

    def write(self, text: str) -> int:
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        if lines:
            self.stream.write("".join(line.rstrip() + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        if self.pending:
            self.stream.write(self.pending.rstrip())
            self.pending = ""
        self.stream.flush()


def _ignore_sigint() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        settle_stop_signals()


def run() -> None:
    """The ``graphaudit`` console script: :func:`main`, then exit with its code (what is left frozen first: the last
    collection skips the stages, 0.7 s on 37,500 nodes; the numeric step's malloc settings kept: it exits)."""
    keep_malloc_settings()
    install_stop_signals()  # SIGTERM/SIGHUP stop the run as Ctrl-C does (graphaudit.stopsignals)
    code = main()
    _ignore_sigint()  # the work is done: a Ctrl-C (or SIGTERM) must not break the exit's clean-up into a traceback
    _leave_hook_threads(code)
    gc.freeze()
    raise SystemExit(code)


def _leave_hook_threads(code: int) -> None:
    """Exit now (``os._exit``, output flushed; a note on stderr) when threads an ``--eval`` hook left running are
    still alive 2 s on (:data:`graphaudit.numeric.evalhook.LEFT_RUNNING`): Python's exit waited for them for ever
    after the report, with Ctrl-C ignored. Nothing of graphaudit's is left to clean up by then."""
    hook = sys.modules.get("graphaudit.numeric.evalhook")
    left = hook.threads_left(2.0) if hook is not None else []
    if left:
        print(f"graphaudit: note: the --eval hook left {len(left)} thread(s) running ({', '.join(left[:3])}"
              f"{', ...' if len(left) > 3 else ''}); exiting without waiting for them", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``graphaudit`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    # numpy's casts of hostile values (NaN to int) warn; the checks already judge those values, the user sees findings
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"graphaudit\.")
    tty, cols = sys.stdout.isatty(), os.environ.get("COLUMNS", "")  # piped: 160 columns (rich's 80 fold the tables)
    width = None if tty or (cols.isdigit() and int(cols) >= 20) else 160
    out = None if tty else _TrimmedLines(sys.stdout)
    console = Console(highlight=False, width=width, file=out)
    try:
        return HANDLERS[args.command](args, console)
    except GraphAuditError as e:
        print(f"graphaudit: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (graphaudit.stopsignals)
        _ignore_sigint()  # exiting: another Ctrl-C must not print a traceback
        print(f"graphaudit: {exit_line(e)[0]}", file=sys.stderr)
        return exit_line(e)[1]
    finally:
        if out is not None:
            out.close()


if _STARTUP and _signal.getsignal(_signal.SIGINT) is _startup_interrupt:  # imported: main() catches it from here
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
