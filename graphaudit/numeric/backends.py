"""Runtimes that execute stage models: stock onnxruntime (custom ops lowered first) or Horizon's own runtime.

Horizon's runtime is the HB ONNX Runtime fork that the toolchain's ``horizon_nn`` package ships
(``horizon_nn.executor.session.InferenceSession``; public wheel ``dg-nn-toolkit``, OE 1.x). It registers the
``horizon`` domain's float ops (HzPreprocess, HzCalibration, HzHardSwish, ...) and the fixed-point ops of the
``*_quantized_model.onnx`` (HzSQuantizedConv, HzLut, ...), so it runs every stage file as the toolchain wrote it.
It imports only inside the toolchain's environment (Python 3.10, numpy 1.23, onnx 1.15; README "Horizon's
runtime").
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager

__all__ = ["HORIZON_RUNTIME", "RUNTIMES", "LOOP_RUN_SECONDS", "run_limited", "session_options", "horizon_unavailable", "resolve_runtime", "make_session",
           "runtime_label", "hold_freed_memory", "one_malloc_arena", "malloc_scope", "keep_malloc_settings",
           "restore_malloc"]

#: The ``--runtime`` name of Horizon's own runtime (a runtime name, not the ``horizon`` op domain).
HORIZON_RUNTIME = "horizon"

#: Values of ``--runtime``.
RUNTIMES = ("auto", "onnxruntime", HORIZON_RUNTIME)


#: Intra-op threads of the sessions this process makes with ``threads=0`` (0: onnxruntime's default, one per core).
#: A worker of a sharded run (:mod:`graphaudit.scaleout`) sets it to its share of the cores, so that N workers do not
#: run N x cores threads on the machine.
DEFAULT_THREADS = 0


def session_options(threads: int = 0, arena: bool = True, parallel: int = 0):
    """CPU session options with graph optimizations disabled, so fake quantization runs exactly as the file says.

    ``threads``: intra-op threads (0 = :data:`DEFAULT_THREADS`, onnxruntime's default unless a worker set it). Thread spinning is
    off: graphaudit keeps many sessions alive (one per measured region), and spinning pools of idle
    sessions would starve the busy one. ``arena=False``: no memory arena, so what a run allocated goes back when
    it is freed instead of staying with the session (for sessions run once per sample among many).
    ``parallel`` > 1: onnxruntime's parallel executor with that many inter-op threads, which runs independent nodes
    side by side (a batch of disconnected regions, :class:`graphaudit.numeric.batch.RegionBatch`); each node computes
    what it computes in the sequential executor.

    onnxruntime's memory pattern is off: with it, the second run of a session asks the arena for one block sized for
    all of the first run's intermediates, which the blocks the first run left (some freed, some held by the outputs
    graphaudit captured) cannot serve, so the arena grows by that much again (PP-OCR cls: +4 MB of peak RSS at the
    second sample, onnxruntime 1.32). Without it each tensor is taken from the arena as the run goes, as in the first
    run; what a node computes does not change.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or DEFAULT_THREADS
    so.inter_op_num_threads = parallel if parallel > 1 else 1
    if parallel > 1:
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.enable_cpu_mem_arena = arena
    so.enable_mem_pattern = False
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4  # errors reach the user as one GraphAuditError line, not as ORT log lines
    ort.set_default_logger_severity(4)
    return so


@functools.lru_cache(maxsize=1)
def horizon_unavailable() -> str | None:
    """Why Horizon's runtime cannot be used here (one line), or ``None`` when ``horizon_nn`` imports."""
    try:
        from horizon_nn.executor.session import InferenceSession  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken install raising anything
        first = (str(e).splitlines() or [type(e).__name__])[0]
        return (f"Horizon's runtime (horizon_nn, from the toolchain's dg-nn-toolkit wheel) does not import in this "
                f"Python ({type(e).__name__}: {first}); run graphaudit inside the toolchain's environment")
    return None


