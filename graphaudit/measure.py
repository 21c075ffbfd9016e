"""Numeric step of the main job: run the stages of a pipeline on the same samples (a value, no report edits)."""

from __future__ import annotations

import numbers
import os
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .errors import GraphAuditError, StageRunError
from .lineage.align import align
from .numeric.backends import HORIZON_RUNTIME, horizon_unavailable, malloc_scope, resolve_runtime, runtime_label
from .numeric.thresholds import DEFAULT_COSINE_THRESHOLD
from .scaleout import ScaleOut
from .toolchains.ops import is_fixed_point

if TYPE_CHECKING:  # the data readers and the numeric runner are imported where they run: argument parsing
    # (NumericOptions) and structure-only runs (diff, lint) skip them
    from .classify import Change
    from .lineage import Lineage
    from .numeric.compare import TransitionNumeric
    from .stage import StageGraph

__all__ = ["NumericOptions", "NumericRun", "run_numeric", "data_stage_of", "unrunnable_stages", "sample_source", "NUMERIC_CODES",
           "MAX_RANDOM_SAMPLES", "CONFIG_DATA_SAMPLES", "config_data"]

#: Largest random sample count (each sample runs every stage).
MAX_RANDOM_SAMPLES = 100_000

#: Samples taken from the config's ``cal_data_dir`` when the run is given a config and neither data nor random
#: samples (the first ones, in hb_mapper's file order; ``max_samples`` overrides it).
CONFIG_DATA_SAMPLES = 16

#: Rule codes that need numeric results.
NUMERIC_CODES = ("N401", "N402", "N403")


@dataclass(frozen=True)
class NumericOptions:
    """How the stages are run on data (every field optional).

    Attributes
    ----------
    random : int, optional
        Number of random samples when no data are given (seeded by ``seed``): uniform in the data stage's value
        domain ([-128, 128) for Horizon ``*_128`` inputs, [-1, 1) otherwise), 1 to :data:`MAX_RANDOM_SAMPLES`.
    seed : int
        Seed of the random samples.
    threshold : float
        Cosine similarity in (-1, 1] below which a tensor has diverged.
    isolated : bool
        Measure each change on its own too (b's nodes of the change fed with a's values).
    max_samples : int, optional
        Use only the first samples of the data (at least 1).
    raw_dtype, raw_shape : optional
        How to read headerless ``.raw``/``.bin`` files (numpy dtype name; dims).
    input_shapes : dict of str to tuple
        Concrete shapes for inputs with symbolic dims (random data, and checks of given data).
    progress : callable(int total) -> callable(int), optional
        Factory of a per-sample callback (the CLI passes a rich progress bar).
    runtime : {"auto", "onnxruntime", "horizon"}
        Which runtime runs the stages (:func:`graphaudit.numeric.backends.resolve_runtime`).
    eval_progress : callable(str), optional
        Called with a stage's name before the eval hook runs on it (``--eval``).
    scale : ScaleOut, optional
        Shard the samples over local worker processes or a Ray cluster (``--workers``/``--ray``;
        :mod:`graphaudit.shards`, used by :func:`graphaudit.audit` and :func:`graphaudit.bisect`); None: this process.
    """

    random: int | None = None
    seed: int = 0
    threshold: float = DEFAULT_COSINE_THRESHOLD
    isolated: bool = True
    max_samples: int | None = None
    raw_dtype: str | None = None
    raw_shape: tuple | None = None
    input_shapes: dict = field(default_factory=dict)
    progress: Callable | None = None
    runtime: str = "auto"
    eval_progress: Callable | None = None
    scale: ScaleOut | None = None

    def problem(self) -> tuple[str, object, str] | None:
        """The first field of a wrong type or out of range as ``(field name, value, reason)``, or None when all
        are valid."""
        for name, kind, what in (("threshold", numbers.Real, "a number"), ("seed", numbers.Integral, "an integer"),
                                 ("random", (numbers.Integral, type(None)), "an integer or None"),
                                 ("max_samples", (numbers.Integral, type(None)), "an integer or None"),
                                 ("isolated", bool, "True or False")):
            value = getattr(self, name)
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
                return name, repr(value), f"must be {what}"
        if self.scale is not None and not isinstance(self.scale, ScaleOut):
            return "scale", repr(self.scale), "must be a ScaleOut or None"
        if self.runtime not in ("auto", "onnxruntime", "horizon"):
            return "runtime", repr(self.runtime), "must be 'auto', 'onnxruntime' or 'horizon'"
        if not (-1.0 < self.threshold <= 1.0):  # also rejects NaN
            return "threshold", self.threshold, "a cosine similarity threshold must be in (-1, 1]"
        if self.random is not None and not 1 <= self.random <= MAX_RANDOM_SAMPLES:
            return "random", self.random, f"give between 1 and {MAX_RANDOM_SAMPLES} samples"
        if self.max_samples is not None and self.max_samples < 1:
            return "max_samples", self.max_samples, "need at least one sample"
        return None

    def validate(self) -> None:
        """Raise :class:`GraphAuditError` naming the field (one line) when :meth:`problem` finds one."""
        bad = self.problem()
        if bad is not None:
            raise GraphAuditError(f"NumericOptions.{bad[0]} = {bad[1]}: {bad[2]}")


