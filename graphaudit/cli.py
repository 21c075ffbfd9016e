"""Command line: parse arguments, call the library, pick a renderer, set the exit code.

Exit codes: 0 clean, 1 findings at or above ``--fail-on``, 2 bad input.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

from . import __version__
from .catalogue import load_catalogue
from .errors import GraphAuditError
from .explain import audit, load_pipeline
from .load import load_stage
from .numeric.datastats import stats_dict
from .report import AuditReport
from .toolchains.discovery import role_of
from .inputcheck import attach_input_findings
from .measure import default_data_stage, measure
from .numeric.compare import DEFAULT_COSINE_THRESHOLD
from .findings import SEVERITIES, severity_rank
from .render import (render_diff, render_explain, render_findings, render_input_stats, render_numeric, render_rules,
                     write_json)
from .render.json_out import write_atomic
from .render.json_out import check_output_path
from .samples import bundled_config, bundled_data, bundled_pipelines
from .toolchain_log import attach_toolchain_log, load_toolchain_file, pick_toolchain_file

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``graphaudit: error: ...``, exit 2) instead of the usage block."""

    def error(self, message: str):  # noqa: D102 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog.split()[0]} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``graphaudit`` command."""
    p = _Parser(prog="graphaudit", description=__doc__.splitlines()[0] if __doc__ else None)
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


def _config(args: argparse.Namespace):
    """The parsed ``--config`` (None without one)."""
    if not getattr(args, "config", None):
        return None
    from .config import load_config

    return load_config(args.config)


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


#: Default ``--out`` directory of ``explain`` (relative to the working directory).
DEFAULT_OUT = "graphaudit_report"


def _report_paths(args: argparse.Namespace, pipelines: list) -> dict:
    """Where explain writes its report files; validated against the user's inputs before any work."""
    from .render.html import check_output_dir

    protect = _inputs(args, pipelines) + [Path(p) for _t, ps in pipelines for p in ps if Path(p).is_dir()]
    protect += [Path(x) for x in (args.data, getattr(args, "log", None)) if x]
    out = Path(args.out)
    paths = {"protect": protect, "out": out,
             "json": None if args.json is not None or args.no_report else out / "report.json",
             "html": Path(args.html) if args.html else (None if args.no_report else out / "report.html"),
             "me": None if args.model_explorer is None else Path(args.model_explorer or out / "model_explorer")}
    if paths["json"] or (paths["html"] and paths["html"].parent == out) or (paths["me"] and out in paths["me"].parents):
        check_output_dir(out, protect)
    if paths["html"] and paths["html"].parent != out:
        check_output_path(paths["html"], protect)
    if paths["me"]:
        check_output_dir(paths["me"], protect)
    return paths


def _write_reports(paths: dict, audits: list, console: Console) -> None:
    """Write report.json / report.html / the Model Explorer files of ``explain``."""
    from .render.html import diff_graph_panels, write_html
    from .render.model_explorer import write_model_explorer

    protect, reports = paths["protect"], [au.report for au in audits]
    for key in ("json", "html"):
        if paths[key] is not None:
            paths[key].parent.mkdir(parents=True, exist_ok=True)
    if paths["json"] is not None:
        write_json(reports[0] if len(reports) == 1 else reports, paths["json"], protect=protect)
        console.print(Text(f"\nJSON report: {paths['json']}"))
    if paths["html"] is not None:
        write_html(reports, paths["html"], [diff_graph_panels(au) for au in audits], protect=protect)
        console.print(Text(f"HTML report: {paths['html']}"))
    if paths["me"] is not None:
        for i, au in enumerate(audits):
            d = paths["me"] / (f"{i}_{au.report.title.split(':')[0]}" if len(audits) > 1 else "")
            d.mkdir(parents=True, exist_ok=True)
            write_model_explorer(au, d, protect=protect)
        console.print(Text(f"Model Explorer files: {paths['me']}"))


def _raw_shape(text: str | None) -> tuple | None:
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.lower().replace(",", "x").split("x"))
    except ValueError as e:
        raise GraphAuditError(f"--raw-shape {text!r}: expected dims like 1x3x224x224") from e