def resolve_runtime(name: str) -> str:
    """The concrete runtime for a ``--runtime`` value: ``"auto"`` is ``"horizon"`` when ``horizon_nn`` imports,
    else ``"onnxruntime"``.

    Raises
    ------
    ValueError
        An unknown name, or ``"horizon"`` where it does not import (the message says why).
    """
    if name not in RUNTIMES:
        raise ValueError(f"unknown runtime {name!r} (choose from {', '.join(RUNTIMES)})")
    if name == "auto":
        return "onnxruntime" if horizon_unavailable() else HORIZON_RUNTIME
    if name == HORIZON_RUNTIME and horizon_unavailable():
        raise ValueError(horizon_unavailable())
    return name


def runtime_label(runtime: str) -> str:
    """How reports name a runtime (with its version where it has one)."""
    if runtime == HORIZON_RUNTIME:
        try:
            import horizon_nn

            return f"Horizon runtime (horizon_nn {getattr(horizon_nn, '__version__', '?')})"
        except Exception:  # noqa: BLE001
            return "Horizon runtime"
    import onnxruntime as ort

    return f"onnxruntime {ort.__version__}"


def make_session(model: bytes, runtime: str, threads: int = 0, arena: bool = True, parallel: int = 0):
    """An inference session for a serialized model in a concrete runtime.

    Both sessions expose onnxruntime's interface: ``get_inputs()``, ``get_outputs()`` and
    ``run(output_names, feeds) -> list[ndarray]``. Stock onnxruntime runs on the CPU with graph optimizations off
    (:func:`session_options`: ``threads``, ``arena``, ``parallel``), so fake quantization runs exactly as the file says;
    Horizon's session is built as the toolchain builds it for its own accuracy tools, without a memory arena
    (:func:`_horizon_options`; ``threads``, ``arena`` and ``parallel`` do not apply to it).

    Raises
    ------
    Exception
        Whatever the runtime raises for a model it refuses (callers turn it into one line).
    """
    if runtime == HORIZON_RUNTIME:
        from horizon_nn.executor.session import InferenceSession

        _quiet_horizon_logger(InferenceSession)
        _arenaless_malloc()
        return InferenceSession(model, _horizon_options(InferenceSession))
    import onnxruntime as ort

    if not arena:
        _arenaless_malloc()

    return ort.InferenceSession(model, session_options(threads, arena, parallel), providers=["CPUExecutionProvider"])


def _horizon_options(session_class):
    """Options of a Horizon session: the fork's defaults (a fresh ``SessionOptions()`` equals
    ``get_default_session_options()`` in every field, horizon_nn 1.1.0: ORT_ENABLE_ALL, sequential executor, default
    threads), but for the CPU memory arena, which is off. The fork copies every output it returns into a new numpy
    array, so an arena kept a second copy of each captured tensor for good: on the real PP-OCRv4 det set, all tensors
    of the four stages marked as outputs took 4.71 GB of peak RSS with the arena and 3.08 GB without it, and the
    first sample 12.6 s instead of 8.8 s (fresh memory touched once less), for 4.3-4.5 s instead of 4.2 s per later
    sample. The arena decides where buffers come from, not what a kernel computes (reports equal to the bit). None
    (the fork's defaults) where the fork's binding has no ``SessionOptions`` with that field."""
    import importlib

    binding = getattr(importlib.import_module(session_class.__module__), "onnxruntime_cpp2py_export", None)
    try:
        so = binding.SessionOptions()
        so.enable_cpu_mem_arena = False
    except AttributeError:  # another horizon_nn than 1.1.0 without these: its defaults, arena included
        return None
    return so


#: glibc's ``mallopt`` parameters (malloc.h): trim threshold and mmap threshold.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
#: The largest mmap threshold glibc accepts on 64-bit systems (``DEFAULT_MMAP_THRESHOLD_MAX``, 4 MiB * sizeof(long)).
_MMAP_THRESHOLD_MAX = 32 << 20


#: Library calls running now whose end restores glibc's settings (:func:`malloc_scope`; the outermost one does).
_SCOPES = [0]
#: Whether :func:`_arenaless_malloc` changed this process's settings and they were not restored since.
_HELD = [False]
#: Whether the settings stay to the process's end (:func:`keep_malloc_settings`).
_KEEP = [False]


