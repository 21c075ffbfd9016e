"""The command line's options as library arguments: shapes, numeric options, the keyword arguments of
:func:`graphaudit.audit`, and the notes a run's options call for (a whole-set ``--eval`` hook that ``--max-samples``
cannot cap, ``--workers`` on a small job, options acting on samples when none run)."""

from __future__ import annotations

import argparse
import math
import os
import sys

from .cliargs import sample_option_defaults, scale_of
from .errors import GraphAuditError
from .measure import NumericOptions
from .pipeline import Audit
from .render.progress import progress_factory

__all__ = ["load_config", "raw_shape", "input_shapes", "numeric_options", "eval_progress", "audit_args",
           "idle_sample_options", "small_job_note", "MAX_ELEMENTS"]


def load_config(path):
    """The parsed conversion config at ``path`` (None without one)."""
    if not path:
        return None
    from .config import load_config_or_log

    return load_config_or_log(path)


#: Largest element count a --raw-shape / --input-shape may ask for (about 4 GiB of float32).
MAX_ELEMENTS = 2 ** 30


def raw_shape(text: str | None, option: str = "--raw-shape") -> tuple | None:
    """Dims typed as ``1x3x224x224`` (or with commas) as a tuple of ints; None for no text. GraphAuditError naming
    ``option`` for a bad dim, a dim below 1, or more than :data:`MAX_ELEMENTS` elements."""
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


def input_shapes(items: list[str]) -> dict[str, tuple]:
    """``--input-shape NAME=DIMS`` items as ``{name: dims}`` (:func:`raw_shape`); GraphAuditError for a bad item."""
    out = {}
    for item in items:
        name, sep, dims = item.partition("=")
        if not sep or not name:
            raise GraphAuditError(f"--input-shape {item!r}: expected NAME=DIMS, e.g. x=1x3x224x224")
        out[name] = raw_shape(dims, f"--input-shape {name}")
    return out


def small_job_note(numeric: NumericOptions, audits: list[Audit]) -> None:
    """One note line on stderr (as the note on more workers than CPUs) when ``--workers`` ran so few samples that the
    workers' start-up likely outweighed the sharing (:meth:`graphaudit.scaleout.ScaleOut.small_job_note`; under
    Horizon's runtime each audit's wall time decides)."""
    if numeric.scale is None:
        return
    for au in audits:
        run = au.report.run
        note = numeric.scale.small_job_note(run.samples_used if run is not None else None,
                                            run.runtime if run is not None else None, au.seconds)
        if note:
            print(f"graphaudit: note: {note}", file=sys.stderr, flush=True)
            return


def numeric_options(args: argparse.Namespace, notes: list[str] | None = None) -> NumericOptions:
    """The :class:`NumericOptions` of explain/compare/diff/render arguments; a bad value is named by its flag.
    ``notes``: as for :func:`graphaudit.cliargs.scale_of`."""
    numeric = hasattr(args, "threshold")
    kw = {"threshold": args.threshold, "isolated": not args.no_isolated} if numeric else {}
    opts = NumericOptions(
        random=getattr(args, "random", None), seed=getattr(args, "seed", 0), max_samples=getattr(args, "max_samples", None),
        raw_dtype=getattr(args, "raw_dtype", None), raw_shape=raw_shape(getattr(args, "raw_shape", None)),
        input_shapes=input_shapes(getattr(args, "input_shape", [])),
        progress=progress_factory() if numeric else None, runtime=getattr(args, "runtime", "auto"),
        eval_progress=eval_progress if getattr(args, "eval_hook", None) else None, scale=scale_of(args, notes), **kw)
    bad = opts.problem()
    if bad is not None:
        raise GraphAuditError(f"--{bad[0].replace('_', '-')} {bad[1]}: {bad[2]}")
    return opts


def eval_progress(stage: str) -> None:
    """Say on stderr which stage the eval hook runs on (a hook over many samples takes a while)."""
    print(f"evaluating {stage} (--eval)", file=sys.stderr, flush=True)


