"""The files and directories a conversion config refers to (model, calibration data, the toolchain's stage files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..toolchains.discovery import STAGE_SUFFIXES
from .parse import ConversionConfig
from .values import is_unset, split_per_input

__all__ = ["config_inputs", "config_path"]

#: Files hb_mapper / hb_compile write into ``working_dir`` besides the stage models, as ``{prefix}{suffix}``
#: (docs/HORIZON.md section 1): the deployable model and the per-node quantization report.
_OTHER_OUTPUTS = (".bin", ".hbm", "_quant_info.json")


def config_path(cfg: ConversionConfig, value: Any) -> Path | None:
    """A path value of the config resolved as lint resolves it: relative to the config's directory.

    Parameters
    ----------
    cfg : ConversionConfig
    value : Any
        The YAML value (a string; numbers are read as their text).

    Returns
    -------
    pathlib.Path or None
        ``cfg.base_dir / value`` (or ``value`` when absolute); None for unset values (``None``, ``''``,
        ``'None'``), mappings, lists, booleans and text with a NUL byte (no file system can hold that name).
    """
    if is_unset(value) or isinstance(value, (dict, list, bool)):
        return None
    text = str(value).strip()
    if not text or "\0" in text:
        return None
    p = Path(text)
    return p if p.is_absolute() else cfg.base_dir / p


def config_inputs(cfg: ConversionConfig) -> list[Path]:
    """Every path the config refers to, existing or not: what an output must never overwrite or land in.

    ``model_parameters.onnx_model``, ``caffe_model`` and ``prototxt``; every ``cal_data_dir`` (one per input,
    ';'-separated or a YAML list); a ``quant_config`` JSON file; and the files the toolchain writes into
    ``working_dir`` (default ``model_output``) with ``output_model_file_prefix`` (default ``model``): the stage
    models ``{prefix}_original_float_model.onnx`` ... ``{prefix}_quantized_model.onnx``, ``{prefix}.bin``,
    ``{prefix}.hbm`` and ``{prefix}_quant_info.json`` (docs/HORIZON.md section 1). ``working_dir`` itself is not
    listed: it is the toolchain's output directory, often the config's own directory (``'.'``).

    Parameters
    ----------
    cfg : ConversionConfig
        A parsed config (:func:`graphaudit.config.load_config` or a toolchain log's echo).

    Returns
    -------
    list of pathlib.Path
        Absolute paths (relative values resolved against ``cfg.base_dir``, the config's directory), not
        resolved through symlinks, without duplicates, in the order above.
    """
    out: list[Path] = []

    def add(value: Any) -> None:
        p = config_path(cfg, value)
        if p is not None and p not in out:
            out.append(p)

    for key in ("onnx_model", "caffe_model", "prototxt"):
        add(cfg.get("model_parameters", key))
    for item in split_per_input(cfg.get("calibration_parameters", "cal_data_dir")):
        add(item)
    qc = cfg.get("calibration_parameters", "quant_config")
    if isinstance(qc, str) and qc.strip().lower().endswith(".json"):
        add(qc)
    wd = cfg.get("model_parameters", "working_dir")
    wd_path = config_path(cfg, "model_output" if is_unset(wd) else wd)
    prefix = cfg.get("model_parameters", "output_model_file_prefix")
    prefix = "model" if is_unset(prefix) or isinstance(prefix, (dict, list, bool)) else str(prefix).strip()
    if wd_path is not None and prefix and "\0" not in prefix and "/" not in prefix:
        for suffix in [s for s, _role in STAGE_SUFFIXES if s.endswith("_model.onnx")] + list(_OTHER_OUTPUTS):
            p = wd_path / f"{prefix}{suffix}"
            if p not in out:
                out.append(p)
    return out
