"""Command line: parse arguments, call the library, pick a renderer, set the exit code.

Exit codes: 0 clean, 1 findings at or above ``--fail-on``, 2 bad input.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
import io
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

from . import __version__
from .catalogue import load_catalogue
from .errors import GraphAuditError
from .explain import load_pipeline
from .fileio import check_output_path, write_atomic
from .findings import SEVERITIES, severity_rank
from .load import load_stage
from .numeric.compare import DEFAULT_COSINE_THRESHOLD
from .outputs import DEFAULT_OUT, plan_reports, write_reports
from .report import AuditReport
from .toolchains.discovery import role_of
from .workflow import RunOptions, run_pipeline, user_inputs
from .render import (render_diff, render_explain, render_findings, render_input_stats, render_numeric, render_rules,
                     write_json)
from .samples import bundled_config, bundled_data, bundled_pipelines

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``graphaudit: error: ...``, exit 2) instead of the usage block."""

    def error(self, message: str):  # noqa: D102 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog.split()[0]} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``graphaudit`` command."""
    p = _Parser(prog="graphaudit", description="Explain accuracy loss across the stage models of a PTQ toolchain "
                "(Horizon hb_mapper/hb_compile, onnxruntime QDQ): what changed, where numbers diverge, whether the "
                "inputs and the conversion config are right.")
    p.add_argument("--version", action="version", version=f"graphaudit {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    e = sub.add_parser("explain", help="explain a pipeline: stages, changes per transition, findings",
                       description="Explain a stage pipeline. With no paths, explains the bundled samples.")
    e.add_argument("paths", nargs="*", help="a stage directory, or stage files in pipeline order")
    e.add_argument("--source", help="the pre-toolchain float model, added as stage 0")
    e.add_argument("--json", metavar="FILE", help="write the report as JSON (schema in README)")
    e.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="error",
                   help="exit 1 when a finding at or above this severity exists (default: error)")
    e.add_argument("-v", "--verbose", action="store_true", help="list every change and info fix")
    _numeric_args(e, required=False)
    _config_arg(e)
    _report_args(e)
    e.add_argument("--log", metavar="FILE", help="hb_mapper/hb_compile log or *_quant_info.json: show the toolchain's "
                                              "per-node similarity (default: found next to the stages)")
    e.add_argument("--no-log", action="store_true", help="do not look for a toolchain log next to the stages")

    d = sub.add_parser("diff", help="changes between consecutive stages")
    d.add_argument("paths", nargs="+", help="two or more stage files in pipeline order, or a stage directory")
    d.add_argument("--source", help="the pre-toolchain float model, added as stage 0")
    d.add_argument("--json", metavar="FILE", help="write the report as JSON")
    d.add_argument("-v", "--verbose", action="store_true", help="list every change")

    c = sub.add_parser("compare", help="run every stage on the same samples: per-tensor error, first divergence",
                       description="Run the stages in onnxruntime (custom ops lowered) on the same samples and "
                                   "compare aligned tensors.")
    c.add_argument("paths", nargs="+", help="a stage directory, or stage files in pipeline order")
    c.add_argument("--source", help="the pre-toolchain float model, added as stage 0")
    c.add_argument("--json", metavar="FILE", help="write the report as JSON")
    c.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="error")
    _numeric_args(c, required=True)
    _config_arg(c)

    ci = sub.add_parser("check-inputs", help="check data against a stage's input contract (layout, dtype, range, "
                                             "normalization done once)")
    ci.add_argument("paths", nargs="+", help="a stage file, a stage directory or stage files (the data follow the "
                                             "first toolchain stage)")
    ci.add_argument("--data", required=True, metavar="PATH", help="the data, as for compare")
    ci.add_argument("--source", help="the pre-toolchain float model, added as stage 0")
    ci.add_argument("--raw-dtype", help="dtype of raw .bin/.rgb files")
    ci.add_argument("--raw-shape", help="shape of raw files, e.g. 1x3x224x224")
    ci.add_argument("--max-samples", type=int, metavar="N", help="use only the first N samples")
    ci.add_argument("--json", metavar="FILE", help="write the findings and statistics as JSON")
    ci.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="error")
    _config_arg(ci)

    lo = sub.add_parser("lower", help="rewrite custom (Horizon) ops as standard ONNX so stock onnxruntime runs the stage")
    lo.add_argument("stage", help="the stage .onnx file")
    lo.add_argument("-o", "--output", required=True, help="where to write the lowered model")

    rd = sub.add_parser("render", help="draw the annotated diff graph (SVG, PNG or DOT) of a stage pair or of the "
                                       "whole lineage", description="Draw the stages' diff graph: nodes filled by "
                                       "change kind, wrappers as badges, error shading with --data/--random.")
    rd.add_argument("paths", nargs="+", help="a stage directory, or stage files in pipeline order")
    rd.add_argument("--source", help="the pre-toolchain float model, added as stage 0")
    rd.add_argument("-o", "--output", required=True, metavar="FILE", help="out.svg, out.png or out.dot (by suffix)")
    rd.add_argument("--pair", type=int, metavar="I", help="draw stages[I] -> stages[I+1] (default: every stage pair "
                                                          "in one lineage view, drawn on the last stage)")
    rd.add_argument("--focus", metavar="NODE|TENSOR", help="draw only the neighbourhood of this node or tensor")
    rd.add_argument("--radius", type=int, default=2, metavar="K", help="edges around --focus (default 2)")
    rd.add_argument("--expand", action="store_true", help="draw Q/DQ, HzCalibration and other wrappers as nodes")
    rd.add_argument("--max-nodes", type=int, default=300, metavar="N",
                    help="above N nodes, collapse kept chains and focus on the findings (default 300)")
    _numeric_args(rd, required=False)

    li = sub.add_parser("lint", help="lint an hb_mapper/hb_compile conversion YAML (C3xx rules)",
                        description="Lint a Horizon conversion config: schema of its toolchain family, values, and "
                                    "cross-checks against the ONNX model, the stage models and the calibration data.")
    li.add_argument("config", help="the conversion YAML")
    li.add_argument("--model", metavar="ONNX", help="the model it converts (default: its onnx_model, when present)")
    li.add_argument("--stages", metavar="DIR", help="the working_dir with the stage models (node names, HzPreprocess)")
    li.add_argument("--data", metavar="DIR", help="calibration data directory (default: its cal_data_dir, when present)")
    li.add_argument("--toolchain", choices=["1.x", "3.x"], help="force the family (default: from march and keys)")
    li.add_argument("--format", choices=["text", "json", "sarif"], default="text", help="output format (default text)")
    li.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE instead of the terminal")
    li.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="error",
                    help="exit 1 when a finding at or above this severity exists (default: error)")

    r = sub.add_parser("rules", help="list the rule catalogue")
    r.add_argument("--explain", metavar="CODE", help="print one rule in full")
    return p


