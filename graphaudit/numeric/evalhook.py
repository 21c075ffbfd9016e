"""The user's own metric per stage (``--eval module:function``): load the hook, give it one stage's runner, keep
what it returns.

The hook is a Python callable ``evaluate(run, samples) -> number | dict[str, number]``. ``run`` is an
:class:`EvalRunner` for one stage: ``run(feeds) -> outputs``, feeds in the stage's own input contract (the hook
decides what to feed; ``run.inputs`` lists the stage's input names, dtypes and shapes). ``samples`` is the
``--eval-samples`` path as given (a ``str``, or None). The hook iterates its samples itself, one at a time: the
runner keeps nothing between calls (it holds the stage's session, never a sample), so an evaluation holds at most
the one sample the hook is working on (streaming by construction; ``tests/test_eval_hook.py`` checks it with
``tracemalloc``). Higher is better unless the callable has ``lower_is_better = True`` (every value) or a collection
of the value names that are.

A hook with ``per_sample = True`` is called once per sample instead: ``evaluate(run, sample_path)`` for each file
of the ``--eval-samples`` directory (in natural order, as ``--data`` reads a folder), returning that sample's value(s); the stage's value is the mean
over samples (float64 sum / count, :class:`~graphaudit.numeric.merge.MeanAccumulator`). Such a metric merges across
shards of the samples (``--workers``/``--ray``); a hook that computes one value over the whole set is run whole, one
stage per worker.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import numbers
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from ..data.spec import natural_key
from ..errors import GraphAuditError, NonFiniteSampleError, StageRunError
from ..jsonvalues import json_number
from ..stage import StageGraph
from .backends import runtime_label
from .runner import StageRunner
from .merge import MeanAccumulator
from .summary import StageMetric

__all__ = ["EvalHook", "InputInfo", "EvalRunner", "load_eval_hook", "run_hook", "evaluate_on_runners", "not_run_metric", "sample_files",
           "per_sample_sums", "stage_metric", "check_hook_samples"]

#: onnxruntime's input type names -> numpy dtype names (the types a stage input can have).
_ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
              "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16", "tensor(uint16)": "uint16",
              "tensor(int32)": "int32", "tensor(uint32)": "uint32", "tensor(int64)": "int64",
              "tensor(uint64)": "uint64", "tensor(bool)": "bool"}


@dataclass(frozen=True)
class EvalHook:
    """A loaded eval hook.

    Attributes
    ----------
    fn : callable
        ``fn(run, samples) -> number | dict[str, number]``.
    spec : str
        How it was named (``module:function`` or ``path/to/file.py:function``).
    lower_is_better : bool or tuple of str
        ``True``: every value is better when lower; a tuple: the value names that are (from the callable's
        ``lower_is_better`` attribute; default False).
    per_sample : bool
        The callable's ``per_sample`` attribute is True: called once per sample file, values averaged.
    """

    fn: Callable
    spec: str
    lower_is_better: bool | tuple = False
    per_sample: bool = False

    @classmethod
    def of(cls, fn: Callable, spec: str = "") -> "EvalHook":
        """Wrap a callable (its ``lower_is_better`` attribute read as documented above).

        Raises
        ------
        GraphAuditError
            ``fn`` is not callable, its ``lower_is_better`` is neither a bool nor a list, tuple or set of names (a
            number, ``lower_is_better = 5``, was a TypeError traceback), or its ``metric_name`` is not a non-empty
            string (``None`` named the value "None").
        """
        name = spec or getattr(fn, "__qualname__", repr(fn))
        if not callable(fn):
            raise GraphAuditError(f"--eval {name}: {type(fn).__name__} is not callable")
        lib = getattr(fn, "lower_is_better", False)
        if isinstance(lib, np.bool_):
            lib = bool(lib)
        if not isinstance(lib, bool):
            if not isinstance(lib, (list, tuple, set, frozenset)) or not all(isinstance(x, str) for x in lib):
                raise GraphAuditError(f"--eval {name}: lower_is_better must be True/False or a list of value names, "
                                      f"not {type(lib).__name__} {str(lib)[:60]!r}")
            lib = tuple(lib)
        metric_name = getattr(fn, "metric_name", "metric")
        if not isinstance(metric_name, str) or not metric_name:
            raise GraphAuditError(f"--eval {name}: metric_name must be a non-empty string (the name of the value "
                                  f"a bare number stands for), not {type(metric_name).__name__} "
                                  f"{str(metric_name)[:60]!r}")
        return cls(fn, name, lib, getattr(fn, "per_sample", False) is True)

    def lower_names(self, names: list[str]) -> list[str]:
        """Of ``names``, the values that are better when lower."""
        return list(names) if self.lower_is_better is True else [n for n in names if n in (self.lower_is_better or ())]


def load_eval_hook(spec: str) -> EvalHook:
    """The callable ``spec`` names: ``package.module:function`` (imported with the current directory first on
    ``sys.path``, as ``python -m`` does) or ``path/to/file.py:function`` (the file loaded as a module); the
    function may be a dotted attribute path (``module:Class.method``).

    Raises
    ------
    GraphAuditError
        One line: no ``:``, a file or module that does not exist or fails to import, no such attribute, not
        callable.
    """
    if not isinstance(spec, str) or spec.count(":") < 1:
        raise GraphAuditError(f"--eval {spec!r}: expected module:function or path/to/file.py:function")
    where, _, attr = spec.rpartition(":")
    if not where or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise GraphAuditError(f"--eval {spec!r}: expected module:function or path/to/file.py:function")
    with _no_bytecode():
        module = _import_file(where, spec) if where.endswith(".py") or "/" in where or "\\" in where else \
            _import_module(where, spec)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise GraphAuditError(f"--eval {spec}: {where} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return EvalHook.of(obj, spec)


@contextlib.contextmanager
def _no_bytecode():
    """No ``__pycache__/`` written while the user's hook module (and what it imports) loads: Python's import writes
    one beside each source file it compiles, which put a directory next to the user's hook file (nothing is written
    next to what the user gave). Modules that already have their cache still use it."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = before


