"""What a data mistake costs: a stage's outputs on the data as given against the same data corrected."""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from ..errors import GraphAuditError
from ..stage import StageGraph
from .runner import StageRunner

__all__ = ["correction_effect", "EFFECT_SAMPLES"]

#: Samples the effect of a data mistake is measured on (each runs the stage twice).
EFFECT_SAMPLES = 4


def _apply(x: np.ndarray, k: np.ndarray, c: np.ndarray, axis: int | None) -> np.ndarray:
    """``k * x + c`` per channel along ``axis`` (one value for every element when ``axis`` is None or the channel
    counts differ)."""
    v = np.asarray(x, dtype=np.float64)
    if axis is None or v.ndim <= axis or v.shape[axis] != k.size:
        return v * float(k.ravel()[0]) + float(c.ravel()[0])
    shape = [1] * v.ndim
    shape[axis] = k.size
    return v * k.reshape(shape) + c.reshape(shape)


def correction_effect(stage: StageGraph, samples: Iterable[dict[str, np.ndarray]], input_name: str,
                      k: list[float], c: list[float], axis: int | None, runtime: str = "onnxruntime",
                      max_samples: int = EFFECT_SAMPLES, only: list[int] | None = None) -> dict:
    """Run ``stage`` on the samples as given and on the same samples with ``input_name`` corrected to
    ``k * x + c`` (per channel along ``axis``), and compare every graph output.

    Parameters
    ----------
    stage : StageGraph
    samples : iterable of dict
        Input name -> array, in the stage's layout (as :func:`graphaudit.inputcheck.fed_samples` yields them).
    input_name : str
    k, c : list of float
        The correction per channel (:meth:`graphaudit.toolchains.valuedomain.DomainVerdict.correction`).
    axis : int or None
        The channel axis of the input.
    runtime : {"onnxruntime", "horizon"}
    max_samples : int
    only : list of int, optional
        Correct only these samples (a data set that mixes right and wrong samples); the others run as given.

    Returns
    -------
    dict
        ``{"stage", "runtime", "samples", "corrected", "outputs": {name: {"cosine", "sqnr_db"}}}``: cosine similarity and SQNR
        (dB, ``10 log10(|corrected|^2 / |given - corrected|^2)``) of each output over all samples (float64 sums),
        the corrected run being the reference; or ``{"stage", "error"}`` when the stage cannot run the data.
    """
    kk, cc = np.asarray(k, np.float64), np.asarray(c, np.float64)
    sums: dict[str, list[float]] = {}
    n = corrected = 0
    try:
        runner = StageRunner(stage, [], runtime=runtime)
        types = {i.name: i.type for i in runner.session.get_inputs()}
        for sample in samples:
            if n >= max_samples:
                break
            feeds = {name: np.asarray(x, dtype=np.float32 if "float" in types.get(name, "float") else None)
                     for name, x in sample.items()}
            fixed = dict(feeds)
            if only is None or n in only:
                fixed[input_name] = _apply(feeds[input_name], kk, cc, axis).astype(feeds[input_name].dtype)
                corrected += 1
            got, ref = runner.run(feeds), runner.run(fixed)
            for name in runner.output_names:
                a, b = np.asarray(got[name], np.float64).ravel(), np.asarray(ref[name], np.float64).ravel()
                s = sums.setdefault(name, [0.0, 0.0, 0.0, 0.0])
                s[0] += float(a @ b)
                s[1] += float(a @ a)
                s[2] += float(b @ b)
                s[3] += float((a - b) @ (a - b))
            n += 1
    except (GraphAuditError, KeyError, ValueError) as e:
        return {"stage": stage.name, "error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    outputs = {}
    for name, (dot, aa, bb, ee) in sums.items():
        cos = dot / math.sqrt(aa * bb) if aa > 0 and bb > 0 else float("nan")
        sqnr = 10 * math.log10(bb / ee) if ee > 0 and bb > 0 else (float("inf") if ee == 0 else float("nan"))
        outputs[name] = {"cosine": cos, "sqnr_db": sqnr}
    return {"stage": stage.name, "runtime": runtime, "samples": n, "corrected": corrected, "outputs": outputs}
