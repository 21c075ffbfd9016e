"""``graphaudit bisect``: the smallest set of a transition's changes whose reversion recovers most of its drop.

Steps: load and align the pipeline; take the revertible splice units of transition ``pair``
(:func:`graphaudit.numeric.hybrid.revertible`); order them by isolated error, measured by the numeric comparison of
the stages up to b; search with :func:`graphaudit.numeric.grouptest.group_test`, each step one hybrid model
(:func:`graphaudit.numeric.hybrid.build_hybrid`) run on the same samples as stage a. The default metric is the
SQNR of the graph outputs against stage a's; the share of the drop a hybrid recovers is ``1 - noise(hybrid) /
noise(b)``, with noise the sum over samples and outputs of the squared difference from a's outputs (float64).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, replace


from .bisect_report import BisectReport, BisectStepRecord, BisectUnitRecord
from .classify import Change, has_fixed_point
from .config import ConversionConfig
from .errors import GraphAuditError
from .bisect_eval import HookOracle
from .fixes import suggest_fix
from .lineage import Alignment
from .hybrideval import HybridEvaluator
from .measure import NumericOptions, data_stage_of, sample_source, unrunnable_stages
from .numeric.backends import malloc_scope, resolve_runtime
from .numeric.grouptest import default_budget, group_test, order_units
from .numeric.compare import FLOAT_EQUAL_SQNR_DB
from .numeric.hybrid import revertible
from .pipeline import _as_config, _structure, load_pipeline
from .scaleout import WorkerPool
from .shards import run_numeric_scaled
from .shards_bisect import ShardedHybrids, hook_oracle

_HybridEvaluator = HybridEvaluator  # the name tests/test_bisect.py imports

__all__ = ["bisect", "DEFAULT_BISECT_SAMPLES"]

#: Samples each hybrid evaluation runs when neither ``numeric.max_samples`` nor ``--max-samples`` says otherwise.
DEFAULT_BISECT_SAMPLES = 8


def _sqnr(noise: float, signal: float) -> float:
    return math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)


def _default_pair(stages, runtime: str) -> int:
    """The last transition whose two stages the runtime runs (where quantization happens in a Horizon set), but not
    one into the fixed-point stage when an earlier one runs: every change there reads or writes integers in NHWC, so
    none can be reverted to float (Horizon's runtime runs the quantized stage)."""
    cut = next((i for i, _why in unrunnable_stages(stages, runtime)), len(stages))
    if cut < 2:
        raise GraphAuditError("bisect needs two consecutive stages the runtime can run")
    if cut >= 3 and has_fixed_point(stages[cut - 1]):
        return cut - 3
    return cut - 2


@malloc_scope()
def bisect(paths, pair: int | None = None, *, source: str | os.PathLike | None = None, config=None,
           data: str | os.PathLike | None = None, numeric: NumericOptions | None = None, target: float = 0.8,
           budget: int | None = None, progress: Callable | None = None,
           on_start: Callable[[int, int, int, int, int], None] | None = None, eval_hook=None,
           eval_samples: str | os.PathLike | None = None) -> BisectReport:
    """Find a small set of transition ``pair``'s changes whose reversion recovers ``target`` of its drop.

    Parameters
    ----------
    paths : path-like or list of path-like
        The stages (a directory or files in pipeline order), as for :func:`graphaudit.audit`.
    pair : int, optional
        Transition ``stages[pair] -> stages[pair + 1]``; default the last one the runtime runs.
    source, config, data
        As for :func:`graphaudit.audit` (the config declares layout and colour; its ``cal_data_dir`` is used when
        neither ``data`` nor ``numeric.random`` are given).
    numeric : NumericOptions, optional
        Runtime, random samples, ``max_samples`` (default :data:`DEFAULT_BISECT_SAMPLES`).
    target : float
        Share of the drop to recover, in (0, 1].
    budget : int, optional
        Most hybrid evaluations (:func:`graphaudit.numeric.grouptest.default_budget` by default).
    progress : callable, optional
        Called with each :class:`graphaudit.numeric.grouptest.BisectStep`.
    on_start : callable, optional
        Called once before the search as ``on_start(units, not_revertible, budget, samples, fix_budget)``:
        ``budget`` bounds the search's hybrid evaluations, ``fix_budget`` those of the int16 fix's prediction and
        second search after it (``budget + 1`` when a unit holds an HzCalibration, else 0; see
        :class:`graphaudit.bisect_report.BisectReport`).
    eval_hook, eval_samples : optional
        The user's metric (``--eval``, :class:`graphaudit.bisect_eval.HookOracle`) instead of the output SQNR: the
        share recovered is ``(m(hybrid) - m(b)) / (m(a) - m(b))`` in its first value. Without data, 4 random
        samples order the units by isolated error. ``numeric.max_samples`` given caps a per-sample hook's files; a
        per-sample hook without ``eval_samples`` is refused before any work.

    Returns
    -------
    BisectReport

    Raises
    ------
    GraphAuditError
        Bad paths, data or options; a transition without a drop or without revertible changes; stages the runtime
        cannot run (one line each).
    """
    if eval_hook is not None:  # a bad spec, or a per-sample hook without samples: refused before any work
        HookOracle.check(eval_hook, eval_samples)
    stages = load_pipeline(paths if isinstance(paths, (list, tuple)) else [paths], source)
    cfg = _as_config(config)
    opts = numeric if numeric is not None else NumericOptions()
    opts.validate()
    runtime = _runtime(opts.runtime)
    pair = _check_pair(pair, stages, runtime, budget, target)
    lineage, changes, _covs = _structure(stages)
    al, ch = lineage.alignments[pair], changes[pair]
    units = _units(al, ch, stages, pair)
    if eval_hook is not None and data is None and opts.random is None and cfg is None:
        opts = replace(opts, random=4)
    data = _data(data, opts, cfg)
    n_samples = opts.max_samples or DEFAULT_BISECT_SAMPLES
    opts_n = replace(opts, max_samples=n_samples, progress=None)
    idx = data_stage_of(stages)
    left_out = [] if data is None else [why for _p, why in sample_source(stages, idx, data, opts_n, cfg).unreadable]
    scale = opts.scale if opts.scale is not None and opts.scale.active else None
    with WorkerPool(scale) if scale else nullcontext() as pool:
        isolated = _isolated_db(stages[:pair + 2], lineage, changes, data, opts_n, idx, cfg, pair, units, pool)
        ev = (ShardedHybrids(pool, stages, pair, al, ch, data, opts_n, idx, cfg, runtime, n_samples) if pool else
              HybridEvaluator(stages, pair, al, ch, sample_source(stages, idx, data, opts_n, cfg), idx, cfg, runtime,
                              n_samples))
        noise_b, signal = ev.noise([])
        _check_drop(noise_b, signal, stages, pair)
        hook = None if eval_hook is None else hook_oracle(pool, stages, pair, eval_hook, eval_samples, runtime, cfg,
                                                          idx, opts.max_samples)
        rep = _search(ev, hook, (stages, al, ch, cfg, lineage), units, isolated, (noise_b, signal),
                      (pair, runtime, target, budget), (progress, on_start))
    rep.data_unreadable = left_out + [f"{why} (left out, as the numeric comparison leaves it out)"
                                      for _k, why in sorted(ev.left_out.items())]
    return rep


def _search(ev, hook: HookOracle | None, ctx, units: list[tuple[int, ...]], isolated: list, energies: tuple,
            job: tuple, callbacks: tuple) -> BisectReport:
    """The group test over the units ordered by isolated error, its report, and the fix it suggests."""
    stages, al, ch = ctx[:3]
    (noise_b, signal), (pair, runtime, target, budget), (progress, on_start) = energies, job, callbacks
    order = order_units(isolated)
    not_rev = sum(1 for j, c in enumerate(ch) if c.kind != "kept" and all(j not in u for u in units))
    budget = default_budget(len(order)) if budget is None else budget
    fix_budget = budget + 1 if any(al.b.nodes[n].op_type == "HzCalibration" for u in units for j in u
                                   for n in ch[j].b_nodes if n in al.b.nodes) else 0
    if on_start is not None:
        on_start(len(order), not_rev, budget, ev.count, fix_budget)
    recovery, metrics = _oracle(ev, hook, al, ch, [units[k] for k in order], noise_b)
    res = group_test(len(order), recovery, target, budget, progress)
    rep = BisectReport(
        a=stages[pair].name, b=stages[pair + 1].name, pair=pair,
        metric=hook.name if hook else "output SQNR (dB)", metric_a=hook.a if hook else math.inf,
        metric_b=hook.b if hook else _sqnr(noise_b, signal), samples=ev.count, runtime=runtime,
        target=target, budget=res.budget, not_revertible=not_rev,
        units=[_unit_record(al, ch, units[k], isolated[k]) for k in order],
        steps=[BisectStepRecord(list(s.units), s.recovered, metrics[s.units], s.phase, s.kept) for s in res.steps],
        chosen=list(res.units), recovered=res.recovered, metric_chosen=metrics.get(res.units, math.nan),
        reached=res.reached, fix_budget=fix_budget)
    _fix(rep, ev, ctx, order, units, noise_b, progress)
    return rep


def _units(al: Alignment, changes: list[Change], stages, pair: int) -> list[tuple[int, ...]]:
    units = revertible(al, changes)
    if not units:
        why = ""
        if has_fixed_point(stages[pair + 1]):
            why = " (the fixed-point stage's changes read or write integers in NHWC layout"
            if pair > 0 and stages[pair].role == "calibrated":
                why += (f"; --pair {pair - 1} bisects {stages[pair - 1].name} -> {stages[pair].name}, where "
                        "quantization is simulated in float")
            why += ")"
        raise GraphAuditError(f"{stages[pair].name} -> {stages[pair + 1].name}: no change that can be reverted{why}")
    return units


def _oracle(ev: HybridEvaluator, hook: HookOracle | None, al: Alignment, changes: list[Change],
            ordered: list[tuple[int, ...]], noise_b: float):
    """``(recovery(sel) -> share, metrics)``: the share of the drop the hybrid of the units ``sel`` (indices into
    ``ordered``) recovers, in output SQNR or the hook's metric; ``metrics[sel]`` keeps each measured value."""
    metrics: dict[tuple[int, ...], float] = {}

    def recovery(sel: tuple[int, ...]) -> float:
        revert = [j for k in sel for j in ordered[k]]
        if hook is not None:
            metrics[sel] = hook.hybrid_value(ev, revert)
            return hook.share(metrics[sel])
        noise, sig = ev.noise(revert)
        metrics[sel] = _sqnr(noise, sig)
        return 1.0 - noise / noise_b

    return recovery, metrics


def _fix(rep: BisectReport, ev: HybridEvaluator, ctx, order: list[int], units: list[tuple[int, ...]],
         noise_b: float, progress) -> None:
    """The setting to paste (``rep.fix``) and its predicted share (``rep.fix_recovered``), measured on the model the
    fix makes. A hb_mapper int16 fix predicted to win back less than half of what the float hybrid won is searched
    again with that model as the oracle (clipping at a calibrated threshold stays in int16): its units are
    ``rep.fix_units``."""
    stages, al, ch, cfg, lineage = ctx
    if not math.isfinite(rep.recovered):  # NaN: nothing measured to predict a fix against
        return
    fix = suggest_fix(rep, stages, al, ch, cfg, lineage)
    rep.fix, rep.fix_units = asdict(fix), list(rep.chosen)
    if fix.toolchain != "hb_mapper":
        return

    def rec16(sel: tuple[int, ...]) -> float:  # one evaluation of an int16 model, counted against rep.fix_budget
        rep.fix_evaluations += 1
        noise, _sig = ev.fix_noise([j for k in sel for j in units[order[k]]])
        return 1.0 - noise / noise_b

    rep.fix_recovered = rec16(tuple(rep.chosen))
    if rep.fix_recovered >= rep.recovered / 2:
        return
    res = group_test(len(order), rec16, rep.target, rep.fix_budget - rep.fix_evaluations,
                     None if progress is None else lambda s: progress(replace(s, phase="int16 " + s.phase)))
    if res.reached and res.recovered > rep.fix_recovered:
        rep.fix_units, rep.fix_recovered = list(res.units), res.recovered
        rep.fix = asdict(suggest_fix(rep, stages, al, ch, cfg, lineage, chosen=rep.fix_units))


def _check_drop(noise_b: float, signal: float, stages, pair: int) -> None:
    if not math.isfinite(noise_b):
        raise GraphAuditError(f"{stages[pair].name} -> {stages[pair + 1].name}: the outputs hold NaN or infinite "
                              f"values on these samples (output noise {noise_b}): no drop can be measured")
    if noise_b == 0 or (signal > 0 and 10 * math.log10(signal / noise_b) >= FLOAT_EQUAL_SQNR_DB):
        raise GraphAuditError(f"{stages[pair].name} -> {stages[pair + 1].name}: the outputs agree on these "
                              f"samples (SQNR >= {FLOAT_EQUAL_SQNR_DB:g} dB: float rounding at most): no drop to "
                              "bisect")


def _runtime(name: str) -> str:
    try:
        return resolve_runtime(name)
    except ValueError as e:
        raise GraphAuditError(f"--runtime {name}: {e}") from e


def _check_pair(pair: int | None, stages, runtime: str, budget: int | None, target: float) -> int:
    """``pair`` (None: :func:`_default_pair`) when it names a transition whose two stages the runtime runs and the
    search's ``budget`` and ``target`` are valid, else one line saying why not."""
    if budget is not None and budget < 2:
        raise GraphAuditError(f"--budget {budget}: at least 2 hybrid evaluations")
    if not 0 < target <= 1:
        raise GraphAuditError(f"--target {target}: the share must be in (0, 1]")
    pair = _default_pair(stages, runtime) if pair is None else pair
    if not 0 <= pair < len(stages) - 1:
        raise GraphAuditError(f"--pair {pair}: the pipeline has transitions 0..{len(stages) - 2}")
    for i, why in unrunnable_stages(stages, runtime):
        if i in (pair, pair + 1):
            raise GraphAuditError(f"--pair {pair} ({stages[pair].name} -> {stages[pair + 1].name}): {why}")
    return pair


def _data(data, opts: NumericOptions, cfg: ConversionConfig | None):
    """The data to run: given, random, or the config's cal_data_dir."""
    if data is not None or opts.random is not None:
        return data
    if cfg is not None:
        from .measure import config_data

        folder, note = config_data(cfg)
        if folder is not None and note is None:
            return folder
        if note:
            raise GraphAuditError(f"{cfg.path}: {note}")
    raise GraphAuditError("bisect needs samples: give --data PATH, --random N, or --config YAML with a cal_data_dir")


def _isolated_db(stages, lineage, changes, data, opts: NumericOptions, idx: int, cfg, pair: int,
                 units: list[tuple[int, ...]], pool: WorkerPool | None = None) -> list[float | None]:
    """Per unit, the worst isolated SQNR (dB) of its changes from the numeric comparison (on ``pool``'s workers
    when given), or None."""
    run = run_numeric_scaled(stages, lineage, changes, data, opts, idx, cfg, pool)
    if len(run.results) <= pair:
        return [None] * len(units)
    by_change: dict[int, float] = {}
    index = {id(c): j for j, c in enumerate(changes[pair])}
    for r in run.results[pair].regions:
        j = index.get(id(r.change))
        if j is not None and r.stats.samples:
            by_change[j] = min(by_change.get(j, math.inf), r.stats.sqnr_db)
    return [min((by_change[j] for j in u if j in by_change), default=None) for u in units]


def _unit_record(al: Alignment, changes: list[Change], unit: tuple[int, ...], db: float | None) -> BisectUnitRecord:
    first = changes[unit[0]]
    a_nodes = [al.a.nodes[n].name or n for j in unit for n in changes[j].a_nodes]
    b_nodes = [al.b.nodes[n].name or n for j in unit for n in changes[j].b_nodes]
    return BisectUnitRecord(list(unit), first.kind, first.pattern, list(dict.fromkeys(a_nodes)),
                            list(dict.fromkeys(b_nodes)), db if db is None or math.isfinite(db) else None)
