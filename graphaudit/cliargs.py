"""The argument parser of the ``graphaudit`` command (subcommands, options, help texts)."""

from __future__ import annotations

import argparse
import sys

from ._version import __version__
from .errors import GraphAuditError
from .findings import SEVERITIES
from .numeric.backends import RUNTIMES
from .numeric.thresholds import DEFAULT_COSINE_THRESHOLD
from .outputs import DEFAULT_OUT
from .scaleout import ScaleOut

__all__ = ["build_parser", "sample_option_defaults"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``graphaudit: error: ...``, exit 2) instead of the usage block."""

    def error(self, message: str):  # noqa: D102 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog.split()[0]} --help)\n")


def positive_int(text: str, what: str = "sample") -> int:
    """argparse type: an integer >= 1 (a count of samples, or of ``what``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: need at least one {what}")
    return value


def out_file(text: str) -> str:
    """argparse type of an output file option (``--json``, ``--html``, ``-o``): a non-empty path."""
    if not text:
        raise argparse.ArgumentTypeError("empty file name")
    return text


def in_path(text: str) -> str:
    """argparse type of an input path (stage paths, ``--source``, ``--config``, ``--data``, ``--log``,
    ``--eval-samples``): a non-empty path (``""`` would be ``.``, or taken as no path at all)."""
    if not text:
        raise argparse.ArgumentTypeError("empty path")
    return text


def out_dir(text: str) -> str:
    """argparse type of an output directory option (``--out``): a non-empty path (``""`` is not ``.``)."""
    if not text:
        raise argparse.ArgumentTypeError("empty directory name")
    return text


def worker_count(text: str) -> int:
    """argparse type of ``--workers``: an integer >= 1."""
    return positive_int(text, "worker")


def scale_of(args: argparse.Namespace, notes: list[str] | None = None) -> ScaleOut | None:
    """``--workers``/``--ray`` as a :class:`ScaleOut` (None when neither shards anything); a bad setting or a
    missing ray package is one line naming the flag. The note on more workers than CPUs is appended to ``notes``
    (the caller says it once the outputs are checked), or printed on stderr without a list."""
    scale = ScaleOut(workers=getattr(args, "workers", 1) or 1, ray=getattr(args, "ray", None))
    bad = scale.problem()
    if bad:
        raise GraphAuditError(bad)
    if scale.ray is None and scale.local_processes < scale.workers:  # the pool's cap: say it
        note = f"graphaudit: note: {scale.capped_note()}"
        if notes is None:
            print(note, file=sys.stderr)
        else:
            notes.append(note)
    return scale if scale.active else None


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``graphaudit`` command."""
    p = _Parser(prog="graphaudit", description="Explain accuracy loss across the stage models of a PTQ toolchain "
                "(Horizon hb_mapper/hb_compile, onnxruntime QDQ): what changed, where numbers diverge, whether the "
                "inputs and the conversion config are right.")
    p.add_argument("--version", action="version", version=f"graphaudit {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_explain, _add_diff, _add_compare, _add_bisect, _add_check_inputs, _add_lower, _add_render,
                _add_lint, _add_rules):
        add(sub)
    return p


def _add_explain(sub) -> None:
    e = sub.add_parser("explain", help="explain a pipeline: stages, changes per transition, findings",
                       description="Explain a stage pipeline. With no paths, explains the bundled samples.")
    e.add_argument("paths", type=in_path, nargs="*", help="a stage directory, or stage files in pipeline order")
    e.add_argument("--source", type=in_path, help="the pre-toolchain float model, added as stage 0")
    e.add_argument("--json", metavar="FILE", type=out_file, help="write the report as JSON (schema in README)")
    e.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="error",
                   help="exit 1 when a finding at or above this severity exists (default: error)")
    e.add_argument("-v", "--verbose", action="store_true", help="list every change and info fix")
    _numeric_args(e, required=False)
    _eval_args(e)
    _config_arg(e)
    _report_args(e)
    e.add_argument("--log", type=in_path, metavar="FILE",
                   help="hb_mapper/hb_compile log or *_quant_info.json: show the toolchain's "
                        "per-node similarity (default: found next to the stages)")
    e.add_argument("--no-log", action="store_true", help="do not look for a toolchain log next to the stages")
    _no_config_arg(e)


def _add_diff(sub) -> None:
    d = sub.add_parser("diff", help="changes between consecutive stages")
    d.add_argument("paths", type=in_path, nargs="+",
                   help="two or more stage files in pipeline order, or a stage directory")
    d.add_argument("--source", type=in_path, help="the pre-toolchain float model, added as stage 0")
    d.add_argument("--json", metavar="FILE", type=out_file, help="write the report as JSON")
    d.add_argument("-v", "--verbose", action="store_true", help="list every change")


def _add_compare(sub) -> None:
    c = sub.add_parser("compare", help="run every stage on the same samples: per-tensor error, first divergence",
                       description="Run the stages in onnxruntime (custom ops lowered) on the same samples and "
                                   "compare aligned tensors.")
    c.add_argument("paths", type=in_path, nargs="+", help="a stage directory, or stage files in pipeline order")
    c.add_argument("--source", type=in_path, help="the pre-toolchain float model, added as stage 0")
    c.add_argument("--json", metavar="FILE", type=out_file, help="write the report as JSON")
    c.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="error")
    _numeric_args(c, required=False)  # one of --data, --random, --config (its cal_data_dir): checked by the CLI
    _eval_args(c)
    _config_arg(c)
    _no_config_arg(c)


def _share(text: str) -> float:
    """A share of the drop in (0, 1] (``0.8`` or ``80%``)."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a share such as 0.8 or 80%") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: the share must be in (0, 1]")
    return value


