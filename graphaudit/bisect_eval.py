"""The user's metric as the bisection's oracle: stage a, stage b and each hybrid measured by the eval hook."""

from __future__ import annotations

import math
import os

import onnx

from .errors import GraphAuditError
from .evaluate import as_eval_hook
from .numeric.compare import StageFeeder
from .numeric.evalhook import EvalRunner, check_hook_samples, run_hook

__all__ = ["HookOracle"]


class HookOracle:
    """Share of the drop in the user's metric that a hybrid recovers: ``(m(hybrid) - m(b)) / (m(a) - m(b))``, with
    the sign turned for a value that is better when lower.

    Parameters
    ----------
    stages : list of StageGraph
        The pipeline; ``pair`` the transition.
    hook : str or callable
        ``--eval`` (:func:`graphaudit.evaluate.as_eval_hook`); ``samples`` its ``--eval-samples``.
    runtime : str
        The resolved runtime (``"onnxruntime"`` or ``"horizon"``); ``config`` declares layout and colour.
    data_stage : int
        The stage whose contract ``runner.feeds_from`` converts from.
    max_samples : int, optional
        A per-sample hook runs on the first ``max_samples`` files of ``samples`` (``--max-samples``); a whole-set
        hook reads ``samples`` itself.

    Raises
    ------
    GraphAuditError
        The hook fails on stage a or b, returns no number, or the metric does not drop from a to b.
    """

    def __init__(self, stages, pair: int, hook, samples: str | os.PathLike | None, runtime: str, config,
                 data_stage: int, max_samples: int | None = None):
        self.stages, self.pair, self.runtime, self.max_samples = stages, pair, runtime, max_samples
        self.hook = as_eval_hook(hook)
        self.samples = None if samples is None else str(samples)
        self.feeder = StageFeeder(stages, data_stage, "tensor", config, None)
        first = self._values(pair, None)
        self.name = next(iter(first))
        self.lower = self.name in self.hook.lower_names([self.name])
        self.a = first[self.name]
        self.b = self.value(None)
        for st, v in ((stages[pair], self.a), (stages[pair + 1], self.b)):
            if not math.isfinite(v):
                raise GraphAuditError(f"--eval {self.hook.spec}: {self.name} on {st.name} is {v}, not a finite "
                                      "number: nothing to measure a drop against")
        if self._gain(self.a, self.b) <= 0:
            raise GraphAuditError(f"--eval {self.hook.spec}: {self.name} does not drop from {stages[pair].name} "
                                  f"({self.a}) to {stages[pair + 1].name} ({self.b}): no drop to bisect")

    @staticmethod
    def check(hook, samples: str | os.PathLike | None) -> None:
        """Refuse, before any work, a bad hook spec or a per-sample hook without ``samples`` (GraphAuditError,
        :func:`graphaudit.numeric.evalhook.check_hook_samples`)."""
        check_hook_samples(as_eval_hook(hook), samples)

    def _values(self, i: int, model: onnx.ModelProto | None) -> dict[str, float]:
        runner = EvalRunner(self.stages[i], self.runtime, model=model,
                            convert=lambda sample, k, i=i: self.feeder.feeds(i, sample, k))
        m = run_hook(self.hook, runner, self.samples, self.max_samples, allow_nan=True)  # NaN: a share not measured
        if m.error or not m.values:
            raise GraphAuditError(f"--eval {self.hook.spec} on {self.stages[i].name}"
                                  f"{' (a hybrid)' if model is not None else ''}: {m.error or 'no value returned'}")
        return {k: float(v) for k, v in m.values.items()}

    def _gain(self, better: float, worse: float) -> float:
        return worse - better if self.lower else better - worse

    def hybrid_value(self, ev, revert: list[int]) -> float:
        """The metric of the hybrid of ``ev`` (a :class:`graphaudit.hybrideval.HybridEvaluator`: alignment, changes,
        models a and b) with changes ``revert`` reverted, in b's place."""
        from .numeric.hybrid import build_hybrid

        return self.value(build_hybrid(ev.al, ev.changes, revert, ev.model_a, ev.model_b))

    def value(self, model: onnx.ModelProto | None) -> float:
        """The metric of stage b, or of ``model`` (a hybrid) in b's place."""
        return self._values(self.pair + 1, model)[self.name]

    def share(self, value: float) -> float:
        """The share of the drop a hybrid with metric ``value`` recovers (1 at a's value, 0 at b's)."""
        return self._gain(value, self.b) / self._gain(self.a, self.b)
