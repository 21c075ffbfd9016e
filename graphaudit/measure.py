"""Numeric side of the main job: run the stages on data and attach the comparison to an audit."""

from __future__ import annotations

import os
from collections import Counter

from .checks import run_checks
from .checks.base import AuditContext
from .explain import Audit
from .numeric.compare import DEFAULT_COSINE_THRESHOLD, TransitionNumeric, compare_stages, transition_dict
from .errors import GraphAuditError, StageRunError
from .findings import report_order
from .numeric.backends import HORIZON_RUNTIME, horizon_unavailable, resolve_runtime, runtime_label
from .numeric.data import InputSpec, input_specs, random_source
from .numeric.hbcal import open_stage_data
from .toolchains.contracts import stage_contracts
from .toolchains.ops import is_fixed_point

__all__ = ["measure", "default_data_stage", "unrunnable_stages", "NUMERIC_CODES"]

#: Largest --random sample count (each sample runs every stage).
MAX_RANDOM_SAMPLES = 100_000

#: Rule codes that need numeric results.
NUMERIC_CODES = ("N401", "N402", "N403")


def default_data_stage(au: Audit) -> int:
    """Index of the stage whose input contract user data follow: the toolchain's first stage
    (stage 1 when stage 0 is the user's ``--source`` model), else stage 0."""
    return 1 if au.stages[0].role == "source" and len(au.stages) > 1 else 0


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


def _compare_runnable(au: Audit, cut: int, compare) -> tuple[list[TransitionNumeric], list[tuple[int, str]], int]:
    """Run ``compare(k)`` over the first ``k = cut`` stages; when the runtime refuses a stage (StageRunError), record
    it (a finding, N403) and compare the stages before it instead. Returns (results, refused stages with their
    reasons, the number of stages compared)."""
    failed: list[tuple[int, str]] = []
    while cut >= 2:
        try:
            return compare(cut), failed, cut
        except StageRunError as e:
            bad = next((i for i, st in enumerate(au.stages[:cut]) if str(st.path) == str(e.path)), None)
            if bad is None:
                raise
            failed.append((bad, str(e)))
            cut = bad
    return [], failed, cut


def measure(au: Audit, data: str | os.PathLike | None = None, random: int | None = None, seed: int = 0,
            threshold: float = DEFAULT_COSINE_THRESHOLD, isolated: bool = True, data_stage: int | None = None,
            raw_dtype: str | None = None, raw_shape: tuple | None = None, progress=None,
            input_shapes: dict[str, tuple] | None = None, max_samples: int | None = None,
            runtime: str = "auto") -> list[TransitionNumeric]:
    """Run every stage of an audit on the same samples; attach results and numeric findings to ``au.report``.

    Parameters
    ----------
    au : Audit
    data : path-like, optional
        Samples (see :func:`graphaudit.numeric.data.open_data`), in the input contract of
        ``stages[data_stage]`` (images: raw pixels, converted per stage).
    random : int, optional
        Number of random samples when no data are given (seeded by ``seed``): uniform in the
        data stage's value domain ([-128, 128) for Horizon ``*_128`` inputs, [-1, 1) otherwise).
    threshold : float
        Cosine similarity below which a tensor has diverged.
    isolated : bool
        Measure each change on its own too.
    progress : callable(int total) -> callable(int), optional
        Factory of a per-sample callback (the CLI passes a rich progress bar).
    input_shapes : dict, optional
        Concrete shapes for inputs with symbolic dims (random data, and checks of given data).
    max_samples : int, optional
        Use only the first samples of the data.
    runtime : {"auto", "onnxruntime", "horizon"}
        Which runtime runs the stages (:func:`graphaudit.numeric.backends.resolve_runtime`); recorded in
        ``au.report.run["runtime"]``.

    Raises
    ------
    GraphAuditError (DataError, LoweringError, ...)
    """
    if not (-1.0 < threshold <= 1.0):  # also rejects NaN
        raise GraphAuditError(f"--threshold {threshold}: a cosine similarity threshold must be in (-1, 1]")
    if random is not None and not 1 <= random <= MAX_RANDOM_SAMPLES:
        raise GraphAuditError(f"--random {random}: give between 1 and {MAX_RANDOM_SAMPLES} samples")
    try:
        runtime = resolve_runtime(runtime)
    except ValueError as e:
        raise GraphAuditError(f"runtime: {e}") from e
    idx = default_data_stage(au) if data_stage is None else data_stage
    specs = input_specs(au.stages[idx])
    if input_shapes:
        known = {sp.name for sp in specs}
        for name in input_shapes:
            if name not in known:
                raise GraphAuditError(f"--input-shape {name}=...: {au.stages[idx].path} has no input {name!r} "
                                      f"(inputs: {', '.join(sorted(known))})")
        specs = [InputSpec(sp.name, sp.dtype, input_shapes.get(sp.name, sp.shape)) for sp in specs]
    if data is not None:
        src = open_stage_data(data, specs, raw_dtype=raw_dtype, raw_shape=raw_shape, config=au.config)
    else:
        x128 = any(c.domain == "x128" for c in stage_contracts(au.stages[idx]).values())
        low, high = (-128.0, 128.0) if x128 else (-1.0, 1.0)
        src = random_source(specs, random or 1, seed=seed, low=low, high=high)
    if max_samples is not None and max_samples < 1:
        raise GraphAuditError(f"--max-samples {max_samples}: need at least one sample")
    total = len(src) if max_samples is None else min(len(src), max_samples)
    tick = progress(total) if progress else None
    names = [str(f) for f in src.files] if len(getattr(src, "files", [])) == len(src) else None
    cut = next((i for i, _why in unrunnable_stages(au.stages, runtime)), len(au.stages))
    if cut < 2:
        raise GraphAuditError("no two consecutive stages that stock onnxruntime can run: "
                              + "; ".join(why for _i, why in unrunnable_stages(au.stages, runtime)))
    results, failed, cut = _compare_runnable(au, cut, lambda k: compare_stages(
        au.stages[:k], au.lineage.alignments[:k - 1], au.changes[:k - 1], src, idx, src.domain, threshold, isolated,
        tick, names, max_samples, config=au.config, runtime=runtime))
    run = {"config": None, "config_family": None, "data": str(data) if data is not None else None, "random": random,
           "log": None, "numeric_skipped": None, **(au.report.run or {})}
    au.report.run = {**run, "numeric_not_run": [why for _i, why in failed + unrunnable_stages(au.stages, runtime)],
                     "runtime": runtime, "runtimes": {st.name: runtime_label(runtime) for st in au.stages[:cut]}}
    au.report.numeric = [transition_dict(r) for r in results]
    ctx = AuditContext(stages=au.stages, lineage=au.lineage, changes=au.changes, coverage=au.coverage, numeric=results,
                       config=au.config, stage_failures=failed)
    au.report.findings.extend(run_checks(ctx, NUMERIC_CODES))
    au.report.findings.sort(key=report_order)
    return results