def _arenaless_malloc() -> None:
    """glibc's settings for sessions without a memory arena, whose runs malloc and free each sample's tensors: freed
    blocks kept for reuse (:func:`hold_freed_memory`), in one arena for every thread (:func:`one_malloc_arena`).
    Applied once until :func:`malloc_scope` restores them."""
    if _HELD[0]:
        return
    _HELD[0] = True
    hold_freed_memory()
    one_malloc_arena()


@contextmanager
def malloc_scope():
    """Around a library call that may run sessions (``audit``, ``run_numeric``, ``bisect``, ``evaluate_stages``,
    ``lower``, a worker's task): when the outermost such call ends, glibc's malloc settings that its arena-less
    sessions changed (:func:`_arenaless_malloc`) are restored and the freed memory returned to the system
    (:func:`restore_malloc`), so a caller's process (a notebook, a training script) does not keep the numeric
    step's high-water mark and one malloc arena for all its threads after the call: on the bundled PP-OCRv4 det
    pipeline, 2 samples, the caller's RSS stayed at 1.88 GB after the audit was freed, and went back to 86 MB with
    the restore (0.12 s). The ``graphaudit`` command keeps them (:func:`keep_malloc_settings`): it exits after its
    job. Usable as a decorator."""
    _SCOPES[0] += 1
    try:
        yield
    finally:
        _SCOPES[0] -= 1
        if not _SCOPES[0] and _HELD[0] and not _KEEP[0]:
            _HELD[0] = False
            restore_malloc()


def keep_malloc_settings() -> None:
    """Keep the settings of arena-less sessions to this process's end (no restore after each call): for a process
    that exits after its one job, the ``graphaudit`` command (:func:`graphaudit.cli.run`)."""
    _KEEP[0] = True


#: glibc's defaults (malloc.c): ``M_ARENA_MAX`` 0 (arenas by the number of cores), ``DEFAULT_MMAP_THRESHOLD_MIN``
#: and ``DEFAULT_TRIM_THRESHOLD`` 128 KiB.
_GLIBC_DEFAULTS = {"arena_max": 0, "mmap_threshold": 128 << 10, "trim_threshold": 128 << 10}
#: The environment's names of those settings (glibc manual, "Memory Allocation Tunables").
_LEGACY_ENV = {"arena_max": "MALLOC_ARENA_MAX", "mmap_threshold": "MALLOC_MMAP_THRESHOLD_",
               "trim_threshold": "MALLOC_TRIM_THRESHOLD_"}


def malloc_settings_at_start(environ=None) -> dict[str, int]:
    """The values the process started with for ``arena_max``, ``mmap_threshold`` and ``trim_threshold``: the
    ``GLIBC_TUNABLES`` entries ``glibc.malloc.<name>=N`` first, then ``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``,
    ``MALLOC_TRIM_THRESHOLD_``, else glibc's defaults (:data:`_GLIBC_DEFAULTS`); values that are not decimal
    integers are ignored, as glibc ignores them."""
    env = os.environ if environ is None else environ
    out = dict(_GLIBC_DEFAULTS)
    tunables = dict(t.partition("=")[::2] for t in env.get("GLIBC_TUNABLES", "").split(":") if "=" in t)
    for name, legacy in _LEGACY_ENV.items():
        for value in (tunables.get(f"glibc.malloc.{name}"), env.get(legacy)):
            if value is not None and value.strip().isdigit():
                out[name] = int(value)
                break
    return out