@dataclass
class NumericRun:
    """What the numeric step measured.

    Attributes
    ----------
    results : list of TransitionNumeric
        One per pair of consecutive stages compared (``ran``): ``stages[i] -> stages[i + 1]``, or, across a stage
        the runtime refused, the stage before it -> the stage after it (``a``/``b`` name the stages).
    refused : list of (int, str)
        Stages the runtime refused to load or run, with its reason (rule N403).
    runtime : str
        The resolved runtime ("onnxruntime" or "horizon").
    compared : int
        Number of stages that were run.
    not_run : list of str
        Why each stage not run was left out (refused or unrunnable in this runtime).
    samples : int
        Samples the stages were compared on: the data's count, capped by ``max_samples``, less ``left_out``.
    ran : list of int or None
        Indices of the stages that were run, in order (``None``: the first ``compared``).
    left_out : list of (str, str)
        Samples left out for NaN or infinite values in a stage's feed: (sample label, input name).
    """

    results: list[TransitionNumeric]
    refused: list[tuple[int, str]]
    runtime: str
    compared: int
    not_run: list[str]
    samples: int = 0
    ran: list[int] | None = None
    left_out: list[tuple[str, str]] = field(default_factory=list)

    def runtimes(self, stages: list[StageGraph]) -> dict[str, str]:
        """Stage name -> the runtime's label, for the stages that were run."""
        ran = self.ran if self.ran is not None else range(self.compared)
        return {stages[i].name: runtime_label(self.runtime) for i in ran}


def data_stage_of(stages: list[StageGraph]) -> int:
    """Index of the stage whose input contract user data follow: the toolchain's first stage
    (stage 1 when stage 0 is the user's ``--source`` model), else stage 0."""
    return 1 if stages[0].role == "source" and len(stages) > 1 else 0


#: The ``cal_data_type`` values hb_mapper 1.x reads calibration files with (docs/HORIZON.md section 4).
CAL_DATA_TYPES = ("uint8", "float32")


def config_data(config) -> tuple[Path | None, str | None]:
    """The calibration folder a conversion config names, to run when no data are given: ``(folder, None)``;
    ``(folder or None, why it cannot be used)``; ``(None, None)`` when there is no config or it names no folder.

    ``calibration_parameters.cal_data_dir`` resolves against the config file's directory, as hb_mapper resolves it
    (docs/INPUT_CONTRACTS.md section 3). Configs of several inputs (one folder per input, ';'-separated) are not
    read: their folders would have to be paired sample by sample (give ``--data`` a ``calibration_data/<input>/``
    directory instead).
    """
    if config is None:
        return None, None
    named = [ci.cal_data_dir for ci in getattr(config, "inputs", []) if ci.cal_data_dir]
    if not named:
        return None, None
    if len(config.inputs) > 1:
        return None, (f"the config's cal_data_dir names {len(named)} folders for {len(config.inputs)} inputs; "
                      "graphaudit reads the folder of a one-input config only (give --data a "
                      "calibration_data/<input>/ directory)")
    from .config.refs import config_path

    d = config_path(config, named[0])
    if d is None:
        return None, None
    try:
        d.stat()
        is_dir = d.is_dir()
    except FileNotFoundError:
        return d, f"the config's cal_data_dir {d}: no such directory"
    except OSError as e:  # a name too long, a loop, no permission
        return d, f"the config's cal_data_dir {d}: {e.strerror or type(e).__name__}"
    if not is_dir:
        return d, f"the config's cal_data_dir {d}: not a directory"
    kind = config.inputs[0].cal_data_type
    if kind is not None and str(kind).strip().lower() not in CAL_DATA_TYPES:
        return d, (f"the config's cal_data_type {kind!r} is not one hb_mapper reads ({', '.join(CAL_DATA_TYPES)}; "
                   "see finding C304): the files are not read with it")
    return d, None


