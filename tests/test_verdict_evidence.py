"""The verdict's evidence line quotes what was measured, not the rule's catalogue summary."""

from __future__ import annotations

import numpy as np

import graphaudit
from graphaudit.catalogue import load_catalogue
from graphaudit.measure import NumericOptions


def test_nan_data_evidence_is_the_count(samples, tmp_path):
    """P209's NaN/inf variant: the count of non-finite values (numpy.isfinite over the files written here), not
    P209's summary (constant, near-duplicate and noise samples)."""
    files = sorted((samples / "data" / "ppocr_cls" / "x").glob("*.npy"))[:3]
    data = tmp_path / "data"
    data.mkdir()
    bad = 0
    for k, f in enumerate(files):
        x = np.load(f).astype(np.float32)
        if k == 1:
            x[0, 0, :5, :7] = np.nan
            x[0, 2, 10, :3] = np.inf
        bad += int(np.sum(~np.isfinite(x)))
        np.save(data / f"{k}.npy", x)
    assert bad == 38
    au = graphaudit.audit([samples / "ort" / "ppocr_cls"], data=data, numeric=NumericOptions(isolated=False))
    line = au.report.verdict[0]
    assert line.cause == "harness" and "P209" in line.codes, line
    assert f"{bad:,} NaN or infinite value(s) in the data for input 'x'" in line.evidence, line.evidence
    assert load_catalogue()["P209"].summary not in line.evidence
