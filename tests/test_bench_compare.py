"""bench/bench_compare.py's reason rows: the split of a measured figure, checked against differences worked out by
hand (the figures are those of a cls run: floor 79.0 MB, of which 57.4 after imports; graphaudit 59.6 after imports,
65.9 after the structure step, peak 109.2; aligned set 19.3 MB)."""

from __future__ import annotations

from bench.bench_compare import why_lines

CLS = {"rss": 109.2, "floor_rss": 79.0, "aligned_mb": 19.3, "floor_rss_imports": 57.4, "rss_imports": 59.6,
       "rss_structure": 65.9, "ratio": 1.2, "target": 1.5, "floor_s": 0.10, "outputs": None}


def test_rss_reason_splits_the_peak():
    (line,) = why_lines(CLS)
    # 59.6 - 57.4 = 2.2; 65.9 - 59.6 = 6.3; 109.2 - 65.9 = 43.3; 79.0 - 57.4 = 21.6; 109.2 - 79.0 - 19.3 = 10.9
    assert "holds 59.6 MB against the floor's 57.4 (+2.2 MB" in line
    assert "after the structure step 65.9 MB (+6.3 MB" in line
    assert "peaks 43.3 MB above that, against one sample's aligned set of 19.3 MB and the floor's 21.6 MB" in line
    assert line.endswith("over the target by 10.9 MB")


def test_time_reason_names_the_capture_floor_when_measured():
    slow = {**CLS, "rss": 90.0, "ratio": 1.9, "outputs": {"s": 0.172, "rss": 102.0}}
    # the RSS target is met (90 <= 79 + 19.3); 0.172 / 0.10 = 1.72x
    assert why_lines(slow) == ["why (time): onnxruntime alone writing the aligned set out, with no reduction, takes "
                               "1.72x the floor (the floor with the aligned tensors as extra outputs)"]
    assert why_lines({**slow, "outputs": None})[0].startswith("why (time): run with --outputs")
    both = why_lines({**CLS, "outputs": {"s": 0.2, "rss": 102.0}})
    assert both[0].endswith("the floor with the aligned tensors as extra outputs, peaks at 102.0 MB")