def _import_file(where: str, spec: str):
    path = Path(where)
    if not path.is_file():
        raise GraphAuditError(f"--eval {spec}: {where}: no such file")
    name = f"graphaudit_eval_{abs(hash(str(path.resolve()))):x}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise GraphAuditError(f"--eval {spec}: {where}: not a Python file")
    module = importlib.util.module_from_spec(loader_spec)
    try:
        loader_spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - the user's module: any error becomes one line
        raise GraphAuditError(f"--eval {spec}: importing {where} failed ({_one_line(e)})") from e
    return module


def _import_module(where: str, spec: str):
    added = "" not in sys.path and "." not in sys.path
    if added:
        sys.path.insert(0, "")
    try:
        return importlib.import_module(where)
    except Exception as e:  # noqa: BLE001 - ModuleNotFoundError, or the user's module failing on import
        raise GraphAuditError(f"--eval {spec}: cannot import {where} ({_one_line(e)})") from e
    finally:
        if added and "" in sys.path:
            sys.path.remove("")


def _one_line(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


@dataclass(frozen=True)
class InputInfo:
    """One input of the stage the runner runs: ``name``, ``dtype`` (numpy dtype name, e.g. ``"float32"``,
    ``"int8"``) and ``shape`` (ints for static dims, a symbol string or None for dynamic ones)."""

    name: str
    dtype: str
    shape: tuple


class EvalRunner:
    """What an eval hook is given: one stage, run one sample at a time.

    ``run(feeds)`` (or calling the runner) takes ``{input name: np.ndarray}`` in the stage's own input contract
    (dtype, shape and layout as :attr:`inputs` says; Horizon's quantized stage takes int8 ``pixel - 128``) and
    returns ``{output name: np.ndarray}`` for every graph output. :meth:`feeds_from` converts a sample given in the
    contract of the pipeline's data stage (what ``--data`` holds) to this stage's, as the numeric comparison feeds
    stages. Nothing of a sample is kept after ``run`` returns.

    Attributes
    ----------
    stage, role : str
        The stage's name and role.
    runtime : str
        The runtime that measures it, with its version ("onnxruntime 1.x" runs Horizon's float ops lowered).
    inputs : list of InputInfo
    outputs : list of str
    samples_run : int
        Calls of :meth:`run` so far.

    Parameters
    ----------
    stage : StageGraph
    runtime : {"onnxruntime", "horizon"}
        A resolved runtime (:func:`graphaudit.numeric.backends.resolve_runtime`).
    model : onnx.ModelProto, optional
        A model to run in the stage's place (a hybrid of two stages); its inputs must be the stage's.
    convert : callable(dict, int) -> dict, optional
        What :meth:`feeds_from` does (default: the sample unchanged), called with the sample and ``samples_run``: the
        0-based index of the sample among this runner's runs, which names it (``sample K``) in the errors of the feed
        check (NaN or infinite values, a wrong shape).

    Raises
    ------
    StageRunError, GraphAuditError
        As :class:`graphaudit.numeric.runner.StageRunner`.
    """

    def __init__(self, stage: StageGraph, runtime: str = "onnxruntime", model: onnx.ModelProto | None = None,
                 convert: Callable[[dict], dict] | None = None):
        self._runner = StageRunner(stage, (), runtime=runtime, model=model)
        self.stage, self.role, self.runtime = stage.name, stage.role, runtime_label(runtime)
        if self._runner.lowered:
            self.runtime += " (Horizon ops lowered)"
        sess = self._runner.session
        self.inputs = [InputInfo(i.name, _ORT_TYPES.get(i.type, i.type), tuple(i.shape)) for i in sess.get_inputs()]
        self.outputs = list(self._runner.output_names)
        self.samples_run = 0
        self._convert = convert

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one sample: ``{input name: array}`` -> ``{output name: array}``.

        Raises
        ------
        GraphAuditError
            ``feeds`` is not a dict of arrays, or lacks an input.
        StageRunError
            The runtime fails on the data (shape, dtype, a kernel error).
        """
        if not isinstance(feeds, dict):
            raise GraphAuditError(f"{self.stage}: run() takes a dict of input name -> numpy array, not "
                                  f"{type(feeds).__name__}")
        out = self._runner.run({k: np.asarray(v) for k, v in feeds.items()})
        self.samples_run += 1
        return out

    __call__ = run

    def feeds_from(self, sample: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``sample`` (input name -> array, in the contract of the pipeline's data stage) converted to this stage's
        input contract (layout, int8 ``pixel - 128`` of a fixed-point stage, ...); unchanged when no conversion was
        given."""
        return self._convert(sample, self.samples_run) if self._convert is not None else dict(sample)


#: Threads the hook started that were still running, not daemonic, when it returned: Python's exit waits for them,
#: so a hook that leaves one running (a prefetch loop, a data loader's worker) kept the finished run from ending, and
#: graphaudit, which ignores Ctrl-C once its work is done, could then not be stopped with it. The console script
#: gives them a moment and then exits without them (``graphaudit.cli.run``), saying so.
LEFT_RUNNING: list[threading.Thread] = []


def threads_left(wait: float) -> list[str]:
    """The names of the threads of :data:`LEFT_RUNNING` still running after up to ``wait`` seconds in all."""
    deadline = time.monotonic() + wait
    for t in LEFT_RUNNING:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in LEFT_RUNNING if t.is_alive()]