def unrunnable_stages(stages: list, runtime: str = "onnxruntime") -> list[tuple[int, str]]:
    """Stages the runtime cannot run, with the reason: ``(index, reason)``.

    In stock onnxruntime: Horizon's fixed-point ops (HzSQuantizedConv, HzLut, ...) have no public bit-exact
    specification, so the 1.x ``*_quantized_model.onnx`` is not lowered (docs/HORIZON.md); its structure is
    still aligned and checked. Horizon's own runtime (``runtime="horizon"``) runs every stage.
    """
    if runtime == HORIZON_RUNTIME:
        return []
    why_not = horizon_unavailable()
    out = []
    for i, st in enumerate(stages):
        fixed = Counter(n.op_type for n in st.nodes.values() if is_fixed_point(n))
        if fixed:
            ops = ", ".join(f"{op} x{k}" for op, k in fixed.most_common(3)) + (", ..." if len(fixed) > 3 else "")
            out.append((i, f"{st.name}: fixed-point ops ({ops}) have no public bit-exact specification; stock "
                           "onnxruntime cannot run them, Horizon's own runtime can (--runtime horizon"
                           + (f"; here: {why_not}" if why_not else "") + ")"))
    return out


def _compare_runnable(stages: list[StageGraph], cut: int, compare, data_stage: int) -> tuple[
        list[TransitionNumeric], list[tuple[int, str]], list[int]]:
    """Run ``compare(indices)`` over the stages ``0 .. cut-1``; when the runtime refuses a stage (StageRunError),
    record it and compare the others without it: the stage after a refused one is compared with the last stage
    before it. Returns (results, refused stages with their reasons, the indices of the stages compared). A refused
    data stage (the one the samples are in the contract of) ends the comparison."""
    failed: list[tuple[int, str]] = []
    idxs = list(range(cut))
    while len(idxs) >= 2:
        try:
            return compare(idxs), failed, idxs
        except StageRunError as e:
            bad = next((i for i in idxs if str(stages[i].path) == str(e.path)), None)
            if bad is None:
                raise
            failed.append((bad, str(e)))
            idxs = [i for i in idxs if i < bad] if bad == data_stage else [i for i in idxs if i != bad]
    return [], failed, idxs


def _subset(stages: list[StageGraph], lineage: Lineage, changes: list[list[Change]], idxs: list[int]):
    """The stages ``idxs`` (in order) with an alignment and changes per consecutive pair: the pipeline's own for
    neighbours; across a stage left out a fresh alignment (:func:`graphaudit.lineage.align.align`) and no changes
    (its tensors are compared, no change is measured alone)."""
    als, chs = [], []
    for j, k in zip(idxs, idxs[1:]):
        if k == j + 1:
            als.append(lineage.alignments[j])
            chs.append(changes[j])
        else:
            als.append(align(stages[j], stages[k], check_related=False))
            # no changes: across a left-out stage a change mixes two transitions (a BatchNorm fold and the
            # quantization of the folded weight), so nothing is measured alone there; the tensors still are
            chs.append([])
    return [stages[i] for i in idxs], als, chs


