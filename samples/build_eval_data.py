"""Labelled evaluation samples for the eval hook examples (``examples/eval_top1.py``, ``examples/eval_det.py``).

    python samples/build_eval_data.py [--out DIR] [--force]      # default DIR: samples/build/

Run after ``build_samples.py`` (and, for the real PP-OCR cls set, ``build_horizon_sets.py``). Writes
``DIR/data/eval/<name>/`` with ``x/<i>.npy`` (one input tensor per sample, in the input contract of the pipeline's
first stage) and ``meta.json`` (labels, and how they are known). Every label is true by construction, independently
of any model:

- ``rapid_orientation_horizon``: the Horizon-format set's ``calibration_data/x/<i>.npy`` (RGB - 128, the crops of
  ``data/rapid_orientation/images/<i>.png``, construction.json says so) with the rotation each page was turned by
  when rendered (``data/rapid_orientation/meta.json``).
- ``ppocr_cls_hb``: the real hb_mapper PP-OCR cls set's calibration files (``hb/ppocr_cls_bayes-e``, uint8 BGR pixels,
  the same files for both marches) as float32 ``pixel - 128`` (what its original_float stage takes), labelled with
  the flip applied to the text line each file was made from (its ``build.json`` names the image); skipped when the
  set is not built.
- ``ppocr_det_boxes``: 8 pages of 640x640 px rendered here with text lines at known places; ``boxes`` are the ink
  boxes of each line (Pillow ``textbbox``) in input pixels; ``x`` is rapidocr's det normalization
  ``(x/255 - 0.5)/0.5`` of the BGR page (no resize: 640 is a multiple of 32).

Idempotent: a folder whose ``meta.json`` exists is left alone unless ``--force``. Nothing here is committed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import build_samples as bs  # noqa: E402 - the renderer and vocabulary of the bundled samples

SEED = 20261203
DET_PAGES, DET_SIDE = 8, 640


def _write(dst: Path, xs: list[np.ndarray], meta: dict) -> None:
    """Write x/<i>.npy and meta.json into ``dst`` through a temporary folder (an interrupted run leaves nothing)."""
    tmp = dst.with_name(dst.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "x").mkdir(parents=True)
    for i, x in enumerate(xs):
        np.save(tmp / "x" / f"{i}.npy", x)
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)
    print(f"build_eval_data: {dst}: {len(xs)} samples")


def rapid_orientation_horizon(root: Path) -> tuple[list, dict] | None:
    src = root / "horizon" / "rapid_orientation" / "calibration_data" / "x"
    labels = json.loads((root / "data" / "rapid_orientation" / "meta.json").read_text())["samples"]
    if not src.is_dir():
        return None
    xs = [np.load(src / f"{s['i']}.npy") for s in labels]
    return xs, {"model": "rapid_orientation (Horizon-format set)", "contract": "float32 RGB pixel - 128, NCHW",
                "labels_from": "data/rapid_orientation/meta.json: the clockwise rotation applied to each rendered page",
                "samples": [{"i": k, "label": s["label"]} for k, s in enumerate(labels)]}


def ppocr_cls_hb(root: Path) -> tuple[list, dict] | None:
    set_dir = root / "hb" / "ppocr_cls_bayes-e"
    if not (set_dir / "build.json").is_file():
        return None
    cal = json.loads((set_dir / "build.json").read_text())["calibration"]
    labels = {int(s["i"]): s["label"] for s in json.loads((root / "data" / "ppocr_cls" / "meta.json").read_text())["samples"]}
    xs, samples = [], []
    for k, f in enumerate(cal["files"]):
        raw = np.fromfile(set_dir / cal["dir"] / f["file"], np.uint8).reshape(cal["shape"])
        xs.append(raw.astype(np.float32) - 128.0)
        samples.append({"i": k, "label": labels[int(Path(f["image"]).stem)], "file": f["file"], "image": f["image"]})
    return xs, {"model": "PP-OCR mobile cls (real hb_mapper sets ppocr_cls_<march>)",
                "contract": "float32 BGR pixel - 128, NCHW [1,3,48,192] (the original_float stage's input)",
                "labels_from": "data/ppocr_cls/meta.json: '180' = the text line was turned upside down when rendered",
                "samples": samples}


def _det_page(rng: np.random.Generator) -> tuple[np.ndarray, list[list[int]]]:
    """A page of text lines at known places: the RGB page and each line's ink box [x0, y0, x1, y1]."""
    img = Image.fromarray(bs.background(rng, DET_SIDE, DET_SIDE))
    d = ImageDraw.Draw(img)
    boxes, y = [], int(rng.integers(20, 50))
    while True:
        f = bs.font(int(rng.integers(14, 34)))
        x = int(rng.integers(20, DET_SIDE // 3))
        text = bs.sentence(rng, int(rng.integers(2, 7)))
        while text and d.textlength(text, font=f) > DET_SIDE - 20 - x:
            text = text.rsplit(" ", 1)[0] if " " in text else ""
        x0, y0, x1, y1 = d.textbbox((x, y), text, font=f)
        if not text or y1 > DET_SIDE - 20:
            break
        d.text((x, y), text, font=f, fill=bs.ink(rng))
        boxes.append([int(x0), int(y0), int(x1), int(y1)])
        y = y1 + int(rng.integers(int(f.size * 0.6), int(f.size * 2.5)))
    return np.asarray(img), boxes


def ppocr_det_boxes(root: Path) -> tuple[list, dict]:
    rng = np.random.default_rng(SEED)
    xs, samples = [], []
    for i in range(DET_PAGES):
        page, boxes = _det_page(rng)
        bgr = page[..., ::-1].astype(np.float32)
        xs.append(((bgr / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32))
        samples.append({"i": i, "boxes": boxes})
    return xs, {"model": "PP-OCRv4 det (rapidocr-onnxruntime 1.4.4)", "side": DET_SIDE,
                "contract": "float32 BGR (x/255 - 0.5)/0.5, NCHW [1,3,640,640]",
                "labels_from": "Pillow textbbox of each rendered line (ink box, input pixels, x0 y0 x1 y1)",
                "seed": SEED, "samples": samples}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "build", help="the build_samples.py output (default "
                                                                      "samples/build)")
    ap.add_argument("--force", action="store_true", help="rewrite folders that exist")
    args = ap.parse_args(argv)
    root = args.out.resolve()
    if not (root / "data" / "rapid_orientation" / "meta.json").is_file():
        print(f"build_eval_data: {root}: run samples/build_samples.py first", file=sys.stderr)
        return 2
    for name, make in (("rapid_orientation_horizon", rapid_orientation_horizon), ("ppocr_cls_hb", ppocr_cls_hb),
                       ("ppocr_det_boxes", ppocr_det_boxes)):
        dst = root / "data" / "eval" / name
        if (dst / "meta.json").is_file() and not args.force:
            print(f"build_eval_data: {dst}: up to date")
            continue
        made = make(root)
        if made is None:
            print(f"build_eval_data: {name}: its source set is not built; skipped")
            continue
        _write(dst, *made)
    return 0


if __name__ == "__main__":
    sys.exit(main())
