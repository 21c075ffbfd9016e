"""Where sharded work runs: local processes (``concurrent.futures.ProcessPoolExecutor``) or a Ray cluster.

No scheduler of our own: a :class:`WorkerPool` hands a list of tasks (a module-level function and its arguments:
paths, sample ranges, options, never a model or the user's objects) to the engine, collects their results in task
order and forwards each worker's per-sample progress ticks to one callback in this process. What the tasks compute
and how their results merge is :mod:`graphaudit.shards`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

from . import stopsignals
from .errors import GraphAuditError
from .rayprobe import check_reachable
from .workerprocs import close_executor, die_with_parent, how_ended

__all__ = ["ScaleOut", "WorkerPool", "ray_available", "shard_ranges", "run_task", "usable_cpus", "here",
           "SMALL_JOB_SAMPLES"]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, which container CPU sets narrow; else ``os.cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def ray_available() -> str | None:
    """None when ``ray`` imports, else why not (one line: install the ``ray`` extra)."""
    try:
        import ray  # noqa: F401
    except ImportError as e:
        return f"ray is not installed ({e}); pip install 'graphaudit[ray]'"
    return None


#: Samples per local worker process below which the workers' start-up likely outweighs the work they share.
#: Measured (graphaudit compare --random N, 2-core machine under load, user+sys CPU seconds): a worker's start-up
#: (spawned interpreter, imports, stages loaded, sessions built) costs 1.7-2.4 s of CPU; one sample costs 0.03-0.07 s
#: over the stages of PP-OCR cls (48x192, ort and Horizon sets) and 0.4 s over PP-OCRv4 det at 320x320. On 4
#: samples, --workers 2 took 10-12 s wall (5.3-5.9 s CPU) against 2.8-5.3 s (1.8-2.3 s CPU) in one process; on 8 det
#: samples 22.9 s against 13.8 s; 64 cls samples per worker (N=128) were about break-even. At 16 samples per worker
#: the det's work (6 s) just outweighs the start-up; a small classifier needs more.
SMALL_JOB_SAMPLES = 16

#: A local worker's start-up in seconds (the 1.7-2.4 s above): under Horizon's runtime, whose fixed-point kernels keep
#: one core per process, the samples split over the worker processes, and the workers pay once the run outlasts it
#: (the real PP-OCRv4 det set, 4 samples: 20.9 s on 2 workers against 33.5 s in one process; PP-OCR cls: 3.9 s
#: against 2.7 s).
WORKER_START_SECONDS = 2.0


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

    @property
    def local_processes(self) -> int:
        """The local worker processes a pool starts at most: ``workers`` capped at :func:`usable_cpus` (a process
        per CPU keeps every core busy with onnxruntime's CPU-bound work; more only add start-up time and memory,
        each one loading the stages). A job starts no more than its shards, and no shard is empty, so fewer
        samples than workers start one process per sample. Ray: not capped here (the cluster queues the tasks)."""
        return min(self.workers, usable_cpus())

    def small_job_note(self, samples: int | None, runtime: str | None = None,
                       seconds: float | None = None) -> str | None:
        """One line when local workers likely cost more than they save on ``samples`` samples (fewer than
        :data:`SMALL_JOB_SAMPLES` per worker process), else None (also for Ray and for one worker). Under Horizon's
        runtime (``runtime == "horizon"``), where one process keeps one core busy, the run's wall ``seconds`` decide
        instead: no note once the run took more than P / (P - 1) worker start-ups (:data:`WORKER_START_SECONDS`) on
        P worker processes, the point past which splitting the samples P ways beats one process."""
        if self.ray is not None or self.workers < 2 or not samples:
            return None
        procs = min(self.local_processes, samples)
        if samples >= SMALL_JOB_SAMPLES * procs:
            return None
        if runtime == "horizon" and seconds is not None and procs > 1 \
                and seconds > WORKER_START_SECONDS * procs / (procs - 1):
            return None
        return (f"--workers {self.workers} on {samples} samples ({procs} worker process{'es' if procs > 1 else ''}): "
                "each worker starts Python, imports onnxruntime and loads the stages (about 2 s of CPU) before its "
                f"first sample; below {SMALL_JOB_SAMPLES} samples per worker one process (--workers 1) is likely "
                "as fast or faster")

    def capped_note(self) -> str:
        """One line saying that the local workers are capped at the CPUs (``--workers 1000`` on 2 CPUs)."""
        return (f"--workers {self.workers}: at most {self.local_processes} worker processes (the CPUs this process "
                "may use; more would only add start-up time and memory)")


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
            try:
                item = self.queue.get()
            except (EOFError, OSError):  # the queue's process is gone (a stop signal sent to the process group)
                return
            if item is None:
                return
            self.tick(item)

    def close(self) -> None:
        if self.thread is not None:
            with contextlib.suppress(EOFError, OSError):
                self.queue.put(None)
            self.thread.join()


_CALLER_DIR: list[str | None] = [None]  # in a worker: the caller's working directory when this node has none such


def here(path: str | None) -> str | None:
    """In a worker, a path the calling process sent (as the user typed it) usable here: unchanged when the worker
    runs in the caller's working directory (always on local workers, on Ray nodes that have that directory), else
    joined to it (absolute: the shared file system of a cluster)."""
    if path is None or _CALLER_DIR[0] is None:
        return path
    return os.path.join(_CALLER_DIR[0], path)


def run_task(fn: Callable, threads: int, cwd: str, *args):
    """In a worker: ``fn(*args)`` run in the calling process's working directory ``cwd`` (so the paths it sends
    are the ones the user typed, and the errors and hook arguments name them as one process would; a node without
    that directory resolves them against it, :func:`here`), with this process's onnxruntime sessions limited to
    ``threads`` intra-op threads (:data:`graphaudit.numeric.backends.DEFAULT_THREADS`), and glibc's malloc settings
    restored when it ends (:func:`graphaudit.numeric.backends.malloc_scope`)."""
    from .numeric import backends

    backends.DEFAULT_THREADS = threads
    try:
        if os.getcwd() != cwd:
            os.chdir(cwd)
        _CALLER_DIR[0] = None
    except OSError:
        _CALLER_DIR[0] = cwd
    with backends.malloc_scope():  # a Ray worker runs other tasks after this one: it gets its malloc settings back
        return fn(*args)


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored in this process (while it cleans up after a Ctrl-C: a second one must not cut that short).
    Only in the main thread (the only one that may set handlers); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@contextlib.contextmanager
def _sigint_held():
    """SIGINT blocked in this thread while it starts worker processes, which inherit the mask: a Ctrl-C reaches
    this process only (delivered when the block ends, so none is lost), which stops the workers itself
    (:meth:`WorkerPool.close`, Ray's shutdown) instead of each printing its KeyboardInterrupt traceback, or Ray's
    agents outliving the run."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


#: Seconds a local worker process is given to end once the pool closes, before it is terminated.
EXIT_WAIT = 10.0


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
            # imported here: multiprocessing's managers and process pool take 4.7 MB of RSS that unsharded runs skip
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor
            from multiprocessing.managers import SyncManager

            # spawn: a fresh interpreter per worker (forking a process whose onnxruntime thread pools exist can hang)
            ctx = multiprocessing.get_context("spawn")
            self.size = scale.local_processes
            # the workers and the manager end with this process, even killed (die_with_parent)
            self._executor = ProcessPoolExecutor(max_workers=self.size, mp_context=ctx, initializer=die_with_parent,
                                                 initargs=(os.getpid(),))
            self._manager = SyncManager(ctx=ctx)
            with _sigint_held():
                self._manager.start(die_with_parent, (os.getpid(),))
            self.threads = max(1, usable_cpus() // self.size)  # each worker's share of the cores
        else:
            self._ray = _ray_connect(scale)
            self.size = scale.workers if scale.workers > 1 else max(1, int(self._ray.cluster_resources().get(
                "CPU", 1)))
            self.threads = 1  # each task holds one of the cluster's CPUs (num_cpus=1)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            with _sigint_ignored():  # a second Ctrl-C must not cut the clean-up short (and leave workers running)
                self.close(stop=True)
        else:
            self.close()

    def close(self, stop: bool = False) -> None:
        """Stop the local workers, after their running tasks end, or at once (``stop``: SIGTERM, after a Ctrl-C;
        they block SIGINT). A worker that has not ended :data:`EXIT_WAIT` seconds after its last task (its exit
        waits for a thread an ``--eval`` hook left running: the run hung there) is terminated, with a note on
        stderr. A Ray cluster stays up, this process's local Ray instance too (Ray shuts it down when this process
        exits; :meth:`map` cancels its Ray tasks on a Ctrl-C)."""
        if self._executor is not None:
            procs = list((getattr(self._executor, "_processes", None) or {}).values())
            if stop:
                for proc in procs:
                    with contextlib.suppress(Exception):
                        proc.terminate()
            stuck = close_executor(self._executor, procs, EXIT_WAIT)
            if stuck and not stop:
                print(f"graphaudit: note: {stuck} worker process(es) had not ended {EXIT_WAIT:g} s after their work "
                      "(a thread the --eval hook left running?) and were stopped", file=sys.stderr)
            with contextlib.suppress(Exception):  # already ended with the process group (SIGTERM to all)
                self._manager.shutdown()
            self._executor = None

    def map(self, fn: Callable, tasks: list[tuple], tick: Callable[[int], None] | None = None) -> list[Any]:
        """``[fn(*task, ticks) for task in tasks]`` run on the workers, results in task order. ``ticks`` is a queue
        (``ticks.put(n)``: n more samples done) whose items reach ``tick`` in this process, or None without one.

        Raises
        ------
        Exception
            What the first failing task (in task order) raised; the later tasks are cancelled or awaited.
        GraphAuditError
            A local worker process died (killed, or ended by native code or ``os._exit`` in the user's ``--eval``
            hook) instead of returning or raising: one line with its exit code or signal, as a dead Ray worker is
            (it was concurrent.futures' BrokenProcessPool traceback).
        """
        if self._ray is not None:
            return self._map_ray(fn, tasks, tick)
        from concurrent.futures.process import BrokenProcessPool

        ticks = _Ticks(self._manager.Queue(), tick) if tick is not None else None
        try:
            cwd = os.getcwd()
            with _sigint_held():  # the executor starts its processes in submit
                futures = [self._executor.submit(run_task, fn, self.threads, cwd, *t, ticks.queue if ticks else None)
                           for t in tasks]
                processes = dict(getattr(self._executor, "_processes", None) or {})  # to read their exit codes
            out = []
            for f in futures:
                try:
                    out.append(f.result())
                except BaseException as e:
                    for g in futures:
                        g.cancel()
                    if isinstance(e, BrokenProcessPool) and stopsignals.RECEIVED:  # the group was signalled
                        raise stopsignals.Stopped(stopsignals.RECEIVED[0]) from None
                    if isinstance(e, BrokenProcessPool):
                        raise GraphAuditError(f"--workers {self.scale.workers}: a worker process died "
                                              f"({how_ended(processes)}) before returning its shard: killed (out of "
                                              "memory?), or ended by native code or os._exit in an --eval hook "
                                              "(without --workers such an end stops graphaudit itself)") from None
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
        refs: list = []
        try:
            cwd = os.getcwd()
            refs = [remote.remote(fn, self.threads, cwd, *t, ticks.queue if ticks else None) for t in tasks]
            out = []
            for r in refs:
                try:
                    out.append(ray.get(r))
                except ray.exceptions.RayTaskError as e:
                    _cancel(ray, refs)
                    cause = getattr(e, "cause", None)
                    raise (cause if isinstance(cause, BaseException) else e) from None
                except ray.exceptions.RayError as e:  # a worker or node died, an object lost: one line
                    _cancel(ray, refs)
                    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                    raise GraphAuditError(f"--ray {self.scale.ray}: a worker failed ({first[:300]})") from None
            return out
        except KeyboardInterrupt:
            with _sigint_ignored():
                _cancel(ray, refs, force=True)
            raise
        finally:
            if ticks is not None:
                ticks.close()
                ticks.queue.shutdown()


def _cancel(ray, refs: list, force: bool = False) -> None:
    """Cancel Ray tasks, and mark their results as seen so that Ray does not print "Unhandled error" for each
    when they are collected."""
    for x in refs:
        with contextlib.suppress(Exception):
            ray.cancel(x, force=force)
    with contextlib.suppress(Exception):
        ray.wait(refs, num_returns=len(refs), timeout=5)
    for x in refs:
        with contextlib.suppress(BaseException):
            ray.get(x, timeout=0)


def _ray_connect(scale: ScaleOut):
    """The ``ray`` module, initialised for ``scale.ray`` (reusing this process's instance when there is one)."""
    import logging

    import ray

    if ray.is_initialized():
        return ray
    address = None if scale.ray == "local" else scale.ray
    kwargs: dict = {"ignore_reinit_error": True, "log_to_driver": False, "configure_logging": False}
    if address is None:
        # the local instance's CPUs, as local workers are capped (ScaleOut.local_processes): with num_cpus=workers,
        # --workers 1000 ran one Ray worker per shard at once (det, 6 samples: 12 processes, 13 GB taken)
        kwargs["num_cpus"] = scale.local_processes if scale.workers > 1 else usable_cpus()
        kwargs["include_dashboard"] = False
        root = _package_root()
        if "site-packages" not in root and "dist-packages" not in root:
            # a source checkout: the workers import graphaudit from where this process does
            kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": os.pathsep.join(
                p for p in [root, os.environ.get("PYTHONPATH", "")] if p)}}
    if address is not None and address != "auto":
        check_reachable(scale.ray)
    kwargs["logging_level"] = logging.ERROR  # the level of Ray's own processes' loggers
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    ray_handler = getattr(utils, "set_sigterm_handler", None)
    try:
        # a local instance's processes (gcs_server, raylet, agents, workers) inherit SIGINT ignored: a Ctrl-C is
        # this process's to handle (it shuts the instance down in order; interrupted, the agents outlived it); a
        # SIGTERM/SIGHUP to the graphaudit command waits for the start too (graphaudit.stopsignals.deferred), and
        # ray.init does not put its own SIGTERM handler (sys.exit in the middle of the start) over this process's
        with _quiet_ray_logging(), (_sigint_held() if address is None else contextlib.nullcontext()), \
                stopsignals.deferred() as deferring:
            if deferring and ray_handler is not None:
                utils.set_sigterm_handler = lambda _handler: None
            ray.init(address=address, **kwargs)
    except Exception as e:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError from Ray: one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise GraphAuditError(f"--ray {scale.ray}: cannot start or reach Ray ({first[:300]})") from e
    finally:
        if ray_handler is not None:
            utils.set_sigterm_handler = ray_handler
    return ray


@contextlib.contextmanager
def _quiet_ray_logging():
    """Ray's own Python log lines below ERROR (its token-authentication notice, start-up banners) off while it
    starts; the ``ray`` logger's level is restored after. A worker's exception still comes back through
    ``ray.get`` (not the log), and Ray's errors still print."""
    import logging

    log = logging.getLogger("ray")
    old = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(old)


def _package_root() -> str:
    """The directory holding the ``graphaudit`` package."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

