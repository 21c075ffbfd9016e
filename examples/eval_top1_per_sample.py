"""Top-1 of an image classifier, one sample per call: the per-sample form of ``eval_top1.py`` (``--workers``/``--ray``
shard its samples).

    graphaudit compare STAGES --data DIR/x --eval examples/eval_top1_per_sample.py:evaluate --eval-samples DIR/x

Each file of ``--eval-samples`` (``DIR/x/<i>.npy``, the layout ``samples/build_samples.py`` writes) is one sample;
its label is entry ``i`` of ``DIR/meta.json`` (the directory above the files), read as in ``eval_top1.py``: a class
name of ``"classes"``, or a rotation angle spread evenly over the outputs. ``evaluate`` returns ``{"top1": 1.0}`` when
the stage's argmax is the label, else ``{"top1": 0.0}``; graphaudit reports the mean over the samples (float64 sum /
count), which is ``eval_top1.py``'s top-1 on the same samples.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np


@lru_cache(maxsize=4)
def _meta(path: str) -> dict:
    return json.loads(Path(path).read_text())


def _class_of(meta: dict, i: int, n_classes: int) -> int:
    label = str(next(s["label"] for s in meta["samples"] if int(s["i"]) == i))
    if meta.get("classes") is not None:
        return meta["classes"].index(label)
    k = int(round(float(label) * n_classes / 360.0))
    if abs(k * 360.0 / n_classes - float(label)) > 1e-6 or not 0 <= k < n_classes:
        raise ValueError(f"label {label!r} is not one of {n_classes} evenly spaced angles")
    return k


def evaluate(run, sample: str) -> dict[str, float]:
    """1.0 when stage ``run`` classifies the sample file ``sample`` as its label, else 0.0.

    Raises
    ------
    FileNotFoundError, StopIteration, ValueError
        No meta.json above the file, no label for its index, a label that names no class.
    """
    p = Path(sample)
    meta = _meta(str(p.parent.parent / "meta.json"))
    x = np.load(p, allow_pickle=False)
    scores = run(run.feeds_from({run.inputs[0].name: x}))[run.outputs[0]].reshape(1, -1)
    return {"top1": float(int(np.argmax(scores[0])) == _class_of(meta, int(p.stem), scores.shape[-1]))}


evaluate.per_sample = True
