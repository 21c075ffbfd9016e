"""The eval hook (``--eval``) over workers: a per-sample hook's samples sharded, a whole-set hook one stage per task.

A hook that returns one value over all its samples (top-1 over the set, mAP) cannot be split without knowing how
its value combines, so it runs whole on one worker per stage (the stages run in parallel; each value is exactly the
one-process value). A hook declaring ``per_sample = True`` returns each sample's values; their float64 sums and
counts merge across shards of the sample files (:class:`graphaudit.numeric.merge.MeanAccumulator`), and the stage's
value is the mean, as in one process (within the sums' tolerance, :mod:`graphaudit.numeric.merge`).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

from .errors import GraphAuditError, StageRunError
from .evaluate import as_eval_hook, evaluate_stages
from .measure import data_stage_of, unrunnable_stages
from .numeric.backends import resolve_runtime
from .numeric.compare import StageFeeder
from .numeric.evalhook import (EvalHook, EvalRunner, load_eval_hook, not_run_metric, per_sample_sums, run_hook,
                               sample_files, stage_metric)
from .numeric.merge import MeanAccumulator
from .numeric.summary import MetricSection, StageMetric
from .scaleout import ScaleOut, WorkerPool, here, shard_ranges
from .shards import Failure, PipelineSpec, results_of, sent, worker_pipeline

__all__ = ["evaluate_scaled", "portable_spec", "eval_task", "here_spec"]


def portable_spec(hook: EvalHook) -> str | None:
    """The hook's spec as a worker can load it (as given: workers run in this process's working directory,
    :func:`here_spec`), or None for a callable given in Python (it cannot be sent to another process without
    pickling the user's object)."""
    where, sep, _attr = hook.spec.rpartition(":")
    if not sep or not where:
        return None
    return hook.spec


def here_spec(spec: str) -> str:
    """In a worker, a hook spec as sent, its file path usable here (:func:`graphaudit.scaleout.here`)."""
    where, _, attr = spec.rpartition(":")
    if where.endswith(".py") or "/" in where or "\\" in where:
        return f"{here(where)}:{attr}"
    return spec


def _runner(spec: PipelineSpec, i: int, runtime: str) -> EvalRunner:
    """Stage ``i``'s runner in a worker, converting samples as :func:`graphaudit.evaluate_stages` does."""
    stages = worker_pipeline(spec)[0]
    feeder = StageFeeder(stages, data_stage_of(stages), "tensor", spec.config, None)
    return EvalRunner(stages[i], runtime, convert=lambda sample, k: feeder.feeds(i, sample, k))


def eval_task(spec: PipelineSpec, i: int, hook_spec: str, cwd: str, runtime: str, samples: str | None,
              window: tuple[int, int] | None, ticks=None):
    """Worker side: the hook on stage ``i``, whole (``window`` None: a StageMetric) or on the per-sample files
    ``window`` (``(MeanAccumulator, samples run, error, runtime label, files left out)``); a stage the runtime refuses comes back as
    a StageMetric with ``not_run``; a bad hook spec as a :class:`Failure`."""
    if cwd not in sys.path:
        sys.path.append(cwd)  # a module:function spec resolves as it did in the calling process
    try:
        hook = load_eval_hook(here_spec(hook_spec))
        stages = worker_pipeline(spec)[0]
        try:
            runner = _runner(spec, i, runtime)
        except StageRunError as e:
            return StageMetric(stage=stages[i].name, not_run=str(e))
        if window is None:
            return run_hook(hook, runner, here(samples))
        files = sample_files(here(samples))[window[0]:window[1]]
        acc, error, left_out = per_sample_sums(hook, runner, files, None if ticks is None else ticks.put)
        return acc, runner.samples_run, error, runner.runtime, left_out
    except GraphAuditError as e:
        return Failure.of(e)


def _merged(stage: str, parts: list, seconds: float) -> StageMetric:
    """One stage's per-sample shards (in sample order) as its StageMetric: sums merged up to the first shard that
    failed (the samples a single process would have run before the error)."""
    acc, samples, error, runtime, left_out = MeanAccumulator(), 0, None, None, []
    for part in parts:
        if isinstance(part, StageMetric):  # not run: the same in every shard
            return part
        p_acc, p_samples, p_error, runtime, p_left = part
        acc, samples = acc.merge(p_acc), samples + p_samples
        left_out += p_left
        if p_error and not p_error.startswith("every sample holds NaN"):  # a shard's own "all left out" is not the
            error = p_error                                                  # whole set's (said below when it is)
            break
    if error is None and left_out and not acc.counts:
        error = f"every sample holds NaN or infinite values ({len(left_out)} left out, e.g. {Path(left_out[0]).name})"
    return stage_metric(stage, runtime, acc, samples, error, seconds, left_out)


def evaluate_scaled(stages, hook, samples: str | os.PathLike | None = None, *, runtime: str = "auto", config=None,
                    progress: Callable[[str], None] | None = None, scale: ScaleOut | None = None,
                    max_samples: int | None = None) -> MetricSection:
    """:func:`graphaudit.evaluate.evaluate_stages` on ``scale``'s workers (in this process when ``scale`` is None or
    not active, or the hook is a callable given in Python rather than a ``module:function`` spec); a per-sample
    hook on the first ``max_samples`` files when given.

    Raises
    ------
    GraphAuditError
        As ``evaluate_stages``; a per-sample hook without sample files; Ray missing or unreachable.
    """
    ev = as_eval_hook(hook)
    spec_str = portable_spec(ev)
    if scale is None or not scale.active or spec_str is None:
        return evaluate_stages(stages, ev, samples, runtime=runtime, config=config, progress=progress,
                               max_samples=max_samples)
    try:
        rt = resolve_runtime(runtime)
    except ValueError as e:
        raise GraphAuditError(f"runtime: {e}") from e
    samples = None if samples is None else str(samples)
    not_runnable = dict(unrunnable_stages(stages, rt))
    run = [i for i in range(len(stages)) if i not in not_runnable]
    spec, t0 = PipelineSpec.of(stages, config), time.perf_counter()
    with WorkerPool(scale) as pool:
        # the shards cover the first max_samples files (a prefix: each worker's window lies inside it)
        windows = shard_ranges(len(sample_files(samples, max_samples)), pool.size) if ev.per_sample else [None]
        for i in run:
            if progress is not None:
                progress(stages[i].name)
        tasks = [(spec, i, spec_str, os.getcwd(), rt, sent(samples), w) for i in run for w in windows]
        outs = results_of(pool.map(eval_task, tasks))
    seconds = time.perf_counter() - t0
    per_stage = {i: outs[k * len(windows):(k + 1) * len(windows)] for k, i in enumerate(run)}
    metrics = []
    for i, st in enumerate(stages):
        if i in not_runnable:
            metrics.append(not_run_metric(st.name, not_runnable[i]))
        elif ev.per_sample:
            metrics.append(_merged(st.name, per_stage[i], seconds))
        else:
            metrics.append(per_stage[i][0])
    names = list(dict.fromkeys(k for m in metrics for k in m.values))
    return MetricSection(hook=ev.spec, samples=samples, lower_is_better=ev.lower_names(names), stages=metrics)
