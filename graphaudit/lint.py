"""``lint_config``: every C3xx rule over one conversion config, with the model, stages and data it can reach."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .checks import CONFIG_CODES, AuditContext, run_checks
from .errors import ConfigError, DataError, StagesUnrelatedError
from .findings import Finding, report_order
from .lineage import Lineage, align_chain
from .load import load_stage
from .stage import StageGraph, stage_arguments
from .toolchains import discover_stages
from .checks.config_cross import cal_dir_candidates
from .config.parse import ConversionConfig, is_unset, load_config
from .config.refs import config_path

__all__ = ["lint_config", "config_model_path", "lint_scope", "LintScope"]


def config_model_path(cfg: ConversionConfig) -> Path | None:
    """The config's ``onnx_model`` resolved against the config's directory, when that is an existing regular file."""
    p = config_path(cfg, cfg.get("model_parameters", "onnx_model"))
    try:
        return p if p is not None and stat.S_ISREG(p.stat().st_mode) else None
    except (OSError, ValueError):
        return None


def _file_problem(p: Path) -> str | None:
    """Why ``p`` cannot be read as a file without opening it ("not found", "a directory", "a FIFO or device"),
    None for a regular file."""
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        return "not found"
    except (OSError, ValueError) as e:
        return f"cannot be read ({getattr(e, 'strerror', None) or e})"
    if stat.S_ISDIR(mode):
        return "is a directory"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a FIFO, socket or device)"
    return None


def _shown(d: Path, cfg: ConversionConfig, data: str | os.PathLike | None) -> str:
    """A calibration directory as the user wrote it: relative to the config's directory (or as given)."""
    if data is not None:
        return str(d)
    try:
        return str(d.relative_to(cfg.base_dir))
    except ValueError:
        return str(d)


@dataclass
class LintScope:
    """What :func:`lint_config` can check for a config, and what it skips and why (for the report's header).

    Attributes
    ----------
    model : pathlib.Path or None
        The ONNX model the config is cross-checked against (C320-C322), None when there is none.
    data_dirs : list of pathlib.Path
        Calibration directories whose files are checked (C325-C326).
    checked : list of str
        One line per thing checked, e.g. ``"model: ../../models/m.onnx (onnx_model): C320-C322"``.
    skipped : list of str
        One line per thing skipped with the reason, e.g. ``"model: ../x.onnx not found: cross-checks against
        the model (C320-C322) skipped"``.
    """

    model: Path | None = None
    data_dirs: list[Path] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """``{"model", "data_dirs", "checked", "skipped"}`` with paths as strings (JSON-ready)."""
        return {"model": str(self.model) if self.model else None, "data_dirs": [str(d) for d in self.data_dirs],
                "checked": list(self.checked), "skipped": list(self.skipped)}


def lint_scope(cfg: ConversionConfig, model: str | os.PathLike | None = None,
               stages: str | os.PathLike | list | None = None, data: str | os.PathLike | None = None) -> LintScope:
    """Which cross-checks :func:`lint_config` runs for these arguments and which it skips, and why.

    Looks only at file metadata (``stat``) of ``model`` and ``data`` (never opens them); ``model``, ``stages`` and
    ``data`` as for :func:`lint_config` (stages given as paths are loaded, and refused as there).

    Raises
    ------
    ConfigError
        ``model`` is given but empty, missing, a directory or not a regular file (a FIFO would block the read);
        ``data`` is given but empty or not a directory.
    """
    sc = LintScope()
    stages = _stage_graphs(stages)
    if model is not None:
        if not str(model):
            raise ConfigError("--model: empty path")
        problem = _file_problem(Path(model))
        if problem:
            raise ConfigError(f"{model}: {problem}; expected the ONNX model the config converts")
        sc.model = Path(model)
        sc.checked.append(f"model: {model} (given): C320-C322")
    else:
        raw = cfg.get("model_parameters", "onnx_model")
        p = config_path(cfg, raw)
        if p is None:
            other = [k for k in ("caffe_model", "prototxt") if not is_unset(cfg.get("model_parameters", k))]
            why = "the config converts a Caffe model" if other else "no onnx_model in the config"
            sc.skipped.append(f"model: {why}: cross-checks against the model (C320-C322) skipped (give --model)")
        else:
            problem = _file_problem(p)
            if problem:
                sc.skipped.append(f"model: onnx_model {str(raw).strip()} {problem}: cross-checks against the "
                                  "model (C320-C322) skipped")
            else:
                sc.model = p
                sc.checked.append(f"model: onnx_model {str(raw).strip()}: C320-C322")
    if stages:
        names = ", ".join(Path(s.path).name for s in stages)
        sc.checked.append(f"stages: {names}: C323-C324")
        if not any(s.role == "optimized" for s in stages):
            sc.skipped.append("stages: no optimized_float stage: node names (C323) not checked")
        if not any(n.op_type == "HzPreprocess" for s in stages for n in s.nodes.values()):
            sc.skipped.append("stages: no HzPreprocess node: its mean/scale (C324) not compared with the config")
    if data is not None:
        if not str(data):
            raise ConfigError("--data: empty path")
        if not Path(data).is_dir():
            raise ConfigError(f"{data}: calibration data directory not found")
    for inp, d, problem in cal_dir_candidates(cfg, data):
        label = f"input {inp.index}" + (f" ({inp.name})" if inp.name else "")
        if problem is None:
            sc.data_dirs.append(d)
            sc.checked.append(f"calibration data: {label}: {_shown(d, cfg, data)}: file dtype and value range "
                              "(C325-C326; layout, colour order, sample quality: graphaudit check-inputs)")
        elif data is not None:
            msg = problem if problem.startswith(str(d)) else f"{d}: {problem}"
            raise DataError(f"{msg} (calibration data of {label}, from --data)")
        else:
            sc.skipped.append(f"calibration data: {label}: cal_data_dir {_shown(d, cfg, data)}: {problem}: "
                              "C325-C326 skipped")
    return sc


