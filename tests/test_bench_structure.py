"""bench/bench_structure.py's reason lines: the split of a measured figure, checked against sums worked out by hand."""

from __future__ import annotations

from bench.bench_structure import _row, _targets, why_budget, why_growth


def test_why_budget_splits_the_whole_process():
    # whole 1.46 s, in-process diff 1.22 s -> start-up 0.24 s; records 0.25 s -> passes 1.22 - 0.25 = 0.97 s = 3.88x;
    # budget 3 x 0.21 = 0.63 s -> 0.63 - 0.24 - 0.25 = 0.14 s left
    text = why_budget(1.46, 1.22, 0.25, 0.63)
    assert "start-up, imports and exit take 0.24 s" in text
    assert "0.25 s, and graphaudit's passes on them" in text
    assert "0.97 s, 3.9x the records' time; the budget is 0.63 s, which leaves 0.14 s" in text
    # 100k pair: budget 10 s, start-up 0.5, records 10.5 -> nothing left
    assert why_budget(21.0, 20.5, 10.5, 10.0).endswith("less than start-up and the records alone")


def test_why_growth_splits_records_and_passes():
    # records 0.25 -> 2.79 s = 11.16x; passes (1.22 - 0.25) = 0.97 -> (15.74 - 2.79) = 12.95 s = 13.35x
    text = why_growth(1.22, 15.74, 0.25, 2.79)
    assert text == ("why: the records alone grew 11.2x (0.250 -> 2.790 s) and graphaudit's passes on them 13.4x "
                    "(0.970 -> 12.950 s)")


def test_targets_print_a_reason_under_a_missed_target_only(capsys):
    rows = {"bundled a": (1.5, 0.5), "10k": (6.9, 1.46), "pair100k": (23.5, 9.5)}
    why = {"10k": "why: ten", "pair100k": "why: pair", "1000-10000": "why: growth"}
    _targets(rows, {"1000-10000": 10.5}, [1000, 10000], why)
    out = capsys.readouterr().out.splitlines()
    assert "  generated 10k x 3 stages <= 3x onnx.load: 6.90x NOT met" in out
    assert out[out.index("  generated 10k x 3 stages <= 3x onnx.load: 6.90x NOT met") + 1] == "    why: ten"
    assert "    why: pair" not in out and "    why: growth" not in out  # 9.5 s <= 10 s and 10.5x <= 11x: met


def test_a_row_just_over_its_bound_does_not_print_as_the_bound(capsys):
    # 0.39 / 0.19 = 2.05x: over <= 2x, and printed so (one decimal printed "2.0x ... NOT met")
    _row("case", 100, {"floor_cpu": 0.19, "floor": 0.2, "ga_cpu": 0.39, "ga": 0.4}, "<= 2x", 2.0)
    assert "| 2.05x | <= 2x | NOT met |" in capsys.readouterr().out
    _row("generated 10,000: pair optimized -> QDQ", 100, {"floor_cpu": 0.1, "floor": 0.1, "ga_cpu": 1.0, "ga": 1.0},
         "", None)  # a pair below 100k: no target of its own
    assert capsys.readouterr().out.rstrip().endswith("| 10.00x |  |  |")