def _call_hook(hook: EvalHook, runner: "EvalRunner", samples):
    """``hook.fn(runner, samples)`` in graphaudit's working directory, which is restored when the hook returns or
    raises: a hook that changes directory (``os.chdir`` to its data set, as evaluation scripts do) moved every
    relative path after it, the report's ``--json``/``--out`` and the default ``./graphaudit_report/`` included,
    to where it went (past the checks that keep outputs out of the inputs) and the next sample file's path. The
    non-daemonic threads it leaves running are added to :data:`LEFT_RUNNING`."""
    cwd, before = os.getcwd(), set(threading.enumerate())
    try:
        return hook.fn(runner, samples)
    finally:
        LEFT_RUNNING.extend(t for t in threading.enumerate() if t not in before and not t.daemon and t.is_alive())
        os.chdir(cwd)  # an OSError (the hook removed it) is the hook's error on this stage, N405


def _values(got, hook: EvalHook, allow_nan: bool = False) -> dict[str, float]:
    """The hook's return value as ``{name: float}``: a number is named by the callable's ``metric_name`` attribute
    (default ``"metric"``). ValueError for anything else, and for NaN unless ``allow_nan``: it is no value to
    compare, and one sample's NaN made a per-sample hook's mean NaN on every stage without saying which sample
    (infinities are kept: an SQNR or PSNR of identical outputs is +inf). The bisection allows it: a hybrid whose
    metric is NaN is a share it cannot measure, not a failed run (``tests/test_bisect_inputs.py``)."""
    def number(v) -> bool:
        return isinstance(v, numbers.Real) and not isinstance(v, bool)

    if number(got):
        values = {str(getattr(hook.fn, "metric_name", "metric")): float(got)}
    elif isinstance(got, dict) and got and all(isinstance(k, str) and number(v) for k, v in got.items()):
        values = {k: float(v) for k, v in got.items()}
    else:
        raise ValueError(f"returned {type(got).__name__} {str(got)[:60]!r}, not a number or a dict of str -> number")
    nan = [k for k, v in values.items() if math.isnan(v)]
    if nan and not allow_nan:
        raise ValueError(f"returned NaN for {', '.join(repr(k[:60]) for k in nan[:3])}{' ...' if len(nan) > 3 else ''}"
                         ", not a number to compare")
    return values


