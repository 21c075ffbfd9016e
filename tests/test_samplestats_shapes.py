"""Samples of different shapes in one data set (graphaudit.data.samplestats.SampleSet): no crash, right indices."""

from __future__ import annotations

import numpy as np

from graphaudit.data.samplestats import SampleSet


def test_a_sample_of_another_shape_is_left_out_of_the_duplicate_search_and_indices_stay_right():
    # a breaker run: 16 samples of 1x3x48x192 with one of 1x3x7x7 in the middle ended in np.stack's ValueError
    rng = np.random.default_rng(0)
    a = rng.random((1, 3, 48, 192), dtype=np.float32)
    b = rng.random((1, 3, 48, 192), dtype=np.float32)
    s = SampleSet()
    s.add(a, 1)                                   # sample 0
    s.add(rng.random((1, 3, 7, 7)), 1)            # sample 1: another shape
    s.add(b, 1)                                   # sample 2
    s.add(a.copy(), 1)                            # sample 3: a copy of sample 0
    assert s.samples == 4
    assert s.duplicates == [(0, 3)]               # sample indices, not positions among the searched ones


def test_samples_holding_nan_or_inf_raise_no_numpy_warning_and_leave_the_others_figures_alone(samples, tmp_path):
    """Real PP-OCR cls samples, one with a NaN and one with an +inf: before, the per-sample statistics subtracted
    a NaN/inf mean and numpy printed "RuntimeWarning: invalid value encountered in subtract" to the library user.
    Expected (independently): the lag-1 correlations and near-duplicate search of the finite samples alone, the
    channel means of the finite values (numpy's nanmean), and the NaN/inf reported by P209 only."""
    import warnings

    from graphaudit.inputcheck import check_inputs
    from graphaudit.pipeline import load_pipeline

    src = samples / "data" / "ppocr_cls" / "x"
    xs = [np.load(src / f"{k}.npy").astype(np.float64) for k in range(4)]
    bad = [x.copy() for x in xs[2:]]
    bad[0].flat[7] = np.nan
    bad[1][0, 1, 3, 5] = np.inf
    s, ref = SampleSet(), SampleSet()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in xs[:2] + bad:
            s.add(x, 1)
        for x in xs[:2]:
            ref.add(x, 1)
    assert s.samples == 4 and s.correlations == ref.correlations and s.duplicates == ref.duplicates == []
    assert s.channel_means[2] == [float(v) for v in np.nanmean(bad[0][0], axis=(1, 2))]
    fin = np.where(np.isfinite(bad[1]), bad[1], np.nan)
    assert np.allclose(s.channel_means[3], np.nanmean(fin[0], axis=(1, 2)), rtol=1e-12)
    assert all(np.isfinite(s.channel_mean_spread()))
    stages = load_pipeline([samples / "ort" / "ppocr_cls"])[:1]
    for k, x in enumerate(xs[:2] + bad):
        np.save(tmp_path / f"{k}.npy", x.astype(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = check_inputs(stages, tmp_path)[1]
    assert [(f.code, f.evidence.get("nonfinite")) for f in found if f.code == "P209"] == [("P209", 2)]
