"""``python -m bench.fuzz --count 2000 --seed 1``: generate hostile inputs, run the real CLI on each, print totals.

--count is the number of generated input files (a run reads 1 to 6 of them); --jobs runs at a time (default 2);
--workdir keeps the runs that show a problem (default a temporary directory); --json writes every record; --only 45,52
runs those cases of the seed again.
Exit code 1 when any run shows a traceback, a hang past 60 s, more than 2 GB RSS, a modified input, a file written
next to the inputs, or a refusal that is not one line naming an input.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from .cases import make_case, make_cases
from .runner import as_dicts, run_all, totals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=2000, help="generated input files (default 2000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json", type=Path, help="write every run's record here")
    ap.add_argument("--only", help="comma-separated case indices of this seed to run again (from a PROBLEM line)")
    args = ap.parse_args(argv)
    cases = ([make_case(args.seed, int(i)) for i in args.only.split(",")] if args.only
             else make_cases(args.seed, args.count))
    work = args.workdir or Path(tempfile.mkdtemp(prefix="graphaudit-fuzz-"))
    done = [0]
    t0 = time.monotonic()

    def progress(r):
        done[0] += 1
        bad = r.problems()
        if bad or done[0] % 50 == 0:
            print(f"[{done[0]} {time.monotonic() - t0:.0f}s] {r.id} {r.kind} rc={r.rc} "
                  f"{r.wall_s:.1f}s {' '.join(bad)}", file=sys.stderr, flush=True)

    records = run_all(cases, work, jobs=args.jobs, progress=progress)
    tot = totals(records)
    tot["wall_s_total"] = round(time.monotonic() - t0, 1)
    if args.json:
        args.json.write_text(json.dumps({"totals": tot, "records": as_dicts(records)}, indent=1))
    print(f"fuzz seed {args.seed}: {tot['runs']} runs, {tot['inputs']} input files, {tot['wall_s_total']} s")
    for k in ("exit_codes", "tracebacks", "hangs", "over_rss", "modified", "written", "bad_refusals", "max_wall_s",
              "max_rss_mb"):
        print(f"  {k:13} {tot[k]}")
    for r in records:
        if r.problems():
            print(f"  PROBLEM {r.id} {r.kind} {' '.join(r.problems())}: {' '.join(r.argv)} "
                  f"({r.stderr_tail.strip().splitlines()[-1] if r.stderr_tail.strip() else ''}) kept in {work / r.id}")
    return 1 if any(r.problems() for r in records) else 0


if __name__ == "__main__":
    raise SystemExit(main())
