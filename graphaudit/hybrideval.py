"""One transition's hybrids run on the samples: their output noise against stage a (the bisection's default oracle).

Used by :mod:`graphaudit.bisection` in this process and by :mod:`graphaudit.shards_bisect` on each worker's shard of
the samples (the sums of shards add to the sums over all samples).
"""

from __future__ import annotations

import onnx

from .classify import Change
from .errors import GraphAuditError, NonFiniteSampleError
from .lineage import Alignment
from .numeric.backends import make_session
from .numeric.compare import StageFeeder
from .numeric.hybrid import build_hybrid, hybrid_session_model, output_noise
from .numeric.int16fix import int16_calibration

__all__ = ["HybridEvaluator", "fix_model"]


class HybridEvaluator:
    """Runs hybrids of one transition on the samples and accumulates their output noise against stage a.

    Streamed: each evaluation reads the samples again and runs stage a and the hybrid on one sample at a time, so
    one sample's feeds and outputs per stage are held, never the whole set. ``window`` ``(start, stop)`` limits it
    to those samples (a shard of a sharded bisection, :mod:`graphaudit.shards_bisect`); default the first
    ``max_samples``. A sample whose feed holds NaN or infinite values is left out of every evaluation, as the
    numeric comparison leaves it out (:attr:`left_out`, filled by the first evaluation; :attr:`count` the samples
    that ran).

    Raises
    ------
    GraphAuditError
        An output of b without a counterpart in a, or no samples.
    """

    def __init__(self, stages, pair: int, al: Alignment, changes: list[Change], source, idx: int, config,
                 runtime: str, max_samples: int, window: tuple[int, int] | None = None):
        self.al, self.changes, self.pair, self.runtime = al, changes, pair, runtime
        self.path_a, self.path_b = stages[pair].path, stages[pair + 1].path
        self.model_a, self.model_b = onnx.load(stages[pair].path), onnx.load(self.path_b)
        files = getattr(source, "files", [])  # sample k named by its file where each file is one sample (as compare)
        self.feeder = StageFeeder(stages, idx, source.domain, config,
                                  [str(f) for f in files] if len(files) == len(source) else None)
        self.source, self.max_samples = source, max_samples
        self.sess_a = make_session(hybrid_session_model(self.model_a, stages[pair].path, runtime)
                                   .SerializeToString(), runtime)
        outs_a = [o.name for o in self.sess_a.get_outputs()]
        self.b_outputs = [o.name for o in self.model_b.graph.output]
        self.a_outputs = []  # stage a's output compared with each of b's, in b's order
        for k, name in enumerate(self.b_outputs):
            tm = al.tensor_map.get(name)
            a_name = tm.a if tm is not None and tm.a in outs_a else (outs_a[k] if len(outs_a) == len(
                self.b_outputs) else None)
            if a_name is None:
                raise GraphAuditError(f"{self.path_b}: output {name!r} has no counterpart among "
                                      f"{stages[pair].name}'s outputs")
            self.a_outputs.append(a_name)
        self.window = window if window is not None else (0, min(max_samples, len(source)))
        self.left_out: dict[int, str] = {}  # sample index -> why (NaN or infinite values in its feed)
        self._shard = window is not None  # a shard's samples may all be left out: the lead judges the whole set
        if self.window[1] <= self.window[0]:
            raise GraphAuditError("no samples in the data")

    @property
    def count(self) -> int:
        """Samples each evaluation runs: the window's, less those left out (known after the first evaluation)."""
        return max(0, self.window[1] - self.window[0]) - len(self.left_out)

    def noise(self, revert: list[int], model: onnx.ModelProto | None = None) -> tuple[float, float]:
        """(noise, signal) energies of the hybrid with changes ``revert`` reverted (or of ``model`` in b's place),
        over every sample."""
        model = model or build_hybrid(self.al, self.changes, revert, self.model_a, self.model_b)
        try:
            sess = make_session(hybrid_session_model(model, self.path_b, self.runtime).SerializeToString(),
                                self.runtime)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises several unrelated types
            raise GraphAuditError(f"{self.path_b}: the hybrid with {len(revert)} change(s) reverted does not "
                                  f"load ({str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__})"
                                  ) from e
        noise = signal = 0.0
        for k, sample in enumerate(self.source.window(*self.window), self.window[0]):
            if k in self.left_out:
                continue
            try:
                feeds_a, feeds_b = self.feeder.feeds(self.pair, sample, k), self.feeder.feeds(self.pair + 1, sample, k)
            except NonFiniteSampleError as e:
                self.left_out[k] = str(e)
                continue
            try:
                ref = self.sess_a.run(self.a_outputs, feeds_a)
            except Exception as e:  # noqa: BLE001 - onnxruntime (stock or Horizon's fork) raises several types
                raise GraphAuditError(f"{self.path_a}: the runtime fails on {self.feeder.label(k)} ({_first(e)})"
                                      ) from e
            try:
                got = sess.run(self.b_outputs, feeds_b)
            except Exception as e:  # noqa: BLE001 - onnxruntime (stock or Horizon's fork) raises several types
                raise GraphAuditError(f"{self.path_b}: the hybrid with {len(revert)} change(s) reverted does not "
                                      f"run on {self.feeder.label(k)} ({_first(e)})") from e
            n, s = output_noise(ref, got)
            noise, signal = noise + n, signal + s
        if not self.count and not self._shard:
            raise GraphAuditError(f"every sample holds NaN or infinite values ({len(self.left_out)} left out, e.g. "
                                  f"{next(iter(self.left_out.values()))})")
        return noise, signal


    def fix_noise(self, unit_changes: list[int]) -> tuple[float, float]:
        """(noise, signal) of b as the hb_mapper fix of the changes ``unit_changes`` would make it
        (:func:`fix_model`)."""
        return self.noise([], fix_model(self, unit_changes))


def _first(e: Exception) -> str:
    """The first line of a runtime's error (300 characters at most), or its type's name."""
    return str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__


def fix_model(ev: HybridEvaluator, unit_changes: list[int]):
    """b as the hb_mapper fix would make it: the units' activation HzCalibration nodes quantizing to int16 at their
    thresholds with what hb_mapper changes along with them (:func:`graphaudit.numeric.int16fix.int16_calibration`),
    their weight HzCalibration nodes reverted (the weight's node on the CPU, in float)."""
    al, changes = ev.al, ev.changes
    weights = [j for j in unit_changes if "weight" in changes[j].pattern]
    acts = [al.b.nodes[n].name or n for j in unit_changes if "weight" not in changes[j].pattern
            for n in changes[j].b_nodes]
    return int16_calibration(build_hybrid(al, changes, weights, ev.model_a, ev.model_b), acts)
