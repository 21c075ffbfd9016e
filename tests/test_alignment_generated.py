"""No-regression guard for the structure step on the generated models of ``bench/bench_structure.py``.

``tests/test_alignment_stable.py`` guards the bundled and real pipelines; the speed work of issue 17 is measured on
generated models (Conv -> BatchNormalization -> Relu/Clip -> Add blocks in three stages: original, onnxruntime's
ConvBNFusion, QDQ with each activation absorbed into quantization), whose size exercises what the small real
pipelines do not (hundreds of absorbed activations, thousands of wrapper chains). This test builds the 2,000- and
10,000-node models with the bench's own generator (deterministic, seed 0) and compares the structure-only audit
(what ``graphaudit diff`` computes: report JSON without tool name and version, every tensor pair, node pair and
absorbed activation) with a golden record of SHA-256 digests per section, exactly as test_alignment_stable.py does.

The golden record (``tests/data/alignment_golden/generated.json``) is the output of the code before the second
round of issue 17 part 1's speed work (main at 83116f6), written again by
``python tests/test_alignment_generated.py --regenerate`` for the deliberate change of test_alignment_stable.py's
docstring (a tensor table in an order of its own; same-named nodes paired backward at confidence 1.0).
As there, the code's own earlier output is the expected value on purpose: this test says that a change meant to
leave the results alone did; test_pipelines.py and test_change_kinds.py say whether the results are right.
Regenerate only for a change meant to alter alignment results, and say so in the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # for bench/; graphaudit comes from PYTHONPATH
from bench.bench_structure import generate  # noqa: E402
from test_alignment_stable import _normalise, sections, snapshot  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "data" / "alignment_golden" / "generated.json"
#: Generated model sizes (nodes of the original stage) checked; the 10,000-node one takes about 5 s here.
SIZES = (2000, 10000)


def _sections(size: int, tmp: Path) -> dict[str, list]:
    """Digests of the structure results of the generated ``size``-node pipeline (three stages), written in ``tmp``."""
    d = tmp / f"gen{size}"
    d.mkdir()
    files = generate(size, d)
    roots = sorted({str(d), str(d.resolve())}, key=len, reverse=True)
    snap = snapshot(files)
    snap = json.loads(json.dumps(_normalise(snap, roots)))
    return sections(snap)


@pytest.mark.parametrize("size", SIZES)
def test_generated_alignment_unchanged(size, tmp_path):
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    want, got = golden[str(size)], _sections(size, tmp_path)
    assert set(want) == set(got), f"sections lost {sorted(set(want) - set(got))}, added {sorted(set(got) - set(want))}"
    changed = [f"{k} (size {want[k][1]} -> {got[k][1]})" for k in want if want[k] != got[k]]
    assert not changed, f"generated {size}: results changed in {', '.join(changed)}"


def test_golden_is_not_trivial():
    """The record holds both sizes with every transition's tensor pairs non-empty (a golden of an empty alignment
    would pass any code)."""
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert set(golden) == {str(s) for s in SIZES}
    for size, secs in golden.items():
        pairs = {k: v for k, v in secs.items() if k.endswith("/tensor_pairs")}
        assert len(pairs) == 2 and all(n > 0.5 * int(size) for _h, n in pairs.values()), (size, pairs)


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python tests/test_alignment_generated.py --regenerate")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = {str(s): _sections(s, Path(tmp)) for s in SIZES}
    GOLDEN.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(out)} generated pipelines -> {GOLDEN}")
