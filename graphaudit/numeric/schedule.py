"""The sample loop of a comparison: each sample run through the stages (side by side when there are cores, else one
after the other, each stage's values freed once reduced: :class:`StageValues`) and reduced (on one thread per core
when its tensors are large)."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Callable, Iterable

import numpy as np

__all__ = ["PARALLEL_MIN_BYTES", "stream", "for_each", "run_all", "cores", "StageValues"]

def stream(samples: Iterable[dict[str, np.ndarray]], run: Callable[[dict, int], list], reduce: Callable[[list], None],
           max_samples: int | None = None, progress: Callable[[int], None] | None = None) -> int:
    """For each sample ``k`` (at most ``max_samples``): ``values = run(sample, k)``, then ``reduce(values)``, then
    ``progress(k)``; returns the number of samples reduced. One sample's values are held at a time: they are freed
    before the next sample runs. (Running the next sample while one is reduced was measured: it holds two samples'
    tensors, +20 MB of peak RSS on PP-OCR cls, for no gain the 2-core machine could show.) A cap above
    ``sys.maxsize`` (``--max-samples 99999999999999999999``) caps nothing."""
    n = 0
    stop = None if max_samples is None or max_samples > sys.maxsize else max_samples
    for k, sample in islice(enumerate(samples), stop):
        values = run(sample, k)
        reduce(values)
        values = None  # noqa: F841 - freed before the next sample runs
        n += 1
        if progress is not None:
            progress(k)
    return n


def cores() -> int:
    """CPU cores this process may run on: its affinity mask on Linux, or a worker's share of the cores where a
    sharded run set one (:data:`graphaudit.numeric.backends.DEFAULT_THREADS`; 2 workers on 2 cores run their stages
    one after the other, not 2 x 2 threads)."""
    from . import backends

    if backends.DEFAULT_THREADS > 0:
        return backends.DEFAULT_THREADS
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


_STAGE_POOL: ThreadPoolExecutor | None = None


def run_all(calls: list[Callable[[], object]], concurrent: bool) -> list:
    """``[c() for c in calls]``, the calls running side by side on threads when ``concurrent`` (onnxruntime
    releases the GIL while a session runs). Results in order; the exception of the first failing call (in order)
    propagates after all have ended."""
    global _STAGE_POOL
    if not concurrent or len(calls) < 2:
        return [c() for c in calls]
    if _STAGE_POOL is None or _STAGE_POOL._max_workers < len(calls):
        _STAGE_POOL = ThreadPoolExecutor(max_workers=max(len(calls), 2), thread_name_prefix="graphaudit-stage")
    futures = [_STAGE_POOL.submit(c) for c in calls]
    for f in futures:
        f.exception()
    return [f.result() for f in futures]


#: Smallest amount of one sample's tensors of a transition (bytes) reduced by several threads: below it the Python
#: work per tensor pair, which holds the GIL, outweighs what the threads share.
PARALLEL_MIN_BYTES = 32 << 20

_POOL: ThreadPoolExecutor | None = None


def _workers() -> int:
    return min(4, cores())


def for_each(fn: Callable[[object], None], items: list, sizes: list[int]) -> None:
    """``fn(item)`` for every item, on up to 4 threads (one per available core) when the items' ``sizes`` (bytes)
    add up to :data:`PARALLEL_MIN_BYTES` or more, else in this thread. Each item is handled by one thread, so an
    accumulator updated by ``fn(item)`` sees its values in the same order as in a plain loop (identical sums). numpy
    releases the GIL in the chunked reductions (:class:`graphaudit.numeric.metrics.ErrorStats`), so large tensor
    pairs reduce side by side. The first exception raised by ``fn`` propagates after every thread stops."""
    global _POOL
    n = _workers()
    if n < 2 or sum(sizes) < PARALLEL_MIN_BYTES:
        for it in items:
            fn(it)
        return
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=n, thread_name_prefix="graphaudit-reduce")
    shares: list[list] = [[] for _ in range(n)]
    loads = [0] * n
    for size, it in sorted(zip(sizes, items), key=lambda x: -x[0]):  # largest first, to the least loaded thread
        k = loads.index(min(loads))
        shares[k].append(it)
        loads[k] += size
    futures = [_POOL.submit(lambda share=share: [fn(it) for it in share]) for share in shares if share]
    for f in futures:
        f.exception()  # wait for all before raising any
    for f in futures:
        f.result()


class StageValues:
    """One sample's captured tensors per stage (``values[i]``: tensor name -> array), each stage run when first
    read, one after the other, so that a stage the reduction is done with (``values[i] = None``) is freed before the
    later stages run: the peak holds the two stages of one transition (and stage 0's reference tensors), not every
    stage's tensors at once. On the real PP-OCRv4 det hb_mapper set the four stages capture 1.3 GB per sample.

    Raises
    ------
    StageRunError, GraphAuditError
        From :meth:`graphaudit.numeric.runner.StageRunner.run` of the stage read (:func:`graphaudit.numeric.compare.compare_stages`' caller then compares without it).
    """

    def __init__(self, runners: list, feeds: list[dict[str, np.ndarray]], label: str):
        self._runners, self._feeds, self._label = runners, feeds, label
        self._values: list = [_NOT_RUN] * len(runners)  # _NOT_RUN, the stage's values, or None once released

    def __len__(self) -> int:
        return len(self._runners)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        v = self._values[i]
        if v is _NOT_RUN:
            v = self._values[i] = self._runners[i].run(self._feeds[i], self._label)
        if v is None:
            raise RuntimeError(f"stage {i}'s values of {self._label} were released")
        return v

    def __setitem__(self, i: int, values: dict[str, np.ndarray] | None) -> None:
        self._values[i] = values


#: A stage of :class:`StageValues` not run yet.
_NOT_RUN = object()