def restore_malloc() -> bool:
    """Put back the malloc settings the process started with (:func:`malloc_settings_at_start`) and return the freed
    memory at the top of the heap to the system (``malloc_trim(0)``). glibc's dynamic mmap threshold (raised as
    large blocks are freed) cannot be turned back on once set: it stays at its starting value. True when glibc took
    the settings; False elsewhere (not glibc: nothing done)."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    start = malloc_settings_at_start()
    ok = bool(mallopt(_M_ARENA_MAX, start["arena_max"])) & bool(mallopt(_M_MMAP_THRESHOLD, start["mmap_threshold"]))
    ok &= bool(mallopt(_M_TRIM_THRESHOLD, start["trim_threshold"]))
    _libc().malloc_trim(0)
    return ok


def hold_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for reuse in this process instead of returning it to the system: blocks
    up to 32 MiB come from the heap (``M_MMAP_THRESHOLD``, the most glibc allows), and the heap gives memory back
    only when 2 GiB at its top are free (``M_TRIM_THRESHOLD``, the largest ``int``). Applied when the first
    session without a memory arena is made (Horizon's, :func:`_horizon_options`; onnxruntime's with ``arena=False``)
    and kept until :func:`malloc_scope` ends: every sample's
    tensors are malloc'd and freed, and with glibc's default (dynamic) thresholds the freed gigabytes went back to
    the system and the next sample touched fresh pages again. On the real PP-OCRv4 det set, 4 samples: 6.0-6.6 s
    per later sample without this, 3.9-4.3 s with it, at the same peak RSS (2.7 GB). The process's resident memory
    stays at its high-water mark while it holds; what is freed is reused by the next allocations. True when glibc
    took both settings; False elsewhere (not glibc: nothing done)."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)) & bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def one_malloc_arena() -> bool:
    """Have every thread of this process allocate from glibc's one main arena (``M_ARENA_MAX`` = 1) instead of
    one arena per thread, each keeping what its thread freed. Applied with the first session that runs
    without an arena (:func:`make_session`), before the sessions' and the reduction's threads exist. The numeric
    step's large blocks are made in one thread and freed in another (onnxruntime's parallel executor in the region
    batches, the reduction threads, stages run side by side): with an arena per thread, each kept its own
    high-water mark. On the bundled PP-OCRv4 det pipeline (three stages, 8 samples, isolated measurement) peak RSS
    went from 3.08 GB to 2.13 GB, at the same time; few allocations are made per sample (one per tensor), so the
    one arena's lock is not contended. True when glibc took the setting; False elsewhere (nothing done)."""
    mallopt = _mallopt()
    return mallopt is not None and bool(mallopt(_M_ARENA_MAX, 1))


def _libc():
    """The C library (``ctypes.CDLL``); OSError where it cannot be loaded."""
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def _mallopt():
    """glibc's ``mallopt``, or None (not glibc)."""
    import ctypes

    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


@functools.lru_cache(maxsize=1)
def _quiet_horizon_logger(session_class) -> None:
    """Raise the log threshold of Horizon's onnxruntime fork to FATAL, as :func:`session_options` does for stock
    onnxruntime: a stage it refuses reaches the user as one N403 line, not also as the fork's own
    ``[E:onnxruntime:, inference_session.cc:886 Initialize] ...`` and ``[W:onnxruntime:...] MergeShapeInfo`` lines
    on stderr. Only the default logger's severity: the session's own options (what it computes) are left as the
    toolchain makes them."""
    import importlib

    binding = getattr(importlib.import_module(session_class.__module__), "onnxruntime_cpp2py_export", None)
    if binding is not None and hasattr(binding, "set_default_logger_severity"):
        binding.set_default_logger_severity(4)


#: Longest one sample may run in a stage holding Loop nodes (stock onnxruntime): a Loop's trip count and condition
#: are data, so a stage can run for ever (a trip count of 2**62); past this the run is stopped (onnxruntime's
#: RunOptions.terminate) and the stage is reported as not run (N403; `lower` refuses the file). A graph without Loop nodes always ends and is
#: never stopped.
LOOP_RUN_SECONDS = 20.0


def run_limited(session, outputs, feeds: dict, seconds: float | None):
    """``session.run(outputs, feeds)`` (stock onnxruntime), stopped after ``seconds`` when given.

    A graph with Loop nodes may never end (its trip count and condition are data); onnxruntime's
    ``RunOptions.terminate``, set from a timer thread, stops it between kernels and iterations.

    Raises
    ------
    TimeoutError
        The run was stopped after ``seconds``.
    Exception
        Whatever onnxruntime raises for a run that fails.
    """
    if seconds is None:
        return session.run(outputs, feeds)
    import threading

    import onnxruntime as ort

    ro = ort.RunOptions()
    ro.log_severity_level = 4  # the stop is reported by the caller, not logged by onnxruntime
    timer = threading.Timer(seconds, lambda: setattr(ro, "terminate", True))
    timer.start()
    try:
        return session.run(outputs, feeds, ro)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
        if not timer.is_alive():
            raise TimeoutError(f"stopped after {seconds:g} s") from e
        raise
    finally:
        timer.cancel()
