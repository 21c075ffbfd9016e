"""A stage with a dynamic input size (PP-OCR cls takes [-1, 3, ?, ?]) fed samples of two widths: each change
measured alone is measured on every sample. Region inputs were typed with the first sample's dims, so the region
sessions refused every sample after one of another width (a breaker's run: 35 + 130 regions measured on 2 of 12
samples, without a word, and other figures than on 2 workers)."""

from __future__ import annotations

import numpy as np

from graphaudit import NumericOptions, audit


def test_every_region_is_measured_on_every_sample(samples, tmp_path):
    src = sorted((samples / "data" / "ppocr_cls" / "x").glob("*.npy"), key=lambda p: int(p.stem))[:6]
    d = tmp_path / "x"
    d.mkdir()
    for i, p in enumerate(src):
        a = np.load(p)
        if i == 1:  # the same model input at another width: 100 instead of 192
            a = np.random.default_rng(1).random((1, 3, 48, 100), dtype=np.float32)
        np.save(d / f"{i}.npy", a)
    au = audit([samples / "ort" / "ppocr_cls"], data=d, numeric=NumericOptions())
    for tr in au.report.numeric:
        assert tr.regions, "no region measured alone"
        assert {r.samples for r in tr.regions} == {6}, (tr.a, tr.b, sorted({r.samples for r in tr.regions}))
