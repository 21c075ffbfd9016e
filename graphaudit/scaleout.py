"""Where sharded work runs: local processes (``concurrent.futures.ProcessPoolExecutor``) or a Ray cluster.

No scheduler of our own: a :class:`WorkerPool` hands a list of tasks (a module-level function and its arguments:
paths, sample ranges, options, never a model or the user's objects) to the engine, collects their results in task
order and forwards each worker's per-sample progress ticks to one callback in this process. What the tasks compute
and how their results merge is :mod:`graphaudit.shards`.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from .errors import GraphAuditError

__all__ = ["ScaleOut", "WorkerPool", "ray_available", "shard_ranges", "run_task"]


def ray_available() -> str | None:
    """None when ``ray`` imports, else why not (one line: install the ``ray`` extra)."""
    try:
        import ray  # noqa: F401
    except ImportError as e:
        return f"ray is not installed ({e}); pip install 'graphaudit[ray]'"
    return None


@dataclass(frozen=True)
class ScaleOut:
    """How many workers run the samples, and on which engine.

    Attributes
    ----------
    workers : int
        Local worker processes (``--workers N``), at least 1; with ``ray``, the number of shards (default: the
        cluster's CPUs).
    ray : str, optional
        Run on Ray (``--ray [ADDRESS]``): ``"local"`` starts a Ray instance on this machine (or uses the one this
        process already started with ``ray.init``); ``"auto"`` joins the cluster this machine belongs to; an address
        (``host:6379`` or ``ray://host:10001``) joins that cluster. None: local processes.
    """

    workers: int = 1
    ray: str | None = None

    def problem(self) -> str | None:
        """Why these settings cannot run (one line), or None."""
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            return f"--workers {self.workers!r}: give a positive integer"
        if self.ray is not None:
            if not isinstance(self.ray, str) or not self.ray.strip():
                return f"--ray {self.ray!r}: give 'local', 'auto' or a cluster address"
            return ray_available()
        return None

    @property
    def active(self) -> bool:
        """Whether the work is sharded at all (more than one local worker, or Ray)."""
        return self.workers > 1 or self.ray is not None


def shard_ranges(total: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous ``(start, stop)`` ranges covering ``0 .. total`` in order, sizes differing by at most
    one, none empty (fewer ranges when ``total < shards``). Contiguous ranges keep each shard's samples in the
    single-process order, so the merged accumulators add the same per-sample terms in almost the same order."""
    shards = max(1, min(shards, total))
    base, extra = divmod(total, shards)
    out, start = [], 0
    for k in range(shards):
        stop = start + base + (1 if k < extra else 0)
        out.append((start, stop))
        start = stop
    return out


class _Ticks:
    """A queue the workers put per-sample ticks into, drained by a thread calling ``tick(1)`` per item."""

    def __init__(self, queue, tick: Callable[[int], None] | None):
        self.queue, self.tick = queue, tick
        self.thread = threading.Thread(target=self._drain, daemon=True) if tick is not None else None
        if self.thread is not None:
            self.thread.start()

    def _drain(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            self.tick(item)

    def close(self) -> None:
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()


def run_task(fn: Callable, threads: int, *args):
    """In a worker: ``fn(*args)`` with this process's onnxruntime sessions limited to ``threads`` intra-op threads
    (:data:`graphaudit.numeric.backends.DEFAULT_THREADS`)."""
    from .numeric import backends

    backends.DEFAULT_THREADS = threads
    return fn(*args)


class WorkerPool:
    """A pool of workers for one job (a context manager; workers and their caches live until it closes).

    Parameters
    ----------
    scale : ScaleOut

    Raises
    ------
    GraphAuditError
        Bad settings, ray missing, or a Ray cluster that cannot be reached (one line).
    """

    def __init__(self, scale: ScaleOut):
        bad = scale.problem()
        if bad:
            raise GraphAuditError(bad)
        self.scale = scale
        self._executor = self._manager = self._ray = None
        if scale.ray is None:
            # spawn: a fresh interpreter per worker (forking a process whose onnxruntime thread pools exist can hang)
            ctx = multiprocessing.get_context("spawn")
            self._executor = ProcessPoolExecutor(max_workers=scale.workers, mp_context=ctx)
            self._manager = ctx.Manager()
            self.size = scale.workers
            self.threads = max(1, (os.cpu_count() or 1) // scale.workers)  # each worker's share of the cores
        else:
            self._ray = _ray_connect(scale)
            self.size = scale.workers if scale.workers > 1 else max(1, int(self._ray.cluster_resources().get(
                "CPU", 1)))
            self.threads = 1  # each task holds one of the cluster's CPUs (num_cpus=1)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the local workers (a Ray cluster stays up; this process's local Ray instance too)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._manager.shutdown()
            self._executor = None

    def map(self, fn: Callable, tasks: list[tuple], tick: Callable[[int], None] | None = None) -> list[Any]:
        """``[fn(*task, ticks) for task in tasks]`` run on the workers, results in task order. ``ticks`` is a queue
        (``ticks.put(n)``: n more samples done) whose items reach ``tick`` in this process, or None without one.

        Raises
        ------
        Exception
            What the first failing task (in task order) raised; the later tasks are cancelled or awaited.
        """
        if self._ray is not None:
            return self._map_ray(fn, tasks, tick)
        ticks = _Ticks(self._manager.Queue(), tick) if tick is not None else None
        try:
            futures = [self._executor.submit(run_task, fn, self.threads, *t, ticks.queue if ticks else None)
                       for t in tasks]
            out = []
            for f in futures:
                try:
                    out.append(f.result())
                except BaseException:
                    for g in futures:
                        g.cancel()
                    raise
            return out
        finally:
            if ticks is not None:
                ticks.close()

    def _map_ray(self, fn: Callable, tasks: list[tuple], tick) -> list[Any]:
        ray = self._ray
        from ray.util.queue import Queue

        ticks = _Ticks(Queue(), tick) if tick is not None else None
        remote = ray.remote(num_cpus=1)(run_task)
        try:
            refs = [remote.remote(fn, self.threads, *t, ticks.queue if ticks else None) for t in tasks]
            out = []
            for r in refs:
                try:
                    out.append(ray.get(r))
                except ray.exceptions.RayTaskError as e:
                    for x in refs:
                        ray.cancel(x)
                    cause = getattr(e, "cause", None)
                    raise (cause if isinstance(cause, BaseException) else e) from None
            return out
        finally:
            if ticks is not None:
                ticks.close()
                ticks.queue.shutdown()


def _ray_connect(scale: ScaleOut):
    """The ``ray`` module, initialised for ``scale.ray`` (reusing this process's instance when there is one)."""
    import ray

    if ray.is_initialized():
        return ray
    address = None if scale.ray == "local" else scale.ray
    kwargs: dict = {"ignore_reinit_error": True, "log_to_driver": False, "configure_logging": False}
    if address is None:
        kwargs["num_cpus"] = scale.workers if scale.workers > 1 else (os.cpu_count() or 1)
        kwargs["include_dashboard"] = False
        root = _package_root()
        if "site-packages" not in root and "dist-packages" not in root:
            # a source checkout: the workers import graphaudit from where this process does
            kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": os.pathsep.join(
                p for p in [root, os.environ.get("PYTHONPATH", "")] if p)}}
    if address is not None and address != "auto":
        _check_reachable(scale.ray)
    try:
        ray.init(address=address, **kwargs)
    except Exception as e:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError from Ray: one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise GraphAuditError(f"--ray {scale.ray}: cannot start or reach Ray ({first[:300]})") from e
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """A TCP connection to ``host:port`` (``ray://host:port`` too) opens within ``timeout`` seconds, else one line
    (Ray itself retries an unreachable cluster for minutes)."""
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise GraphAuditError(f"--ray {address}: give host:port (e.g. head-node:6379 or ray://head-node:10001), "
                              "'auto' or 'local'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise GraphAuditError(f"--ray {address}: cannot reach the cluster ({e.strerror or type(e).__name__})") from e


def _package_root() -> str:
    """The directory holding the ``graphaudit`` package."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

