"""Figures of the tests that run in Horizon's runtime (tests/horizon_runtime/), printed in the terminal summary."""

from __future__ import annotations

#: One line per real set and stage (worst tensor), appended by the tests.
LOWERING_LINES: list[str] = []
#: The toolchain-table reproduction per real set (tests/horizon_runtime/test_explain_horizon_runtime.py).
EXPLAIN_LINES: list[str] = []
#: The agreement table of graphaudit's config lint with hb_mapper's own validation (test_lint_vs_hb_mapper.py).
LINT_LINES: list[str] = []
#: Top-1 of the eval hook per stage of the real PP-OCR cls sets (test_eval_hook_horizon.py).
EVAL_LINES: list[str] = []


def pytest_terminal_summary(terminalreporter):
    """Print the worst tensor per set and stage of the lowering-vs-Horizon check."""
    if LOWERING_LINES:
        terminalreporter.section("graphaudit lowering vs Horizon's runtime: worst tensor per set and stage")
        for line in LOWERING_LINES:
            terminalreporter.write_line(line)
    if EXPLAIN_LINES:
        terminalreporter.section("hb_mapper's per-node cosine table reproduced by graphaudit (--runtime horizon)")
        for line in EXPLAIN_LINES:
            terminalreporter.write_line(line)
    if EVAL_LINES:
        terminalreporter.section("eval hook (--eval examples/eval_top1.py) per stage in Horizon's runtime")
        for line in EVAL_LINES:
            terminalreporter.write_line(line)
    if LINT_LINES:
        terminalreporter.section("graphaudit lint vs hb_mapper's own config validation (MpConf): agreement")
        for line in LINT_LINES:
            terminalreporter.write_line(line)
