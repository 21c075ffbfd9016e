"""``lint_config``: every C3xx rule over one conversion config, with the model, stages and data it can reach."""

from __future__ import annotations

import os
from pathlib import Path

from ..checks.base import AuditContext, run_checks
from ..errors import ConfigError, StagesUnrelatedError
from ..findings import Finding, severity_rank
from ..lineage import Lineage, align_chain
from ..load import load_stage
from ..stage import StageGraph
from .parse import ConversionConfig, is_unset, load_config

__all__ = ["lint_config", "config_model_path"]


def config_model_path(cfg: ConversionConfig) -> Path | None:
    """The config's ``onnx_model`` resolved against the config's directory, when that file exists."""
    m = cfg.get("model_parameters", "onnx_model")
    if is_unset(m) or not isinstance(m, str):
        return None
    p = Path(m.strip())
    p = p if p.is_absolute() else cfg.base_dir / p
    return p if p.is_file() else None


def _lineage(stages: list[StageGraph]) -> Lineage | None:
    """Lineage of the stages, or None when fewer than two or when they do not align (no mapping then)."""
    if len(stages) < 2:
        return None
    try:
        return align_chain(stages)
    except StagesUnrelatedError:
        return None


def lint_config(path_or_cfg: str | os.PathLike | ConversionConfig, model: str | os.PathLike | None = None,
                stages: list[StageGraph] | None = None, data: str | os.PathLike | None = None,
                toolchain: str | None = None, lineage: Lineage | None = None) -> list[Finding]:
    """Lint a hb_mapper / hb_compile conversion config: rules C301-C332 (``rules/config.yaml``).

    Parameters
    ----------
    path_or_cfg : path-like or ConversionConfig
        The YAML file, or a config from :func:`graphaudit.config.load_config`.
    model : path-like, optional
        The ONNX model the config converts; default: the config's ``onnx_model`` when that file exists (relative
        paths resolve against the config's directory). Enables C320-C322 and a model-based input count and shape.
    stages : list of StageGraph, optional
        Loaded stage models (:func:`graphaudit.explain.load_pipeline`), pipeline order. Enables C323 (node names
        against the optimized_float stage; with the model as stage 0 the lineage names what a source node became)
        and C324 (decoded HzPreprocess mean/scale against the YAML).
    data : path-like, optional
        Calibration data directory overriding ``cal_data_dir`` (``data/<input name>/`` for several inputs).
        Enables C325-C326 (default: the config's ``cal_data_dir`` when it exists).
    toolchain : {"1.x", "3.x"}, optional
        Force the family when a path is given (else detected from ``march`` and keys).
    lineage : Lineage, optional
        Lineage of ``stages`` when the caller has it (saves aligning again).

    Returns
    -------
    list of Finding
        Most serious first, then by rule code and line. ``location`` = ``{"file", "line", "col", "key"}``
        (1-based line and column of the key in the YAML).

    Raises
    ------
    ConfigError
        The config cannot be read (see :func:`graphaudit.config.load_config`); ``data`` is not a directory.
    ModelLoadError
        ``model`` was given and cannot be loaded.
    """
    cfg = path_or_cfg if isinstance(path_or_cfg, ConversionConfig) else load_config(path_or_cfg, toolchain)
    if data is not None and not Path(data).is_dir():
        raise ConfigError(f"{data}: calibration data directory not found")
    model_path = Path(model) if model is not None else config_model_path(cfg)
    model_stage = None
    if model_path is not None:
        model_stage = next((s for s in stages or [] if s.role == "source" and Path(s.path).resolve() ==
                            model_path.resolve()), None) or load_stage(model_path, role="source", name="source")
    chain = list(stages or [])
    if chain and model_stage is not None and not any(s.role == "source" for s in chain):
        chain = [model_stage] + chain
        lineage = None
    if lineage is None or len(lineage.stages) != len(chain):
        lineage = _lineage(chain)
    from ..checks.config import CONFIG_CODES

    ctx = AuditContext(stages=chain, lineage=lineage, config=cfg, config_model=model_stage,
                       config_data=Path(data) if data is not None else None)
    findings = run_checks(ctx, CONFIG_CODES)
    findings.sort(key=lambda f: (severity_rank(f.severity), f.code, f.location.get("line", 0)))
    return findings
