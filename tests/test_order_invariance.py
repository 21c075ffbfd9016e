"""The structure results do not depend on the order of ``graph.initializer`` and ``graph.value_info``.

ONNX gives those two lists no meaning, and toolchains do not keep their order: two hb_mapper 1.24.3 conversions of
the same model with the same calibration data (samples/build_horizon_sets.py --no-cache, run twice) wrote stage
files whose initializers, weights and nodes are equal by name, with the same node order, that differ only in the
order of those lists; graphaudit aligned them differently (weight pairs at confidence 0.95 in one build and 1.0 in
the other, a tensor paired as 'layout' in one and 'quantized' in the other). Here each stage file is written again
with both lists shuffled (fixed seeds), and every result of the structure step must be the same as on the file as
built: the expected value is the unshuffled run of the same code, since the property under test is invariance.
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

import onnx
import pytest

from graphaudit.samples import samples_dir

sys.path.insert(0, str(Path(__file__).resolve().parent))
import horizon_check as hc  # noqa: E402
from test_alignment_stable import sections, snapshot  # noqa: E402


def _shuffled_copy(src: Path, dst: Path, seed: int) -> None:
    """Every ``.onnx`` of ``src`` into ``dst`` with its initializers and value_info in a shuffled order; other files
    (a directory's hb_mapper log, configs) copied as they are."""
    dst.mkdir(parents=True)
    rng = random.Random(seed)
    for f in sorted(src.iterdir()):
        if f.suffix != ".onnx":
            if f.is_file():
                shutil.copy(f, dst / f.name)
            continue
        m = onnx.load(str(f))
        for field in (m.graph.initializer, m.graph.value_info):
            items = list(field)
            rng.shuffle(items)
            del field[:]
            field.extend(items)
        onnx.save(m, str(dst / f.name))


def _cases() -> list[tuple[str, Path]]:
    out = [("ort-ppocr_cls", samples_dir() / "ort" / "ppocr_cls")]
    out += [(f"hb-{p.name}", p / "model_output") for p in hc.built_sets() if p.name in ("mtcnn_onet_bayes-e",
                                                                                           "ppocr_cls_bayes-e")]
    return out


@pytest.mark.parametrize("name,src", _cases(), ids=[n for n, _ in _cases()])
def test_alignment_does_not_depend_on_initializer_or_value_info_order(tmp_path, name, src):
    if not src.is_dir():
        pytest.skip(f"{src} not built (./setup.sh builds it)")
    want = sections(snapshot([src]))
    want.pop("stages")  # file paths and sizes
    for seed in (1, 2):
        dst = tmp_path / f"seed{seed}"
        _shuffled_copy(src, dst, seed)
        got = sections(snapshot([dst]))
        got.pop("stages")
        changed = sorted(k for k in want if want[k] != got.get(k))
        assert not changed, f"{name}: shuffling initializers/value_info (seed {seed}) changed {changed}"