def check_hook_samples(hook: EvalHook, samples) -> None:
    """Refuse a per-sample hook without samples, before any work: it is called once per file of ``--eval-samples``
    and has nothing to run on without it (``--data`` feeds the numeric comparison, in the first stage's contract, and
    is not the hook's labelled set). A whole-set hook gets ``samples`` None and may read what it likes.

    Raises
    ------
    GraphAuditError
        ``hook.per_sample`` and no ``samples`` (one line naming the hook and the option).
    """
    if hook.per_sample and (samples is None or str(samples) == ""):
        raise GraphAuditError(f"--eval {hook.spec} is a per-sample hook (per_sample = True), called once per file of "
                              "--eval-samples, and no --eval-samples was given: give --eval-samples DIR (its "
                              "sample files; --data's samples are not passed to the hook)")


def sample_files(samples: str | None, limit: int | None = None) -> list[str]:
    """The samples of a per-sample hook: the files of the ``--eval-samples`` directory in natural order (``2.npy``
    before ``10.npy``, as ``--data`` reads a folder: ``--max-samples N`` takes the same first N files for both; hidden
    files left out), or the one file given; the first ``limit`` of them (``--max-samples``) when given.

    Raises
    ------
    GraphAuditError
        No path, no such file or directory, or an empty directory (one line).
    """
    if samples is None:
        raise GraphAuditError("a per_sample eval hook needs --eval-samples DIR (its files are the samples)")
    p = Path(samples)
    if p.is_file():
        return [str(p)]
    if not p.is_dir():
        raise GraphAuditError(f"--eval-samples {samples}: no such file or directory")
    files = [str(f) for f in sorted((f for f in p.iterdir() if f.is_file() and not f.name.startswith(".")),
                                    key=lambda f: natural_key(f.name))]
    if not files:
        raise GraphAuditError(f"--eval-samples {samples}: no files in the directory")
    return files if limit is None else files[:limit]


def per_sample_sums(hook: EvalHook, runner: "EvalRunner", files: list[str],
                    tick: Callable[[int], None] | None = None,
                    allow_nan: bool = False) -> tuple[MeanAccumulator, str | None, list[str]]:
    """A per-sample hook over ``files`` in order: the accumulated values, the first error (the exception's type
    and first line; the files after it are not run) or None, and the files left out because the runner refused
    their NaN or infinite values (NonFiniteSampleError out of the hook, as the numeric comparison leaves such
    samples out: finding P209 names them; the mean is over the other samples). ``tick(1)`` after each sample."""
    acc, left_out = MeanAccumulator(), []
    for f in files:
        try:
            acc.add(_values(_call_hook(hook, runner, f), hook, allow_nan))
        except NonFiniteSampleError:
            left_out.append(f)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's code, as in run_hook
            return acc, f"{Path(f).name}: {_one_line(e)}", left_out
        if tick is not None:
            tick(1)
    if left_out and len(left_out) == len(files):
        return acc, (f"every sample holds NaN or infinite values ({len(files)} left out, e.g. "
                     f"{Path(left_out[0]).name})"), left_out
    return acc, None, left_out