def sample_source(stages: list[StageGraph], idx: int, data, opts: NumericOptions, config):
    """The samples to run: the user's data (``data``) or seeded random samples in the data stage's domain."""
    from .data.hbcal import open_stage_data
    from .data.random import random_source
    from .data.spec import InputSpec, input_specs
    from .toolchains.contracts import stage_contracts

    specs = input_specs(stages[idx])
    if opts.input_shapes:
        known = {sp.name for sp in specs}
        for name in opts.input_shapes:
            if name not in known:
                raise GraphAuditError(f"input shape {name}: {stages[idx].path} has no input {name!r} "
                                      f"(inputs: {', '.join(sorted(known))})")
        specs = [InputSpec(sp.name, sp.dtype, opts.input_shapes.get(sp.name, sp.shape)) for sp in specs]
    if data is not None:
        return open_stage_data(data, specs, raw_dtype=opts.raw_dtype, raw_shape=opts.raw_shape, config=config)
    x128 = any(c.domain == "x128" for c in stage_contracts(stages[idx]).values())
    low, high = (-128.0, 128.0) if x128 else (-1.0, 1.0)
    return random_source(specs, opts.random or 1, seed=opts.seed, low=low, high=high)


@malloc_scope()
def run_numeric(stages: list[StageGraph], lineage: Lineage, changes: list[list[Change]],
                data: str | os.PathLike | None = None, opts: NumericOptions | None = None,
                data_stage: int | None = None, config=None, shard: Callable | None = None) -> NumericRun:
    """Run every stage on the same samples and compare consecutive stages (``graphaudit compare``).

    Parameters
    ----------
    stages, lineage, changes
        The pipeline, its :class:`~graphaudit.lineage.Lineage` and classified changes per transition.
    data : path-like, optional
        Samples (see :func:`graphaudit.numeric.data.open_data`), in the input contract of ``stages[data_stage]``
        (images: raw pixels, converted per stage). Without data, ``opts.random`` random samples.
    opts : NumericOptions, optional
    data_stage : int, optional
        Default :func:`data_stage_of`.
    config : graphaudit.config.ConversionConfig, optional
        Declares layout and colour order of the inputs where the stages do not.
    shard : callable, optional
        ``shard(idxs, source, options, total) -> list of TransitionNumeric`` run instead of
        :func:`~graphaudit.numeric.compare.compare_stages` on the stages ``idxs`` (the sharded comparison of
        :func:`graphaudit.shards.run_numeric_scaled`); it raises what ``compare_stages`` would.

    Returns
    -------
    NumericRun

    Raises
    ------
    NoSampleLeftError
        Every sample holds NaN or infinite values (samples that do are left out: ``NumericRun.left_out``).
    GraphAuditError (DataError, LoweringError, ...)
        Bad options or data, no two consecutive stages the runtime can run.
    """
    from .numeric.compare import CompareOptions, compare_stages

    o = opts or NumericOptions()
    o.validate()
    try:
        runtime = resolve_runtime(o.runtime)
    except ValueError as e:
        raise GraphAuditError(f"runtime: {e}") from e
    idx = data_stage_of(stages) if data_stage is None else data_stage
    src = sample_source(stages, idx, data, o, config)
    total = len(src) if o.max_samples is None else min(len(src), o.max_samples)
    tick = o.progress(total) if o.progress else None
    names = [str(f) for f in src.files] if len(getattr(src, "files", [])) == len(src) else None
    unrunnable = unrunnable_stages(stages, runtime)
    cut = next((i for i, _why in unrunnable), len(stages))
    if cut < 2:
        raise GraphAuditError("no two consecutive stages that stock onnxruntime can run: "
                              + "; ".join(why for _i, why in unrunnable))
    copts = CompareOptions(data_stage=idx, data_domain=src.domain, threshold=o.threshold, isolated=o.isolated,
                           progress=tick, sample_names=names, max_samples=o.max_samples, config=config, runtime=runtime)

    def compare(idxs: list[int]) -> list[TransitionNumeric]:
        if shard is not None:
            return shard(idxs, src, replace(copts, data_stage=idxs.index(idx)), total)
        sub, als, chs = _subset(stages, lineage, changes, idxs)
        return compare_stages(sub, als, chs, src, replace(copts, data_stage=idxs.index(idx)))

    results, failed, ran = _compare_runnable(stages, cut, compare, idx)
    left_out = list(results[0].left_out) if results else []
    return NumericRun(results=results, refused=failed, runtime=runtime, compared=len(ran),
                      not_run=[why for _i, why in failed + unrunnable], samples=total - len(left_out), ran=ran,
                      left_out=left_out)
