"""The hybrid evaluations of ``graphaudit bisect`` sharded over workers (``--workers`` / ``--ray``).

The search itself is sequential (each step picks the next hybrid from the last one's share); each evaluation runs
stage a and the hybrid on every sample and sums the output noise and signal energies. :class:`ShardedHybrids` sends
each worker the recipe of the hybrid (the changes reverted, or the changes of the int16 fix), never the model; the
worker rebuilds the pipeline and a :class:`graphaudit.hybrideval.HybridEvaluator` on its contiguous range of the
samples once, keeps it for the next evaluation, and returns its two sums, which add in sample order (float64; the
tolerance of :mod:`graphaudit.numeric.merge`).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import onnx

from .bisect_eval import HookOracle
from .errors import GraphAuditError
from .evaluate import as_eval_hook
from .evalshards import here_spec, portable_spec
from .hybrideval import HybridEvaluator
from .numeric.compare import StageFeeder
from .numeric.evalhook import EvalRunner, load_eval_hook, per_sample_sums, sample_files
from .numeric.hybrid import build_hybrid
from .numeric.merge import MeanAccumulator
from .measure import NumericOptions, sample_source
from .scaleout import WorkerPool, here, shard_ranges
from .shards import Failure, PipelineSpec, results_of, sent, worker_pipeline

_MODELS: dict = {}

__all__ = ["ShardedHybrids", "hybrid_task", "ShardedHookOracle", "hook_oracle", "hook_task"]

_EVALUATORS: dict = {}


def hybrid_task(spec: PipelineSpec, pair: int, data: str | None, opts: NumericOptions, idx: int, runtime: str,
                window: tuple[int, int], revert: list[int] | None, fix_units: list[int] | None, ticks=None):
    """Worker side: ``(noise, signal, left out)`` of one hybrid (changes ``revert`` reverted, or the int16 fix of
    ``fix_units``) on samples ``window`` (left out: sample index -> why, :attr:`HybridEvaluator.left_out`), or a
    :class:`Failure`."""
    try:
        key = (spec.key(), pair, data, window, runtime)
        ev = _EVALUATORS.get(key)
        if ev is None:
            _EVALUATORS.clear()
            stages, lineage, changes = worker_pipeline(spec)
            src = sample_source(stages, idx, here(data), opts, spec.config)
            ev = _EVALUATORS[key] = HybridEvaluator(stages, pair, lineage.alignments[pair], changes[pair], src, idx,
                                                    spec.config, runtime, window[1], window)
        n, s = ev.fix_noise(fix_units) if fix_units is not None else ev.noise(revert or [])
        return n, s, dict(ev.left_out)
    except GraphAuditError as e:
        return Failure.of(e)


class ShardedHybrids:
    """:class:`graphaudit.hybrideval.HybridEvaluator`'s interface (``noise``, ``fix_noise``, ``count``, ``al``,
    ``changes``, ``model_a``, ``model_b``) over the workers of ``pool``.

    Parameters
    ----------
    pool : WorkerPool
    stages, pair, al, changes, data, opts, idx, config, runtime, max_samples
        As for ``HybridEvaluator`` (``data`` the path or None, ``opts`` the NumericOptions the samples are opened
        with).

    Raises
    ------
    GraphAuditError
        No samples in the data.
    """

    def __init__(self, pool: WorkerPool, stages, pair: int, al, changes, data, opts: NumericOptions, idx: int,
                 config, runtime: str, max_samples: int):
        self.pool, self.pair, self.al, self.changes, self.runtime, self.idx = pool, pair, al, changes, runtime, idx
        self.paths = (stages[pair].path, stages[pair + 1].path)
        self.total = min(max_samples, len(sample_source(stages, idx, data, opts, config)))
        if not self.total:
            raise GraphAuditError("no samples in the data")
        self.left_out: dict[int, str] = {}  # as HybridEvaluator's, gathered from the shards
        self.spec = PipelineSpec.of(stages, config)
        self.data = sent(data)
        self.opts = replace(opts, progress=None, eval_progress=None, scale=None)
        self.windows = shard_ranges(self.total, pool.size)

    @cached_property
    def model_a(self) -> onnx.ModelProto:
        return onnx.load(self.paths[0])

    @cached_property
    def model_b(self) -> onnx.ModelProto:
        return onnx.load(self.paths[1])

    def _sums(self, revert: list[int] | None, fix_units: list[int] | None) -> tuple[float, float]:
        tasks = [(self.spec, self.pair, self.data, self.opts, self.idx, self.runtime, w, revert, fix_units)
                 for w in self.windows]
        noise = signal = 0.0
        for n, s, left in results_of(self.pool.map(hybrid_task, tasks)):
            noise, signal = noise + n, signal + s
            self.left_out.update(left)
        if not self.count:
            raise GraphAuditError(f"every sample holds NaN or infinite values ({len(self.left_out)} left out, e.g. "
                                  f"{next(iter(self.left_out.values()))})")
        return noise, signal

    @property
    def count(self) -> int:
        """Samples each evaluation runs (:attr:`HybridEvaluator.count`)."""
        return self.total - len(self.left_out)

    def noise(self, revert: list[int], model: onnx.ModelProto | None = None) -> tuple[float, float]:
        """(noise, signal) energies of the hybrid with changes ``revert`` reverted, over every sample (a ``model``
        cannot be sent to the workers: ValueError)."""
        if model is not None:
            raise ValueError("a sharded evaluation takes the changes to revert, not a model")
        return self._sums(list(revert), None)

    def fix_noise(self, unit_changes: list[int]) -> tuple[float, float]:
        """(noise, signal) of b as the hb_mapper fix of ``unit_changes`` would make it."""
        return self._sums(None, list(unit_changes))


def _hybrid_model(spec: PipelineSpec, pair: int, revert: list[int]):
    """The hybrid of transition ``pair`` with ``revert`` reverted, built in the worker from the stage files."""
    stages, lineage, changes = worker_pipeline(spec)
    if _MODELS.get("key") != (spec.key(), pair):
        _MODELS.clear()
        _MODELS.update(key=(spec.key(), pair), models=(onnx.load(stages[pair].path), onnx.load(stages[pair + 1].path)))
    return build_hybrid(lineage.alignments[pair], changes[pair], revert, *_MODELS["models"])


def hook_task(spec: PipelineSpec, i: int, pair: int, hook_spec: str, runtime: str, samples: str, idx: int,
              window: tuple[int, int], revert: list[int] | None, ticks=None):
    """Worker side of :class:`ShardedHookOracle`: a per-sample hook on the sample files ``window`` of stage ``i``, or
    of the hybrid of ``revert`` in stage ``pair + 1``'s place: ``(MeanAccumulator, samples run, error)``, or a
    :class:`Failure`."""
    try:
        hook = load_eval_hook(here_spec(hook_spec))
        stages = worker_pipeline(spec)[0]
        feeder = StageFeeder(stages, idx, "tensor", spec.config, None)
        model = None if revert is None else _hybrid_model(spec, pair, revert)
        runner = EvalRunner(stages[i], runtime, model=model, convert=lambda sample, k: feeder.feeds(i, sample, k))
        acc, error, _left_out = per_sample_sums(hook, runner, sample_files(here(samples))[window[0]:window[1]],
                                                allow_nan=True)  # as HookOracle: a NaN hybrid is a share not measured
        return acc, runner.samples_run, error
    except GraphAuditError as e:
        return Failure.of(e)


class ShardedHookOracle(HookOracle):
    """:class:`graphaudit.bisect_eval.HookOracle` for a per-sample hook, each evaluation's sample files sharded over
    ``pool``'s workers (the hybrid sent as the changes it reverts) and the values merged as float64 sums / counts.

    Raises
    ------
    GraphAuditError
        As ``HookOracle``.
    """

    def __init__(self, pool: WorkerPool, spec_str: str, stages, pair: int, hook, samples, runtime: str, config,
                 data_stage: int, max_samples: int | None = None):
        self.pool, self.spec_str, self.idx = pool, spec_str, data_stage
        self.spec = PipelineSpec.of(stages, config)
        self.files = sent(samples)
        # the shards cover the first max_samples files (a prefix: each worker's window lies inside it)
        self.windows = shard_ranges(len(sample_files(self.files, max_samples)), pool.size)
        super().__init__(stages, pair, hook, samples, runtime, config, data_stage, max_samples)

    def _run(self, i: int, revert: list[int] | None) -> dict[str, float]:
        tasks = [(self.spec, i, self.pair, self.spec_str, self.runtime, self.files, self.idx, w, revert)
                 for w in self.windows]
        acc, error = MeanAccumulator(), None
        for part, _samples, part_error in results_of(self.pool.map(hook_task, tasks)):
            acc = acc.merge(part)
            if part_error:
                error = part_error
                break
        if error or not acc.sums:
            raise GraphAuditError(f"--eval {self.hook.spec} on {self.stages[i].name}"
                                  f"{' (a hybrid)' if revert is not None else ''}: {error or 'no value returned'}")
        return acc.means()

    def _values(self, i: int, model) -> dict[str, float]:
        if model is not None:
            raise ValueError("a sharded evaluation takes the changes to revert, not a model")
        return self._run(i, None)

    def hybrid_value(self, ev, revert: list[int]) -> float:
        """The metric of the hybrid with changes ``revert`` reverted in b's place, over the workers."""
        return self._run(self.pair + 1, list(revert))[self.name]


def hook_oracle(pool: WorkerPool | None, stages, pair: int, hook, samples, runtime: str, config,
                data_stage: int, max_samples: int | None = None) -> HookOracle:
    """The bisection's oracle for the user's metric: sharded over ``pool`` for a per-sample hook named by a spec a
    worker can load, else :class:`HookOracle` in this process (a whole-set metric is one evaluation that cannot be
    split); a per-sample hook on the first ``max_samples`` sample files when given."""
    ev = as_eval_hook(hook)
    spec_str = portable_spec(ev)
    if pool is None or not ev.per_sample or spec_str is None:
        return HookOracle(stages, pair, ev, samples, runtime, config, data_stage, max_samples)
    return ShardedHookOracle(pool, spec_str, stages, pair, ev, samples, runtime, config, data_stage, max_samples)
