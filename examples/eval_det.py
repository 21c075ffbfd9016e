"""Text detection quality of a DB-style text detector (PP-OCR det), one stage at a time: an eval hook for
``graphaudit --eval``.

    graphaudit compare STAGES --eval examples/eval_det.py:evaluate --eval-samples DIR

``DIR`` holds ``x/<i>.npy`` (one input tensor per sample, in the contract of the pipeline's first stage) and
``meta.json`` with ``{"samples": [{"i": 0, "boxes": [[x0, y0, x1, y1], ...]}, ...]}``: the text lines' boxes in
input pixels (``samples/build_eval_data.py`` renders such pages, ``samples/build/data/eval/ppocr_det_boxes``).

The stage's first output is the text probability map ``[1, 1, H, W]``. Thresholded at :data:`THRESH` (0.3,
rapidocr's ``DBPostProcess`` ``thresh``), it is compared with the boxes:

- ``text_iou``: intersection over union of the thresholded map with the boxes shrunk as DB builds its training
  target (offset ``D = A (1 - r^2) / L`` for area ``A``, perimeter ``L``, ``r = 0.4``; Liao et al., "Real-time
  Scene Text Detection with Differentiable Binarization", AAAI 2020, section 3.3), pixels summed over all samples;
- ``box_recall``: the share of boxes at least half of whose shrunk area is above the threshold;
- ``precision``: the share of pixels above the threshold that lie inside a (full) box.

All three: higher is better. Samples are streamed (one loaded, run, scored and dropped at a time); only pixel and
box counts are kept.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

#: Probability threshold of the text map (rapidocr-onnxruntime 1.4.4 ``DBPostProcess(thresh=0.3)``).
THRESH = 0.3
#: DB's shrink ratio of the training target.
SHRINK_RATIO = 0.4


def _shrunk(box: list[int]) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    d = w * h * (1 - SHRINK_RATIO ** 2) / (2 * (w + h)) if w + h > 0 else 0.0
    d = min(d, (min(w, h) - 1) / 2)
    return int(round(x0 + d)), int(round(y0 + d)), int(round(x1 - d)), int(round(y1 - d))


def _masks(shape: tuple[int, int], boxes: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    full, shrunk = np.zeros(shape, bool), np.zeros(shape, bool)
    for b in boxes:
        full[b[1]:b[3], b[0]:b[2]] = True
        x0, y0, x1, y1 = _shrunk(b)
        shrunk[y0:y1, x0:x1] = True
    return full, shrunk


def evaluate(run, samples: str) -> dict[str, float]:
    """``text_iou``, ``box_recall`` and ``precision`` of the stage ``run`` measures (see the module docstring).

    Raises
    ------
    FileNotFoundError, KeyError, ValueError
        No such folder or meta.json, a sample without a file, an output that is not a [1, 1, H, W] map of the
        input's size.
    """
    root = Path(samples)
    meta = json.loads((root / "meta.json").read_text())
    name = run.inputs[0].name
    inter = union = detected = inside = boxes_found = boxes_total = 0
    for s in meta["samples"]:
        x = np.load(root / "x" / f"{int(s['i'])}.npy", allow_pickle=False)
        prob = run(run.feeds_from({name: x}))[run.outputs[0]]
        if prob.ndim != 4 or prob.shape[:2] != (1, 1) or prob.shape[2:] != x.shape[2:]:
            raise ValueError(f"output {run.outputs[0]} has shape {list(prob.shape)}, not [1, 1, H, W] of the input")
        on = prob[0, 0] > THRESH
        full, shrunk = _masks(on.shape, s["boxes"])
        inter += int((on & shrunk).sum())
        union += int((on | shrunk).sum())
        detected += int(on.sum())
        inside += int((on & full).sum())
        for b in s["boxes"]:
            x0, y0, x1, y1 = _shrunk(b)
            region = on[y0:y1, x0:x1]
            boxes_found += int(region.size > 0 and region.mean() >= 0.5)
            boxes_total += 1
    if not boxes_total:
        raise ValueError(f"{root / 'meta.json'}: no boxes")
    return {"text_iou": inter / max(union, 1), "box_recall": boxes_found / boxes_total,
            "precision": inside / max(detected, 1)}