def _stage_graphs(stages) -> list[StageGraph]:
    """``stages`` of :func:`lint_config` as loaded stages: a stage directory or stage files (path-likes, as
    ``graphaudit lint --stages DIR`` takes them) are discovered, ordered and loaded; None or ``[]``: none.

    Raises
    ------
    GraphAuditError
        Not a path, a list of paths or a list of StageGraphs (:func:`graphaudit.stage.stage_arguments`).
    StageDiscoveryError, ModelLoadError
        As :func:`graphaudit.pipeline.load_pipeline` (fewer than two stages, a missing path, ...).
    """
    if stages is None or (isinstance(stages, (list, tuple)) and not stages):
        return []
    items = stage_arguments(stages, "stages")
    if isinstance(items[0], StageGraph):
        return items
    return [load_stage(f.path, role=f.role, name=f.name) for f in discover_stages(items)]


def _lineage(stages: list[StageGraph]) -> Lineage | None:
    """Lineage of the stages, or None when fewer than two or when they do not align (no mapping then)."""
    if len(stages) < 2:
        return None
    try:
        return align_chain(stages)
    except StagesUnrelatedError:
        return None


def lint_config(path_or_cfg: str | os.PathLike | ConversionConfig, model: str | os.PathLike | None = None,
                stages: str | os.PathLike | list | None = None, data: str | os.PathLike | None = None,
                toolchain: str | None = None, lineage: Lineage | None = None) -> list[Finding]:
    """Lint a hb_mapper / hb_compile conversion config: rules C301-C332 (``graphaudit/rules/config.yaml``).

    Parameters
    ----------
    path_or_cfg : path-like or ConversionConfig
        The YAML file, or a config from :func:`graphaudit.config.load_config`.
    model : path-like, optional
        The ONNX model the config converts; default: the config's ``onnx_model`` when that file exists (relative
        paths resolve against the config's directory). Enables C320-C322 and a model-based input count and shape.
    stages : path-like, list of path-like, or list of StageGraph, optional
        The stage models: a stage directory (the config's ``working_dir``, as ``graphaudit lint --stages DIR``) or
        stage files in pipeline order, loaded here, or stages already loaded
        (:func:`graphaudit.pipeline.load_pipeline`). Enables C323 (node names against the optimized_float stage;
        with the model as stage 0 the lineage names what a source node became) and C324 (decoded HzPreprocess
        mean/scale against the YAML).
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
        The config cannot be read (see :func:`graphaudit.config.load_config`); ``model`` is empty, missing, a
        directory or not a regular file; ``data`` is empty or not a directory.
    DataError
        ``data`` holds no calibration files, or a pickled, truncated or corrupt one (one line naming the file);
        with several inputs, ``data/<input name>/`` is missing. Problems of the config's own ``cal_data_dir``
        are not errors: :func:`lint_scope` lists them as skipped.
    ModelLoadError
        The model (``model``, or the config's ``onnx_model``) or a stage file cannot be loaded.
    StageDiscoveryError
        ``stages`` given as paths: missing, no stage files, fewer than two stages (as ``lint --stages``).
    GraphAuditError
        ``stages`` is neither paths nor StageGraphs, or a mix of both.

    Examples
    --------
    A key misspelt in the bundled sample's config is found at its line and column:

    >>> import pathlib, tempfile, graphaudit
    >>> good = graphaudit.samples_dir() / "horizon" / "rapid_orientation" / "config.yaml"
    >>> graphaudit.lint_config(good)
    []
    >>> bad = pathlib.Path(tempfile.mkdtemp()) / "config.yaml"
    >>> _ = bad.write_text(good.read_text().replace("march:", "mrach:"))
    >>> [(f.code, f.location["line"], f.location["col"]) for f in graphaudit.lint_config(bad)]
    [('C301', 6, 3)]
    """
    cfg = path_or_cfg if isinstance(path_or_cfg, ConversionConfig) else load_config(path_or_cfg, toolchain)
    stages = _stage_graphs(stages)
    model_path = lint_scope(cfg, model, stages, data).model
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
    ctx = AuditContext(stages=chain, lineage=lineage, config=cfg, config_model=model_stage,
                       config_data=Path(data) if data is not None else None)
    findings = run_checks(ctx, CONFIG_CODES)
    findings.sort(key=report_order)
    return findings
