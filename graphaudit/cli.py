"""Command line: parse arguments, call the library, pick a renderer, set the exit code.

Exit codes: 0 clean, 1 findings at or above ``--fail-on``, 2 bad input.
"""

from __future__ import annotations

import argparse
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
from .samples import bundled_data, bundled_pipelines

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

    lo = sub.add_parser("lower", help="rewrite custom (Horizon) ops as standard ONNX so stock onnxruntime runs the stage")
    lo.add_argument("stage", help="the stage .onnx file")
    lo.add_argument("-o", "--output", required=True, help="where to write the lowered model")

    r = sub.add_parser("rules", help="list the rule catalogue")
    r.add_argument("--explain", metavar="CODE", help="print one rule in full")
    return p


#: Samples run per bundled pipeline by a bare `graphaudit explain` (keeps the demo quick).
DEFAULT_SAMPLE_RUN = 4


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
    stats, findings = check_inputs(stages, args.data, idx, args.raw_dtype, _raw_shape(args.raw_shape), args.max_samples)
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


def _run(args: argparse.Namespace, console: Console) -> int:
    if args.command == "rules":
        rules = load_catalogue()
        if args.explain and args.explain.upper() not in rules:
            raise GraphAuditError(f"{args.explain}: no such rule (see `graphaudit rules`)")
        render_rules(rules, console, args.explain.upper() if args.explain else None)
        return 0
    if args.command == "lower":
        return _lower(args, console)
    if args.command == "check-inputs":
        return _check_inputs(args, console)
    if args.command == "explain" and not args.paths:
        if args.source:
            raise GraphAuditError("--source needs stage paths")
        if args.data is not None:
            raise GraphAuditError("--data needs stage paths (data fit one pipeline's inputs)")
        pipelines = bundled_pipelines()
        default_run = True
    else:
        pipelines = [("", args.paths)]
        default_run = False
    if args.json is not None:
        protect = _inputs(args, pipelines) + ([Path(args.data)] if getattr(args, "data", None) else [])
        check_output_path(args.json, protect)
    reports = []
    for title, paths in pipelines:
        au = audit(load_pipeline(paths, source=args.source), title=title)
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
        reports.append(au.report)
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
    fail_on = getattr(args, "fail_on", "never")
    if fail_on != "never" and any(severity_rank(f.severity) <= severity_rank(fail_on)
                                  for rep in reports for f in rep.findings):
        return 1
    return 0


def _inputs(args: argparse.Namespace, pipelines: list) -> list[Path]:
    """Every file the user gave us (stage files, files of stage directories, --source): never overwritten."""
    out: list[Path] = [Path(args.source)] if args.source else []
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
