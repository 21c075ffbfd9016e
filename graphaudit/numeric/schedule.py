"""The sample loop of a comparison: run each sample through the stages, reduce it, overlapping the two when small."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Callable, Iterable

import numpy as np

__all__ = ["OVERLAP_MAX_BYTES", "PARALLEL_MIN_BYTES", "stream", "for_each"]

#: Largest captured tensor set of one sample (all stages, bytes) for which the next sample runs while this one is
#: reduced: the overlap holds two samples' sets at a time, so it is only done where that costs little memory.
OVERLAP_MAX_BYTES = 64 << 20


def _nbytes(values: list[dict[str, np.ndarray]]) -> int:
    return sum(v.nbytes for vs in values for v in vs.values() if isinstance(v, np.ndarray))


def stream(samples: Iterable[dict[str, np.ndarray]], run: Callable[[dict, int], list], reduce: Callable[[list], None],
           max_samples: int | None = None, progress: Callable[[int], None] | None = None,
           overlap: bool = True) -> int:
    """For each sample ``k`` (at most ``max_samples``): ``values = run(sample, k)``, then ``reduce(values)``, then
    ``progress(k)``; returns the number of samples reduced.

    With ``overlap`` and one sample's values of at most :data:`OVERLAP_MAX_BYTES`, sample ``k + 1`` runs in a worker
    thread while sample ``k`` is reduced in this one (onnxruntime releases the GIL while it runs), so the time is
    about the larger of the two instead of their sum. Samples are reduced in order and each exactly once; the
    results are those of the plain loop. An exception of ``run`` or ``reduce`` propagates after the worker stops.
    """
    it = islice(enumerate(samples), max_samples)
    first = next(it, None)
    if first is None:
        return 0
    values = run(first[1], first[0])
    k, n = first[0], 0
    del first
    use_pool = overlap and _nbytes(values) <= OVERLAP_MAX_BYTES
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="graphaudit-run") as pool:
        while True:
            nxt = next(it, None)
            fut = pool.submit(run, nxt[1], nxt[0]) if use_pool and nxt is not None else None
            try:
                reduce(values)
            except BaseException:
                if fut is not None:
                    fut.cancel()
                raise
            n += 1
            if progress is not None:
                progress(k)
            values = None  # sample k's tensors are freed before sample k + 1 runs (unless it already is)
            if nxt is None:
                return n
            values = fut.result() if fut is not None else run(nxt[1], nxt[0])
            k = nxt[0]


#: Smallest amount of one sample's tensors of a transition (bytes) reduced by several threads: below it the Python
#: work per tensor pair, which holds the GIL, outweighs what the threads share.
PARALLEL_MIN_BYTES = 32 << 20

_POOL: ThreadPoolExecutor | None = None


def _workers() -> int:
    try:
        return max(1, min(4, len(os.sched_getaffinity(0))))
    except AttributeError:  # not on Linux
        return max(1, min(4, os.cpu_count() or 1))


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