def audit_args(args: argparse.Namespace, notes: list[str] | None = None) -> dict:
    """Keyword arguments of :func:`graphaudit.pipeline.audit` for explain/compare/diff/render arguments. With a
    ``notes`` list, the notes of argument reading are appended to it, for the caller to say (:func:`say_notes`)
    once the outputs are checked, so that a refused output is the first line the user sees: ``--max-samples``
    cannot cap the ``--eval`` hook (a whole-set hook), more ``--workers`` than CPUs, options acting on samples
    when none run (:func:`idle_sample_options`). Without one, the second is printed on stderr at once and the
    others are not said.

    Raises:
        GraphAuditError: ``--eval-samples`` without ``--eval``, a bad hook spec, or a per-sample hook without
            ``--eval-samples`` or with a path that does not exist (exit 2 before any work).
    """
    hook = getattr(args, "eval_hook", None)
    if getattr(args, "eval_samples", None) and not hook:
        raise GraphAuditError("--eval-samples needs --eval MODULE:FUNCTION (the function that reads them)")
    kw = {"source": args.source, "config": load_config(getattr(args, "config", None)),
          "data": getattr(args, "data", None), "log": getattr(args, "log", None),
          "find_log": args.command == "explain" and not getattr(args, "no_log", True),
          "numeric": numeric_options(args, notes)}
    if hook:  # loaded here: a bad spec is exit 2 before any work
        from .evaluate import as_eval_hook

        from .numeric.evalhook import check_hook_samples

        kw.update(eval_hook=as_eval_hook(hook), eval_samples=args.eval_samples)
        check_hook_samples(kw["eval_hook"], args.eval_samples)
        if kw["eval_hook"].per_sample and args.eval_samples and not os.path.exists(args.eval_samples):
            # graphaudit lists a per-sample hook's files itself: a missing path is bad input, not a finding
            raise GraphAuditError(f"{args.eval_samples}: no such file or directory (--eval-samples of a per-sample "
                                  "hook)")
        n = getattr(args, "max_samples", None)
        if notes is not None and n is not None and not kw["eval_hook"].per_sample:
            notes.append(f"graphaudit: note: --max-samples {n} does not cap --eval {hook}: a whole-set hook reads "
                         "--eval-samples itself (a hook with per_sample = True runs on the first "
                         f"{n} files)")
    idle = idle_sample_options(args)
    if notes is not None and idle:
        notes.append(f"graphaudit: note: {', '.join(idle)} {'has' if len(idle) == 1 else 'have'} no effect: no "
                     "samples run (give --data PATH, --random N or --config YAML)")
    return kw


def idle_sample_options(args: argparse.Namespace) -> list[str]:
    """The options given (other than their defaults) that act only on samples run through the stages, as typed
    (``["--max-samples 3"]``), when an ``explain`` of stage paths or a ``render`` runs none: no ``--data``,
    ``--random``, ``--config`` (its cal_data_dir) or ``--eval`` hook. Empty otherwise (``explain`` without paths
    runs the bundled samples; ``compare``, ``bisect`` and ``check-inputs`` refuse to run without samples)."""
    if args.command not in ("explain", "render") or (args.command == "explain" and not args.paths) or any(
            getattr(args, k, None) is not None for k in ("data", "random", "config", "eval_hook")):
        return []
    defaults = sample_option_defaults()
    idle = []
    for flag in ("--max-samples", "--seed", "--threshold", "--no-isolated", "--raw-dtype", "--raw-shape",
                 "--input-shape", "--runtime", "--workers", "--ray"):
        dest = flag[2:].replace("-", "_")
        value = getattr(args, dest, None)
        if value != defaults[dest]:
            idle += [flag] if isinstance(value, bool) else [f"{flag} {v}" for v in (
                value if isinstance(value, list) else [value])]
    return idle


def say_notes(notes: list[str]) -> None:
    """Print the notes :func:`audit_args` collected on stderr, one line each, and empty the list."""
    for note in notes:
        print(note, file=sys.stderr, flush=True)
    notes.clear()
