"""One pipeline through the whole job of ``explain``: audit, input checks, numeric comparison, toolchain log."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .errors import DataError, GraphAuditError
from .explain import Audit, audit, load_pipeline
from .inputcheck import attach_form_effects, attach_input_findings
from .measure import unrunnable_stages, default_data_stage, measure
from .numeric.compare import DEFAULT_COSINE_THRESHOLD
from .report import RunInfo
from .toolchain_log import attach_toolchain_log, load_toolchain_file, pick_toolchain_file

__all__ = ["RunOptions", "run_pipeline", "user_inputs", "contract_errors"]


@dataclass
class RunOptions:
    """What to do with a pipeline besides aligning and checking it (all optional).

    ``config`` is a parsed :class:`graphaudit.config.ConversionConfig`; ``data``/``random`` run the numeric
    comparison (``data`` also the input checks); ``log`` names a toolchain log, ``find_log`` looks for one
    beside the stages (:func:`graphaudit.toolchain_log.pick_toolchain_file`). The numeric fields are those
    of :func:`graphaudit.measure.measure`.
    """

    source: str | os.PathLike | None = None
    config: Any = None
    data: str | os.PathLike | None = None
    random: int | None = None
    seed: int = 0
    threshold: float = DEFAULT_COSINE_THRESHOLD
    isolated: bool = True
    raw_dtype: str | None = None
    raw_shape: tuple | None = None
    input_shapes: dict[str, tuple] = field(default_factory=dict)
    max_samples: int | None = None
    progress: Callable | None = None
    log: str | os.PathLike | None = None
    find_log: bool = False
    runtime: str = "auto"


def run_pipeline(paths: list[str | os.PathLike], title: str = "", opts: RunOptions | None = None) -> Audit:
    """Load, align and check one pipeline, then what ``opts`` asks for; findings and sections land in ``.report``.

    Order: the toolchain log is parsed and mapped before the (slow) numeric run so a bad log fails fast;
    input findings come before the numeric findings. Data that cannot be fed to the stages (NHWC into NCHW,
    a wrong size) skip the numeric comparison when the input findings say why (``report.run.numeric_skipped``). A log none of whose node rows names a node of the
    stages is refused when given, ignored when found beside the stages.

    Raises
    ------
    GraphAuditError
        Bad stages, config, data or log (one-line messages).
    """
    o = opts or RunOptions()
    au = audit(load_pipeline(paths, source=o.source), title=title, config=o.config)
    found = o.log or (pick_toolchain_file(paths) if o.find_log else None)
    try:
        tlog = load_toolchain_file(found) if found is not None else None
    except GraphAuditError as e:
        if o.log:
            raise
        raise GraphAuditError(f"{e} (found beside the stages; --no-log skips it)") from e
    if tlog is not None:  # mapped before the (slow) numeric run, so a log of another model fails fast
        attach_toolchain_log(au, tlog)
        tc = au.report.toolchain
        if tc is not None and tc.nodes_total and not tc.nodes_mapped:  # every row names a node the stages lack
            if o.log:
                raise GraphAuditError(f"{found}: none of its {tc.nodes_total} node rows names a node of the "
                                      "stages: a log of another model?")
            au.report.toolchain, tlog = None, None  # found beside the stages, but not theirs: ignored
    if o.data is not None:
        attach_input_findings(au, o.data, default_data_stage(au), o.raw_dtype, o.raw_shape, o.max_samples)
    skipped = None
    if o.data is not None or o.random is not None:
        try:
            measure(au, data=o.data, random=o.random, seed=o.seed, threshold=o.threshold, isolated=o.isolated,
                    raw_dtype=o.raw_dtype, raw_shape=o.raw_shape, progress=o.progress, input_shapes=o.input_shapes,
                    max_samples=o.max_samples, runtime=o.runtime)
        except DataError as e:  # data that cannot be fed: fine when the input findings already say why
            why = sorted({f.code for f in contract_errors(au.report.findings)})
            if o.data is None or not why:
                raise
            skipped = f"{e} (the input findings {', '.join(why)} say why)"
        if tlog is not None and skipped is None:  # again, now with graphaudit's cosine beside the toolchain's
            attach_toolchain_log(au, tlog)
        if o.data is not None:  # what each recognised data mistake costs at the data stage's outputs
            attach_form_effects(au, o.data, default_data_stage(au), o.raw_dtype, o.raw_shape,
                                au.report.run.runtime if au.report.run and au.report.run.runtime else "onnxruntime")
    cfg = o.config
    measured = au.report.run or RunInfo()
    au.report.run = RunInfo(config=str(cfg.path) if cfg is not None else None,
                            config_family=cfg.family if cfg is not None else None,
                            data=str(o.data) if o.data is not None else None, random=o.random,
                            log=str(found) if tlog is not None else None, numeric_skipped=skipped,
                            numeric_not_run=[why for _i, why in unrunnable_stages(au.stages, measured.runtime
                                                                                   or "onnxruntime")]
                            if (o.data is not None or o.random is not None) and skipped is None else [],
                            runtime=measured.runtime, runtimes=measured.runtimes)
    return au


def contract_errors(findings: list) -> list:
    """The error-severity input findings (P2xx): data that violate a stage's input contract, which make any
    numeric comparison on them measure the data rather than the toolchain."""
    return [f for f in findings if f.code.startswith("P") and f.severity == "error"]


def user_inputs(paths: list[str | os.PathLike], *extra: str | os.PathLike | None) -> list[Path]:
    """Everything the user gave us, which outputs must never overwrite or land in: the stage paths (directories
    and the files in them) and the ``extra`` files or directories (source model, config, data, log; None skipped)."""
    out: list[Path] = [Path(x) for x in extra if x]
    for p in map(Path, paths):
        out.append(p)
        try:
            if p.is_dir():
                out.extend(q for q in p.iterdir() if q.is_file())
        except OSError:
            pass
    return out
