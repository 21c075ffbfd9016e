"""The fuzzing suite's CI subset (bench/fuzz, README "Fuzzing"): a fixed seed, two generated cases of every input kind
graphaudit reads, each run through the real CLI (`python -m graphaudit` in a subprocess) under the suite's caps
(60 s, 2 GB RSS). Every run must end without a traceback, a hang or too much memory, leave its inputs byte for byte
as they were, write nothing next to them, and refuse (exit 2) only in one line naming the file or option at fault.
The full run (>= 2,000 inputs) is `python -m bench.fuzz --count 2000 --seed 1`."""

from __future__ import annotations

from bench.fuzz.cases import KINDS, per_kind
from bench.fuzz.runner import run_all, totals

SEED = 15
EACH = 2


def test_fuzz_ci_subset(tmp_path):
    cases = per_kind(SEED, EACH)
    assert {c.kind for c in cases} == set(KINDS) and len(cases) == EACH * len(KINDS)
    records = run_all(cases, tmp_path / "runs", jobs=2)
    tot = totals(records)
    bad = [(r.id, r.kind, r.problems(), " ".join(r.argv), r.stderr_tail[-300:]) for r in records if r.problems()]
    assert not bad, bad
    assert tot["runs"] == len(cases) and sum(tot["exit_codes"].values()) == len(cases)
    assert "killed" not in tot["exit_codes"]
    # each run was really a graphaudit run: an exit code of the CLI's own (0 clean, 1 findings, 2 refused)
    assert set(tot["exit_codes"]) <= {"0", "1", "2"}