def run_hook(hook: EvalHook, runner: EvalRunner, samples: str | None, limit: int | None = None,
             allow_nan: bool = False) -> StageMetric:
    """Call the hook once on one stage's runner (a per-sample hook once per sample file, on the first ``limit`` files
    when given, values averaged; a whole-set hook reads ``samples`` itself, ``limit`` cannot cap it). A hook
    that raises (or returns something else than a number or a dict of numbers, or NaN unless ``allow_nan``) gives a
    StageMetric with ``error`` set (the exception's type and first line), not an exception: the other stages are
    still evaluated."""
    t0 = time.perf_counter()
    if hook.per_sample:
        try:
            acc, error, left_out = per_sample_sums(hook, runner, sample_files(samples, limit), allow_nan=allow_nan)
        except GraphAuditError as e:
            acc, error, left_out = MeanAccumulator(), str(e), []
        return stage_metric(runner.stage, runner.runtime, acc, runner.samples_run, error, time.perf_counter() - t0,
                            left_out)
    try:
        values, error = _values(_call_hook(hook, runner, samples), hook, allow_nan), None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's code: anything it raises (sys.exit too)
        # becomes a finding; KeyboardInterrupt still stops the run
        values, error = {}, _one_line(e)
    return StageMetric(stage=runner.stage, runtime=runner.runtime, samples=runner.samples_run,
                       values={k: json_number(v) for k, v in values.items()},
                       seconds=round(time.perf_counter() - t0, 3), error=error)


def stage_metric(stage: str, runtime: str, acc: MeanAccumulator, samples: int, error: str | None,
                 seconds: float, left_out: list[str] | None = None) -> StageMetric:
    """The StageMetric of a per-sample hook: the means of ``acc`` (no values when ``error`` is set); ``left_out``:
    the sample files left out for NaN or infinite values (:func:`per_sample_sums`)."""
    values = {} if error else {k: json_number(v) for k, v in acc.means().items()}
    return StageMetric(stage=stage, runtime=runtime, samples=samples, values=values, seconds=round(seconds, 3),
                       error=error, left_out=list(left_out or []))


def not_run_metric(stage: str, why: str) -> StageMetric:
    """The metric entry of a stage that was not measured, ``why`` without a leading ``"<stage>: "`` (the reasons of
    :func:`graphaudit.measure.unrunnable_stages` name their stage; the entry names it beside the reason)."""
    named = f"{stage}: "
    return StageMetric(stage=stage, not_run=why[len(named):] if why.startswith(named) else why)


def evaluate_on_runners(hook: EvalHook, stages: list[StageGraph], samples: str | None,
                        not_runnable: dict[int, str], make_runner: Callable[[int], EvalRunner],
                        progress: Callable[[str], None] | None = None,
                        limit: int | None = None) -> list[StageMetric]:
    """The hook on every stage, in pipeline order: ``make_runner(i)`` builds stage ``i``'s runner; a stage in
    ``not_runnable`` (index -> reason) or one the runtime refuses gets ``not_run``. One runner (one session) is
    alive at a time. ``limit``: a per-sample hook's sample files, the first ones (:func:`run_hook`)."""
    out: list[StageMetric] = []
    for i, st in enumerate(stages):
        if i in not_runnable:
            out.append(not_run_metric(st.name, not_runnable[i]))
            continue
        if progress is not None:
            progress(st.name)
        try:
            runner = make_runner(i)
        except StageRunError as e:
            out.append(StageMetric(stage=st.name, not_run=str(e)))
            continue
        out.append(run_hook(hook, runner, samples, limit))
        del runner
    return out