def _input_shapes(items: list[str]) -> dict[str, tuple]:
    out = {}
    for item in items:
        name, sep, dims = item.partition("=")
        if not sep or not name:
            raise GraphAuditError(f"--input-shape {item!r}: expected NAME=DIMS, e.g. x=1x3x224x224")
        out[name] = _raw_shape(dims)
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
    out = check_output_path(args.output, _inputs(args, [("", args.paths)]) +
                            ([Path(args.data)] if args.data else []))
    au = audit(load_pipeline(args.paths, source=args.source))
    if args.data is not None or args.random is not None:
        measure(au, data=args.data, random=args.random, seed=args.seed, threshold=args.threshold,
                isolated=not args.no_isolated, raw_dtype=args.raw_dtype, raw_shape=_raw_shape(args.raw_shape),
                progress=_progress_factory(), input_shapes=_input_shapes(args.input_shape), max_samples=args.max_samples)
    g = build_diff_graph(au, pair=args.pair, focus=args.focus, radius=args.radius, expand=args.expand,
                         max_nodes=args.max_nodes)
    try:
        g.write(out)
    except GraphvizMissingError as e:
        dot_path = out.with_suffix(".dot")
        g.write(dot_path)
        raise GraphvizMissingError(f"{out}: {e}; the graph was written as DOT to {dot_path}") from e
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(g.kind_counts.items()))
    console.print(Text(f"{out}: {g.node_count} nodes drawn ({kinds})"
                       + (f"; automatic focus on findings, {g.total_nodes} nodes in all" if g.focused else "")
                       + (f"; {g.collapsed} kept nodes collapsed into chains" if g.collapsed else "")))
    return 0


def _check_inputs(args: argparse.Namespace, console: Console) -> int:
    from .inputcheck import check_inputs

    paths = args.paths
    stage_paths = paths if len(paths) > 1 or Path(paths[0]).is_dir() or args.source else paths
    if len(stage_paths) == 1 and not Path(stage_paths[0]).is_dir():
        stages = [load_stage(stage_paths[0], role=role_of(Path(stage_paths[0]))[0])]
    else:
        stages = load_pipeline(stage_paths, source=args.source)
    if args.json is not None:
        check_output_path(args.json, [Path(p) for p in paths] + [Path(args.data)])
    idx = 1 if stages[0].role == "source" and len(stages) > 1 else 0
    stats, findings = check_inputs(stages, args.data, idx, args.raw_dtype, _raw_shape(args.raw_shape), args.max_samples,
                                   _config(args))
    render_input_stats(stats, stages[idx], console)
    report = AuditReport(stages=[], transitions=[], findings=findings, title="check-inputs", tool_version=__version__)
    render_findings(report, console)
    if args.json is not None:
        write_atomic(args.json, json.dumps({"stage": stages[idx].path, "inputs": {k: stats_dict(v) for k, v in
                                                                                  stats.items()},
                                            "findings": [f.to_dict() for f in findings]}, indent=1) + "\n")
    if args.fail_on != "never" and any(severity_rank(f.severity) <= severity_rank(args.fail_on) for f in findings):
        return 1
    return 0


