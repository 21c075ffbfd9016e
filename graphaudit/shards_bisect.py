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

from .errors import GraphAuditError
from .hybrideval import HybridEvaluator
from .measure import NumericOptions, sample_source
from .scaleout import WorkerPool, shard_ranges
from .shards import Failure, PipelineSpec, absolute, results_of, worker_pipeline

__all__ = ["ShardedHybrids", "hybrid_task"]

_EVALUATORS: dict = {}


def hybrid_task(spec: PipelineSpec, pair: int, data: str | None, opts: NumericOptions, idx: int, runtime: str,
                window: tuple[int, int], revert: list[int] | None, fix_units: list[int] | None, ticks=None):
    """Worker side: ``(noise, signal)`` of one hybrid (changes ``revert`` reverted, or the int16 fix of
    ``fix_units``) on samples ``window``, or a :class:`Failure`."""
    try:
        key = (spec.key(), pair, data, window, runtime)
        ev = _EVALUATORS.get(key)
        if ev is None:
            _EVALUATORS.clear()
            stages, lineage, changes = worker_pipeline(spec)
            src = sample_source(stages, idx, data, opts, spec.config)
            ev = _EVALUATORS[key] = HybridEvaluator(stages, pair, lineage.alignments[pair], changes[pair], src, idx,
                                                    spec.config, runtime, window[1], window)
        return ev.fix_noise(fix_units) if fix_units is not None else ev.noise(revert or [])
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
        self.count = min(max_samples, len(sample_source(stages, idx, data, opts, config)))
        if not self.count:
            raise GraphAuditError("no samples in the data")
        self.spec = PipelineSpec.of(stages, config)
        self.data = absolute(data)
        self.opts = replace(opts, progress=None, eval_progress=None, scale=None)
        self.windows = shard_ranges(self.count, pool.size)

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
        for n, s in results_of(self.pool.map(hybrid_task, tasks)):
            noise, signal = noise + n, signal + s
        return noise, signal

    def noise(self, revert: list[int], model: onnx.ModelProto | None = None) -> tuple[float, float]:
        """(noise, signal) energies of the hybrid with changes ``revert`` reverted, over every sample (a ``model``
        cannot be sent to the workers: ValueError)."""
        if model is not None:
            raise ValueError("a sharded evaluation takes the changes to revert, not a model")
        return self._sums(list(revert), None)

    def fix_noise(self, unit_changes: list[int]) -> tuple[float, float]:
        """(noise, signal) of b as the hb_mapper fix of ``unit_changes`` would make it."""
        return self._sums(None, list(unit_changes))
