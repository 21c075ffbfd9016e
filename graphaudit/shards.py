"""The samples of the numeric comparison and of the eval hook, sharded over workers (``--workers`` / ``--ray``).

Each worker is given paths and sample ranges, never a model: it loads the stages from their files (as
:func:`graphaudit.load_stage` does, with the roles and names of this process), aligns and classifies them again (the
same deterministic steps), opens the same data, runs its contiguous range of samples and returns its accumulators
(:func:`graphaudit.numeric.compare.compare_stages`'s results, the eval hook's per-sample sums), which this process
merges in sample order (:mod:`graphaudit.numeric.merge`; float tolerance there). A worker keeps the last pipeline
it built, so the tasks of one job (the hybrid evaluations of a bisection) rebuild it once per worker. Errors a
worker meets come back as the exception one process would raise (the one of the first shard, in sample order),
so they become the same findings and one-line errors.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace
from typing import Callable

from .classify import classify
from .digests import sha256
from .errors import GraphAuditError, NoSampleLeftError, StageRunError
from .lineage import align_chain
from .load import file_identity, load_stage
from .measure import NumericOptions, NumericRun, _subset, run_numeric, sample_source
from .numeric.compare import CompareOptions, TransitionNumeric, compare_stages
from .numeric.merge import merge_transitions
from .scaleout import WorkerPool, here, shard_ranges
from .stage import StageGraph

__all__ = ["PipelineSpec", "Failure", "run_numeric_scaled", "sharded_compare", "worker_pipeline", "compare_task",
           "progress_counter", "sent"]


@dataclass(frozen=True)
class PipelineSpec:
    """What a worker needs to rebuild the pipeline: per stage ``(path, role, name, sha256)``, in pipeline order (the
    path as this process names it: workers run in its working directory, :func:`graphaudit.scaleout.run_task`), and
    the conversion config this process parsed (our own object, or None). The SHA-256 of each file, taken when the
    spec is made, is checked by every worker before it loads the file: a file replaced during the run, or a node of a
    cluster holding another copy at the same path, is a one-line error, not a report mixing two models. The file
    must still be the one this process loaded (:attr:`StageGraph.file_identity` before and after hashing): a file
    written in place between the load and the spec would otherwise hash as the run's own."""

    stages: tuple[tuple[str, str, str], ...]
    config: object = None

    @classmethod
    def of(cls, stages: list[StageGraph], config=None) -> "PipelineSpec":
        """The spec of loaded stages (each must have come from a file: ``stage.path``)."""
        for st in stages:
            if not st.path or not os.path.isfile(st.path):
                raise GraphAuditError(f"{st.name}: --workers/--ray need stages loaded from files (no file at "
                                      f"{st.path!r})")
        return cls(tuple((str(st.path), st.role, st.name, _loaded_sha256(st)) for st in stages), config)

    def key(self) -> tuple:
        return self.stages


_CACHE: dict = {}