def _lint(args: argparse.Namespace, console: Console) -> int:
    from .config import lint_config, load_config_or_log
    from .render.lint_console import lint_json_text, render_lint
    from .render.sarif import sarif_text

    if args.output is not None:
        protect = [Path(p) for p in (args.config, args.model, args.stages, args.data) if p]
        check_output_path(args.output, protect)
    cfg = load_config_or_log(args.config, toolchain=args.toolchain)
    stages = load_pipeline([args.stages]) if args.stages else None
    findings = lint_config(cfg, model=args.model, stages=stages, data=args.data)
    header = f"{args.config}: {cfg.family} ({cfg.family_reason}), {len(cfg.inputs)} input(s)"
    if args.format == "text" and args.output is None:
        render_lint(findings, console, header)
    else:
        if args.format == "sarif":
            text = sarif_text(findings, load_catalogue(), __version__)
        elif args.format == "json":
            text = lint_json_text(findings, args.config, cfg.family, cfg.family_reason, __version__)
        else:
            buf = Console(record=True, file=io.StringIO(), width=120, color_system=None)
            render_lint(findings, buf, header)
            text = buf.export_text()
        if args.output is None:
            sys.stdout.write(text)
        else:
            from .fileio import atomic_write

            atomic_write(Path(args.output), text)
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
        if args.source:
            raise GraphAuditError("--source needs stage paths")
        if args.data is not None:
            raise GraphAuditError("--data needs stage paths (data fit one pipeline's inputs)")
        if args.log:
            raise GraphAuditError("--log needs stage paths (a log belongs to one pipeline)")
        if args.config:
            raise GraphAuditError("--config needs stage paths (a config belongs to one pipeline)")
        pipelines = bundled_pipelines()
        default_run = True
    else:
        pipelines = [("", args.paths)]
        default_run = False
    if args.json is not None:
        protect = _inputs(args, pipelines) + ([Path(args.data)] if getattr(args, "data", None) else [])
        protect += [Path(args.log)] if getattr(args, "log", None) else []
        check_output_path(args.json, protect)
    config = _config(args)
    reports = []
    audits = []
    outs = _report_paths(args, pipelines) if args.command == "explain" else None
    for title, paths in pipelines:
        cfg = config
        if default_run and bundled_config(title) is not None:
            from .config import load_config

            cfg = load_config(bundled_config(title))
        au = audit(load_pipeline(paths, source=args.source), title=title, config=cfg)
        tlog = None  # parsed before the numeric run, so a bad log fails fast
        if args.command == "explain" and not default_run and (args.log or not args.no_log):
            found = args.log or pick_toolchain_file(paths)
            tlog = load_toolchain_file(found) if found is not None else None
        data = bundled_data(title) if default_run and args.random is None else getattr(args, "data", None)
        if data is not None:
            attach_input_findings(au, data, default_data_stage(au), args.raw_dtype, _raw_shape(args.raw_shape),
                                  args.max_samples)
        if data is not None or getattr(args, "random", None) is not None:
            measure(au, data=data, random=args.random, seed=args.seed, threshold=args.threshold,
                    isolated=not args.no_isolated, raw_dtype=args.raw_dtype, raw_shape=_raw_shape(args.raw_shape),
                    progress=_progress_factory(), input_shapes=_input_shapes(args.input_shape),
                    max_samples=args.max_samples if args.max_samples is not None or not default_run
                    else DEFAULT_SAMPLE_RUN)
        if tlog is not None:
            attach_toolchain_log(au, tlog)
        reports.append(au.report)
        audits.append(au)
    for rep in reports:
        if args.command == "explain":
            render_explain(rep, console, args.verbose)
        elif args.command == "compare":
            render_numeric(rep, console)
            render_findings(rep, console, codes=("N401", "N402"))
        else:
            render_diff(rep, console, args.verbose)
    if args.json is not None:
        write_json(reports[0] if len(reports) == 1 else reports, args.json, protect=protect)
        console.print(Text(f"\nJSON report: {args.json}"))
    if outs is not None:
        _write_reports(outs, audits, console)
    fail_on = getattr(args, "fail_on", "never")
    if fail_on != "never" and any(severity_rank(f.severity) <= severity_rank(fail_on)
                                  for rep in reports for f in rep.findings):
        return 1
    return 0


def _inputs(args: argparse.Namespace, pipelines: list) -> list[Path]:
    """Every file the user gave us (stage files, files of stage directories, --source): never overwritten."""
    out: list[Path] = [Path(args.source)] if args.source else []
    out += [Path(args.config)] if getattr(args, "config", None) else []
    for _title, paths in pipelines:
        for p in map(Path, paths):
            try:
                out.extend([q for q in p.iterdir() if q.is_file()] if p.is_dir() else [p])
            except OSError:
                out.append(p)
    return out


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