#: Samples run per bundled pipeline by a bare `graphaudit explain` (keeps the demo quick).
DEFAULT_SAMPLE_RUN = 4


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="YAML", help="the hb_mapper/hb_compile conversion config: linted against the "
                                                   "stages; declares input layout and colour order")


def _load_config(path):
    """The parsed conversion config at ``path`` (None without one)."""
    if not path:
        return None
    from .config import load_config_or_log

    return load_config_or_log(path)


def _numeric_args(p: argparse.ArgumentParser, required: bool) -> None:
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument("--data", metavar="PATH", help=".npy/.npz file or directory, Horizon calibration_data/, raw "
                                                  ".bin files (with --raw-dtype/--raw-shape) or images")
    g.add_argument("--random", metavar="N", type=int, help="N random samples (seeded) instead of data")
    p.add_argument("--seed", type=int, default=0, help="seed for --random (default 0)")
    p.add_argument("--max-samples", type=int, metavar="N", help="use only the first N samples of --data")
    p.add_argument("--raw-dtype", help="dtype of raw .bin/.rgb files, e.g. uint8 or float32")
    p.add_argument("--raw-shape", help="shape of raw files, e.g. 1x3x224x224")
    p.add_argument("--threshold", type=float, default=DEFAULT_COSINE_THRESHOLD,
                   help=f"cosine below which a tensor has diverged (default {DEFAULT_COSINE_THRESHOLD})")
    p.add_argument("--no-isolated", action="store_true", help="skip measuring each change on its own")
    p.add_argument("--input-shape", action="append", metavar="NAME=DIMS", default=[],
                   help="concrete shape for an input with symbolic dims, e.g. x=1x3x48x192 (repeatable)")


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                   help=f"directory for report.html and report.json (default: {DEFAULT_OUT})")
    p.add_argument("--html", metavar="FILE", help="write the HTML report here instead of DIR/report.html")
    p.add_argument("--no-report", action="store_true",
                   help="terminal only: no report files (except --json/--html/--model-explorer given explicitly)")
    p.add_argument("--model-explorer", metavar="DIR", nargs="?", const="",
                   help="also write graphs, node mappings and overlays for Google's Model Explorer "
                        "(default DIR: OUT/model_explorer)")


