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