def _budget(text: str) -> int:
    """argparse type: a budget of hybrid evaluations, an integer >= 2 (b itself and every unit reverted)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"{value}: at least 2 hybrid evaluations (every unit reverted, then one "
                                         "prefix)")
    return value


def _add_bisect(sub) -> None:
    b = sub.add_parser("bisect", help="find the few changes of a transition that cost most of its accuracy "
                                      "(hybrid models: b with changes reverted to a's version)",
                       description="Revert sets of a transition's changes in stage b (aligned regions as splice "
                                   "units) and search, by group testing over the units ordered by isolated error, "
                                   "a small set whose reversion recovers a share of the drop of the outputs.")
    b.add_argument("paths", type=in_path, nargs="+", help="a stage directory, or stage files in pipeline order")
    b.add_argument("--pair", type=int, metavar="I", help="transition stages[I] -> stages[I+1] (default: the last "
                                                        "one the runtime runs where quantization happens; under "
                                                        "Horizon's runtime the one into calibrated)")
    b.add_argument("--target", type=_share, default=0.8, metavar="SHARE",
                   help="share of the drop to recover (default 0.8)")
    b.add_argument("--budget", type=_budget, metavar="N", help="most hybrid evaluations (default: stated "
                                                                    "before the search, 1 + log2(units) + 13)")
    b.add_argument("--source", type=in_path, help="the pre-toolchain float model, added as stage 0")
    b.add_argument("--json", metavar="FILE", type=out_file, help="write the bisection as JSON")
    _numeric_args(b, required=False)  # --data, --random or --config (its cal_data_dir)
    _eval_args(b)
    _config_arg(b)
    _no_config_arg(b)


def _add_check_inputs(sub) -> None:
    ci = sub.add_parser("check-inputs", help="check data against a stage's input contract (layout, dtype, range, "
                                             "normalization done once)")
    ci.add_argument("paths", type=in_path, nargs="+",
                    help="a stage file, a stage directory or stage files (the data follow the "
                         "first toolchain stage)")
    ci.add_argument("--data", type=in_path, required=True, metavar="PATH", help="the data, as for compare")
    ci.add_argument("--source", type=in_path, help="the pre-toolchain float model, added as stage 0")
    ci.add_argument("--raw-dtype", help="dtype of raw .bin/.rgb files")
    ci.add_argument("--raw-shape", help="shape of raw files, e.g. 1x3x224x224")
    ci.add_argument("--max-samples", type=positive_int, metavar="N", help="use only the first N samples")
    ci.add_argument("--json", metavar="FILE", type=out_file, help="write the findings and statistics as JSON")
    ci.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="error")
    _config_arg(ci)
    _no_config_arg(ci)


def _add_lower(sub) -> None:
    lo = sub.add_parser("lower", help="rewrite custom (Horizon) ops as standard ONNX so stock onnxruntime runs the stage")
    lo.add_argument("stage", type=in_path, help="the stage .onnx file")
    lo.add_argument("-o", "--output", required=True, type=out_file, help="where to write the lowered model")


def _add_render(sub) -> None:
    rd = sub.add_parser("render", help="draw the annotated diff graph (SVG, PNG or DOT) of a stage pair or of the "
                                       "whole lineage", description="Draw the stages' diff graph: nodes filled by "
                                       "change kind, wrappers as badges, error shading with --data/--random.")
    rd.add_argument("paths", type=in_path, nargs="+", help="a stage directory, or stage files in pipeline order")
    rd.add_argument("--source", type=in_path, help="the pre-toolchain float model, added as stage 0")
    rd.add_argument("-o", "--output", required=True, type=out_file, metavar="FILE", help="out.svg, out.png or out.dot (by suffix)")
    rd.add_argument("--pair", type=int, metavar="I", help="draw stages[I] -> stages[I+1] (default: every stage pair "
                                                          "in one lineage view, drawn on the last stage)")
    rd.add_argument("--focus", metavar="NODE|TENSOR", help="draw only the neighbourhood of this node or tensor")
    rd.add_argument("--radius", type=int, default=2, metavar="K", help="edges around --focus (default 2)")
    rd.add_argument("--expand", action="store_true", help="draw Q/DQ, HzCalibration and other wrappers as nodes")
    rd.add_argument("--max-nodes", type=int, default=300, metavar="N",
                    help="above N nodes, collapse kept chains and focus on the findings (default 300)")
    _rankdir_arg(rd)
    _numeric_args(rd, required=False)
    _config_arg(rd)  # its cal_data_dir shades the graph without --data; raw .bgr/.rgb data need its input shape


def _add_lint(sub) -> None:
    li = sub.add_parser("lint", help="lint an hb_mapper/hb_compile conversion YAML (C3xx rules)",
                        description="Lint a Horizon conversion config: schema of its toolchain family, values, and "
                                    "cross-checks against the ONNX model, the stage models and the calibration data.")
    li.add_argument("config", help="the conversion YAML")
    li.add_argument("--model", metavar="ONNX", help="the model it converts (default: its onnx_model, when present)")
    li.add_argument("--stages", metavar="DIR", help="the working_dir with the stage models (node names, HzPreprocess)")
    li.add_argument("--data", metavar="DIR", help="calibration data directory (default: its cal_data_dir, when present)")
    li.add_argument("--toolchain", choices=["1.x", "3.x"], help="force the family (default: from march and keys)")
    li.add_argument("--format", choices=["text", "json", "sarif"], default="text", help="output format (default text)")
    li.add_argument("-o", "--output", metavar="FILE", type=out_file, help="write the output to FILE instead of the terminal")
    li.add_argument("--fail-on", choices=[*SEVERITIES, "never"], default="error",
                    help="exit 1 when a finding at or above this severity exists (default: error)")


def _add_rules(sub) -> None:
    r = sub.add_parser("rules", help="list the rule catalogue")
    rg = r.add_mutually_exclusive_group()
    rg.add_argument("--explain", metavar="CODE", help="print one rule in full")
    rg.add_argument("--markdown", action="store_true", help="print the rule table as Markdown (README.md's table)")


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=in_path, metavar="YAML",
                   help="the hb_mapper/hb_compile conversion config: linted against the "
                        "stages; declares input layout and colour order")


def _no_config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-config", action="store_true",
                   help="do not use a conversion config found next to the stages (one whose working_dir is the "
                        "stage directory); --config names one")


def sample_option_defaults() -> dict:
    """The defaults of the options that act on the samples run through the stages (``--data``, ``--max-samples``,
    ``--threshold``, ``--workers``, ...), by their ``dest``."""
    p = argparse.ArgumentParser()
    _numeric_args(p, required=False)
    return vars(p.parse_args([]))


def _numeric_args(p: argparse.ArgumentParser, required: bool) -> None:
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument("--data", type=in_path, metavar="PATH",
                   help=".npy/.npz file or directory, Horizon calibration_data/, raw "
                        ".bin files (with --raw-dtype/--raw-shape) or images")
    g.add_argument("--random", metavar="N", type=int, help="N random samples (seeded) instead of data")
    p.add_argument("--seed", type=int, default=0, help="seed for --random (default 0)")
    p.add_argument("--max-samples", type=positive_int, metavar="N",
                   help="use only the first N samples of --data (and of --eval-samples for a per_sample --eval hook)")
    p.add_argument("--raw-dtype", help="dtype of raw .bin/.rgb files, e.g. uint8 or float32")
    p.add_argument("--raw-shape", help="shape of raw files, e.g. 1x3x224x224")
    p.add_argument("--threshold", type=float, default=DEFAULT_COSINE_THRESHOLD,
                   help=f"cosine below which a tensor has diverged (default {DEFAULT_COSINE_THRESHOLD})")
    p.add_argument("--no-isolated", action="store_true", help="skip measuring each change on its own")
    p.add_argument("--runtime", choices=RUNTIMES, default="auto",
                   help="what runs the stages: stock onnxruntime with Horizon's float ops lowered, or Horizon's own "
                        "runtime (horizon_nn, inside the toolchain's environment; runs the fixed-point stage too); "
                        "auto (default): Horizon's when horizon_nn imports")
    p.add_argument("--input-shape", action="append", metavar="NAME=DIMS", default=[],
                   help="concrete shape for an input with symbolic dims, e.g. x=1x3x48x192 (repeatable)")
    p.add_argument("--workers", type=worker_count, default=1, metavar="N",
                   help="shard the samples over N local worker processes (default 1: this process; README "
                        "'Scale out')")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="shard the samples over a Ray cluster (pip install 'graphaudit[ray]'): without ADDRESS a "
                        "local Ray instance, 'auto' the cluster this machine belongs to, or host:6379 / "
                        "ray://host:10001; --workers N sets the number of shards (default: the cluster's CPUs)")


def _eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--eval", metavar="MODULE:FUNCTION", dest="eval_hook",
                   help="your own metric per stage: a function evaluate(run, samples) -> number or dict of numbers, "
                        "called once per stage with that stage's runner (module:function or path/to/file.py:function;"
                        " README 'Your own metric')")
    p.add_argument("--eval-samples", type=in_path, metavar="PATH",
                   help="passed to the --eval function as its samples argument (needed by a per_sample hook: it "
                        "is called once per file there)")


def _rankdir(text: str) -> str:
    """``TB`` or ``LR`` in either case; anything else is refused with the text the user typed."""
    if text.upper() not in ("TB", "LR"):
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from 'TB', 'LR')")
    return text.upper()


def _rankdir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rankdir", default="TB", type=_rankdir, metavar="{TB,LR}",
                   help="diff graph layout: TB top to bottom (default), LR left to right")


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", type=out_dir,
                   help=f"directory for report.html and report.json (default: ./{DEFAULT_OUT}, refused when the "
                        "working directory holds an input file)")
    p.add_argument("--html", metavar="FILE", type=out_file, help="write the HTML report here instead of DIR/report.html")
    p.add_argument("--no-report", action="store_true",
                   help="terminal only: no report files (except --json/--html/--model-explorer given explicitly)")
    _rankdir_arg(p)
    p.add_argument("--model-explorer", metavar="DIR", nargs="?", const="",
                   help="also write graphs, node mappings and overlays for Google's Model Explorer "
                        "(default DIR: OUT/model_explorer)")