#: Largest element count a --raw-shape / --input-shape may ask for (about 4 GiB of float32).
MAX_ELEMENTS = 2 ** 30


def _raw_shape(text: str | None, option: str = "--raw-shape") -> tuple | None:
    if not text:
        return None
    try:
        dims = tuple(int(x) for x in text.lower().replace(",", "x").split("x"))
    except ValueError as e:
        raise GraphAuditError(f"{option} {text!r}: expected dims like 1x3x224x224") from e
    if any(d < 1 for d in dims):
        raise GraphAuditError(f"{option} {text!r}: every dim must be at least 1")
    if math.prod(dims) > MAX_ELEMENTS:
        raise GraphAuditError(f"{option} {text!r}: {math.prod(dims):,} elements per sample is more than "
                              f"{MAX_ELEMENTS:,}")
    return dims


def _input_shapes(items: list[str]) -> dict[str, tuple]:
    out = {}
    for item in items:
        name, sep, dims = item.partition("=")
        if not sep or not name:
            raise GraphAuditError(f"--input-shape {item!r}: expected NAME=DIMS, e.g. x=1x3x224x224")
        out[name] = _raw_shape(dims, f"--input-shape {name}")
    return out


def _progress_factory():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not Console(stderr=True).is_terminal:
        return None

    def make(total: int):
        prog = Progress(TextColumn("samples"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
        task = prog.add_task("run", total=total)
        prog.start()

        def tick(i: int) -> None:
            prog.update(task, completed=i + 1)
            if i + 1 >= total:
                prog.stop()

        return tick

    return make


def _lower(args: argparse.Namespace, console: Console) -> int:
    from .numeric.lower import lower_file

    if Path(args.output).exists() and Path(args.stage).exists() and Path(args.output).resolve() == Path(args.stage).resolve():
        raise GraphAuditError(f"{args.output}: is the input stage; refusing to overwrite it")
    res = lower_file(args.stage, args.output)
    done = ", ".join(f"{op} x{c}" for op, c in sorted(res.lowered.items()))
    console.print(Text(f"{args.output}: " + (f"lowered {done}" if done else "no Horizon op to lower; written unchanged")))
    return 0


def _render(args: argparse.Namespace, console: Console) -> int:
    from .errors import GraphvizMissingError
    from .render.diffgraph import build_diff_graph, picture_format

    picture_format(args.output)
    protect = user_inputs(args.paths, args.source, args.data)
    out = check_output_path(args.output, protect)
    au = run_pipeline(args.paths, "", _run_options(args))
    g = build_diff_graph(au, pair=args.pair, focus=args.focus, radius=args.radius, expand=args.expand,
                         max_nodes=args.max_nodes)
    try:
        g.write(out)
    except GraphvizMissingError as e:
        dot_path = check_output_path(out.with_suffix(".dot"), protect)
        g.write(dot_path)
        raise GraphvizMissingError(f"{out}: {e}; the graph was written as DOT to {dot_path}") from e
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(g.kind_counts.items()))
    console.print(Text(f"{out}: {g.node_count} nodes drawn ({kinds})"
                       + (f"; automatic focus on findings, {g.total_nodes} nodes in all" if g.focused else "")
                       + (f"; {g.collapsed} kept nodes collapsed into chains" if g.collapsed else "")))
    return 0


def _check_inputs(args: argparse.Namespace, console: Console) -> int:
    from .inputcheck import check_inputs
    from .render.console import render_input_contracts
    from .render.json_out import input_check_json
    from .toolchains.contracts import stage_contracts

    paths = args.paths
    cfg = _load_config(args.config)
    protect = user_inputs(paths, args.source, args.data, args.config)
    if cfg is not None:
        from .config import config_inputs

        protect += config_inputs(cfg)
    if args.json is not None:
        check_output_path(args.json, protect)
    if len(paths) == 1 and not Path(paths[0]).is_dir() and not args.source:
        stages = [load_stage(paths[0], role=role_of(Path(paths[0]))[0])]
    else:
        stages = load_pipeline(paths, source=args.source)
    idx = 1 if stages[0].role == "source" and len(stages) > 1 else 0
    stats, findings = check_inputs(stages, args.data, idx, args.raw_dtype, _raw_shape(args.raw_shape), args.max_samples,
                                   cfg)
    if cfg is not None:  # the config is linted against the stages, as explain does
        from .config import lint_config

        findings = sorted(findings + lint_config(cfg, stages=stages), key=lambda f: (severity_rank(f.severity),
                                                                                       not f.code.startswith("P"),
                                                                                       f.code))
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
    from .config import config_inputs, lint_config, load_config_or_log
    from .config.lint import lint_scope
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


def _run(args: argparse.Namespace, console: Console) -> int:
    if args.command == "rules":
        rules = load_catalogue()
        if args.explain and args.explain.upper() not in rules:
            raise GraphAuditError(f"{args.explain}: no such rule (see `graphaudit rules`)")
        render_rules(rules, console, args.explain.upper() if args.explain else None)
        return 0
    if args.command == "lint":
        return _lint(args, console)
    if args.command == "lower":
        return _lower(args, console)
    if args.command == "render":
        return _render(args, console)
    if args.command == "check-inputs":
        return _check_inputs(args, console)
    if args.command == "explain" and not args.paths:
        for flag in ("source", "data", "log", "config"):
            if getattr(args, flag, None):
                raise GraphAuditError(f"--{flag} needs stage paths (it belongs to one pipeline)")
        pipelines, default_run = bundled_pipelines(), True
    else:
        pipelines, default_run = [("", args.paths)], False
    opts = _run_options(args)
    protect = [p for _t, paths in pipelines for p in user_inputs(paths, args.source, getattr(args, "config", None),
                                                                   getattr(args, "data", None), opts.log,
                                                                   *_found_logs(paths, opts))]
    if opts.config is not None:  # the model and calibration data the config names are inputs too
        from .config import config_inputs

        protect += config_inputs(opts.config)
    plan = None
    if args.command == "explain":
        plan = plan_reports(args.out, args.html, args.json, args.no_report, args.model_explorer, protect)
    elif args.json is not None:
        check_output_path(args.json, protect)
    audits = []
    for title, paths in pipelines:
        o = opts
        if default_run:
            o = replace(opts, config=_load_config(bundled_config(title)), find_log=False,
                        data=bundled_data(title) if args.random is None else None,
                        max_samples=args.max_samples if args.max_samples is not None else DEFAULT_SAMPLE_RUN)
        audits.append(run_pipeline(paths, title, o))
    reports = [au.report for au in audits]
    for rep in reports:
        if args.command == "explain":
            render_explain(rep, console, args.verbose)
        elif args.command == "compare":
            render_numeric(rep, console)
            render_findings(rep, console)
        else:
            render_diff(rep, console, args.verbose)
    if plan is not None:
        for what, path in write_reports(plan, audits, json=args.json):
            console.print(Text(f"{what}: {path}"))
    elif args.json is not None:
        write_json(reports[0] if len(reports) == 1 else reports, args.json, protect=protect)
        console.print(Text(f"\nJSON report: {args.json}"))
    fail_on = getattr(args, "fail_on", "never")
    if fail_on != "never" and any(severity_rank(f.severity) <= severity_rank(fail_on)
                                  for rep in reports for f in rep.findings):
        return 1
    return 0


def _found_logs(paths: list, opts: RunOptions) -> list[Path]:
    """The toolchain log explain would pick up beside the stages (an input too: never overwritten)."""
    if not opts.find_log:
        return []
    from .toolchain_log import pick_toolchain_file

    found = pick_toolchain_file(paths)
    return [Path(found)] if found is not None else []


def _run_options(args: argparse.Namespace) -> RunOptions:
    """The :class:`RunOptions` of explain/compare/diff arguments."""
    numeric = hasattr(args, "threshold")
    return RunOptions(
        source=args.source, config=_load_config(getattr(args, "config", None)),
        data=getattr(args, "data", None), random=getattr(args, "random", None), seed=getattr(args, "seed", 0),
        threshold=args.threshold if numeric else DEFAULT_COSINE_THRESHOLD,
        isolated=not args.no_isolated if numeric else True, raw_dtype=getattr(args, "raw_dtype", None),
        raw_shape=_raw_shape(getattr(args, "raw_shape", None)),
        input_shapes=_input_shapes(getattr(args, "input_shape", [])), max_samples=getattr(args, "max_samples", None),
        progress=_progress_factory() if numeric else None, log=getattr(args, "log", None),
        find_log=args.command == "explain" and not getattr(args, "no_log", True))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``graphaudit`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    console = Console(highlight=False)
    try:
        return _run(args, console)
    except GraphAuditError as e:
        print(f"graphaudit: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