def file_sha256(path: str) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks; a file that cannot be read is a GraphAuditError."""
    h = sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as e:
        raise GraphAuditError(f"{path}: cannot be read ({e.strerror or e})") from e
    return h.hexdigest()


def _loaded_sha256(st: StageGraph) -> str:
    """:func:`file_sha256` of the stage's file, provided the file is still the one loaded (same identity before and
    after hashing); a GraphAuditError otherwise."""
    before = _identity(st.path)
    digest = file_sha256(st.path)
    if st.file_identity is not None and not (before == _identity(st.path) == st.file_identity):
        raise GraphAuditError(f"{st.path}: the file changed after it was loaded (written during the run); run again "
                              "once it is complete")
    return digest


def _identity(path: str) -> tuple | None:
    try:
        return file_identity(os.stat(path))
    except OSError:
        return None


def worker_pipeline(spec: PipelineSpec):
    """``(stages, lineage, changes)`` rebuilt from the files of ``spec`` (kept for the next task of the same
    pipeline in this worker process)."""
    if _CACHE.get("key") != spec.key():
        _CACHE.clear()
        for p, _r, _n, sha in spec.stages:
            if file_sha256(here(p)) != sha:
                raise GraphAuditError(f"{p}: the file differs from the one the run started with (replaced during "
                                      f"the run, or another copy on this worker{' ' + socket.gethostname()})")
        stages = [load_stage(here(p), role=r, name=n) for p, r, n, _sha in spec.stages]
        lineage = align_chain(stages)
        _CACHE.update(key=spec.key(), value=(stages, lineage, [classify(al) for al in lineage.alignments]))
    return _CACHE["value"]


@dataclass
class Failure:
    """A :class:`GraphAuditError` raised in a worker, carried back with the attributes its ``args`` lose in pickling
    (``StageRunError.path``, ``LoweringError.failures``)."""

    kind: type
    message: str
    attrs: dict

    @classmethod
    def of(cls, e: GraphAuditError) -> "Failure":
        return cls(type(e), str(e), {k: v for k, v in vars(e).items() if isinstance(v, (str, list, tuple))})

    def error(self) -> GraphAuditError:
        """The exception, as the worker raised it."""
        try:
            e = self.kind(self.message)
        except TypeError:
            e = GraphAuditError(self.message)
        for k, v in self.attrs.items():
            setattr(e, k, v)
        return e


def sent(path) -> str | None:
    """``path`` as a string to send to the workers, as the user gave it (workers run in this process's working
    directory, or resolve it against it: :func:`graphaudit.scaleout.here`), so that their errors and the hook's
    arguments name the paths one process names; or None."""
    return None if path is None else str(path)


def _tick(ticks) -> Callable[[int], None] | None:
    return None if ticks is None else (lambda _k: ticks.put(1))


def compare_task(spec: PipelineSpec, idxs: list[int], data, opts: NumericOptions, copts: CompareOptions,
                 start: int, stop: int, ticks=None):
    """Worker side of :func:`sharded_compare`: samples ``start .. stop - 1`` of the data compared on the stages
    ``idxs`` of the pipeline. Returns the list of TransitionNumeric, or a :class:`Failure`."""
    try:
        stages, lineage, changes = worker_pipeline(spec)
        home = idxs[copts.data_stage]
        src = sample_source(stages, home, here(data), opts, spec.config)
        names = [str(f) for f in src.files] if len(src.files) == len(src) else None
        labels = names[start:stop] if names else [f"sample {k}" for k in range(start, stop)]
        sub, als, chs = _subset(stages, lineage, changes, idxs)
        mine = replace(copts, progress=_tick(ticks), sample_names=labels, max_samples=None, config=spec.config)
        return compare_stages(sub, als, chs, src.window(start, stop), mine)
    except GraphAuditError as e:
        return Failure.of(e)


def progress_counter(progress: Callable[[int], None] | None) -> Callable[[int], None] | None:
    """A callback taking "n more samples done" from any worker and calling ``progress(i)`` with the 0-based index
    of the last sample done over all workers (the per-sample callback of :class:`NumericOptions`)."""
    if progress is None:
        return None
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        progress(done - 1)

    return tick


def results_of(outs: list) -> list:
    """The workers' results in task order; the first :class:`Failure` (in task order) raised as its error."""
    for out in outs:
        if isinstance(out, Failure):
            raise out.error()
    return outs


def sharded_compare(pool: WorkerPool, spec: PipelineSpec, changes, data, opts: NumericOptions, paths: list):
    """The ``shard`` callable of :func:`graphaudit.measure.run_numeric`: the stages ``idxs`` compared on every sample,
    the samples split into ``pool.size`` contiguous ranges, one task each, merged in sample order. ``paths``: the
    stages' paths as this process names them (a refused stage's StageRunError carries its own)."""

    def shard(idxs: list[int], _src, copts: CompareOptions, total: int) -> list[TransitionNumeric]:
        if total == 0:
            raise GraphAuditError("no samples in the data")
        plain = replace(copts, progress=None, sample_names=None, max_samples=None, config=None, partial=True)
        wopts = replace(opts, progress=None, eval_progress=None, scale=None)
        tasks = [(spec, idxs, sent(data), wopts, plain, a, b)
                 for a, b in shard_ranges(total, pool.size)]
        try:
            outs = results_of(pool.map(compare_task, tasks, progress_counter(copts.progress)))
        except StageRunError as e:  # the stage by the path this process knows it by (run_numeric leaves it out)
            e.path = next((str(mine) for (sent, _r, _n, _sha), mine in zip(spec.stages, paths) if sent == e.path), e.path)
            raise
        chs = [changes[j] if k == j + 1 else [] for j, k in zip(idxs, idxs[1:])]
        merged = merge_transitions(outs, chs)
        if merged and len(merged[0].left_out) >= total:  # every sample left out: the one-process error
            raise NoSampleLeftError.of(merged[0].left_out)
        return merged

    return shard


def run_numeric_scaled(stages: list[StageGraph], lineage, changes, data=None, opts: NumericOptions | None = None,
                       data_stage: int | None = None, config=None, pool: WorkerPool | None = None) -> NumericRun:
    """:func:`graphaudit.measure.run_numeric`, with the samples sharded over ``opts.scale``'s workers when it is set
    (or over ``pool``, an open pool of the caller): the same :class:`NumericRun`, figures equal within the tolerance
    of :mod:`graphaudit.numeric.merge`.

    Raises
    ------
    GraphAuditError
        As ``run_numeric``; Ray missing or unreachable, bad worker settings (one line).
    """
    o = opts or NumericOptions()
    scale = o.scale
    if pool is None and (scale is None or not scale.active):
        return run_numeric(stages, lineage, changes, data, o, data_stage, config)
    spec = PipelineSpec.of(stages, config)
    if pool is not None:
        return run_numeric(stages, lineage, changes, data, o, data_stage, config,
                           shard=sharded_compare(pool, spec, changes, data, o, [st.path for st in stages]))
    with WorkerPool(scale) as own:
        return run_numeric(stages, lineage, changes, data, o, data_stage, config,
                           shard=sharded_compare(own, spec, changes, data, o, [st.path for st in stages]))

