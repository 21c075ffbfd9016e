"""bisect's int16-fix model of PP-OCR cls bayes-e, run in Horizon's runtime, recovers what the real hb_mapper rebuild
with that node_info recovers (expected values and how they were obtained: tests/test_int16fix.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("horizon_nn", reason="Horizon's runtime imports only in the toolchain venv")

from graphaudit.bisection import _data  # noqa: E402
from graphaudit.hybrideval import HybridEvaluator, fix_model  # noqa: E402
from graphaudit.measure import NumericOptions, data_stage_of, sample_source  # noqa: E402
from graphaudit.pipeline import _as_config, _structure, load_pipeline  # noqa: E402

from ..test_int16fix import CHOSEN, CLS, REAL_NOISE_INT8, REAL_NOISE_INT16  # noqa: E402


@pytest.mark.skipif(CLS is None, reason="no real ppocr_cls_bayes-e set (set-up builds it)")
def test_int16_fix_model_in_horizon_runtime_matches_the_rebuild():
    cfg = _as_config(CLS / "config.yaml")
    stages = load_pipeline([CLS], None)
    lineage, changes, _ = _structure(stages)
    opts = NumericOptions(runtime="horizon", max_samples=4)
    idx = data_stage_of(stages)
    al, ch = lineage.alignments[1], changes[1]
    ev = HybridEvaluator(stages, 1, al, ch, sample_source(stages, idx, _data(None, opts, cfg), opts, cfg), idx, cfg,
                         "horizon", 4)
    units = [j for j, c in enumerate(ch) if c.kind == "inserted" and list(c.b_nodes) in ([x] for x in CHOSEN)]
    noise_b, _ = ev.noise([])
    noise_fix, _ = ev.noise([], fix_model(ev, units))
    assert noise_b == pytest.approx(REAL_NOISE_INT8, rel=1e-4)
    assert noise_fix == pytest.approx(REAL_NOISE_INT16, rel=1e-4)
