"""Command line: parse arguments, call the library, pick a renderer, set the exit code.

Exit codes: 0 clean, 1 findings at or above ``--fail-on``, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

from . import __version__
from .catalogue import load_catalogue
from .errors import GraphAuditError
from .explain import explain
from .findings import SEVERITIES, severity_rank
from .render import render_diff, render_explain, render_rules, write_json
from .render.json_out import check_output_path
from .samples import bundled_pipelines

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``graphaudit`` command."""
    p = argparse.ArgumentParser(prog="graphaudit", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--version", action="version", version=f"graphaudit {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("explain", help="explain a pipeline: stages, changes per transition, findings",
                       description="Explain a stage pipeline. With no paths, explains the bundled samples.")
    e.add_argument("paths", nargs="*", help="a stage directory, or stage files in pipeline order")
    e.add_argument("--source", help="the pre-toolchain float model, added as stage 0")
    e.add_argument("--json", metavar="FILE", help="write the report as JSON (schema in README)")
    e.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="error",
                   help="exit 1 when a finding at or above this severity exists (default: error)")
    e.add_argument("-v", "--verbose", action="store_true", help="list every change and info fix")

    d = sub.add_parser("diff", help="changes between consecutive stages")
    d.add_argument("paths", nargs="+", help="two or more stage files in pipeline order, or a stage directory")
    d.add_argument("--source", help="the pre-toolchain float model, added as stage 0")
    d.add_argument("--json", metavar="FILE", help="write the report as JSON")
    d.add_argument("-v", "--verbose", action="store_true", help="list every change")

    r = sub.add_parser("rules", help="list the rule catalogue")
    r.add_argument("--explain", metavar="CODE", help="print one rule in full")
    return p


def _run(args: argparse.Namespace, console: Console) -> int:
    if args.command == "rules":
        rules = load_catalogue()
        if args.explain and args.explain.upper() not in rules:
            raise GraphAuditError(f"{args.explain}: no such rule (see `graphaudit rules`)")
        render_rules(rules, console, args.explain.upper() if args.explain else None)
        return 0
    if args.command == "explain" and not args.paths:
        if args.source:
            raise GraphAuditError("--source needs stage paths")
        pipelines = bundled_pipelines()
    else:
        pipelines = [("", args.paths)]
    if args.json is not None:
        check_output_path(args.json, _inputs(args, pipelines))
    reports = [explain(paths, source=args.source, title=title) for title, paths in pipelines]
    for rep in reports:
        (render_explain if args.command == "explain" else render_diff)(rep, console, args.verbose)
    if args.json is not None:
        write_json(reports[0] if len(reports) == 1 else reports, args.json, protect=_inputs(args, pipelines))
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
                out.extend(p.iterdir() if p.is_dir() else [p])
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
