"""Run fuzz cases through the real CLI (``python -m graphaudit`` in a subprocess) with a time and a memory cap.

Per run it records the exit code, whether stderr holds a traceback, the wall time, the peak RSS of the process
(and its children), whether a refusal (exit 2) is exactly one line naming an input file, the sha256 of every input
before and after, and any file that appeared next to the inputs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

import psutil

from .cases import Case

REPO = Path(__file__).resolve().parents[2]
TIME_CAP_S = 60.0
RSS_CAP_BYTES = 2 * 1024 ** 3
_POLL_S = 0.05


@dataclass
class Record:
    """What one run did. ``rc`` is None when the run was killed (``hang`` or ``over_rss``)."""

    id: str
    kind: str
    argv: list[str]
    inputs: int
    rc: int | None = None
    traceback: bool = False
    wall_s: float = 0.0
    peak_rss: int = 0
    hang: bool = False
    over_rss: bool = False
    modified: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    bad_refusal: str = ""  # exit 2 whose stderr is not one line naming an input
    stderr_tail: str = ""

    def problems(self) -> list[str]:
        """The acceptance failures of this run (empty: the run is fine)."""
        out = []
        for flag, name in ((self.traceback, "traceback"), (self.hang, "hang"), (self.over_rss, "over_rss"),
                           (self.modified, "modified"), (self.written, "written"), (self.bad_refusal, "bad_refusal")):
            if flag:
                out.append(name)
        return out


def _snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root`` (directories as 'dir')."""
    snap = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        snap[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return snap


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        for p in [proc, *proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return total


def _materialize(case: Case, root: Path) -> Path:
    """Write the case's files under ``root/in`` (``../x`` entries into ``root``); returns ``root/in``."""
    indir = root / "in"
    indir.mkdir(parents=True)
    (root / "out").mkdir()
    (root / "cwd").mkdir()
    for rel, data in case.files.items():
        p = (indir / rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return indir


def _judge_refusal(rec: Record, err: str, case: Case) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    # the file (or directory) at fault, or the command-line option at fault (--raw-shape '0x3x8x8': ...)
    names = [Path(k).name for k in case.files] + ["data", "model_output", "in"]
    names += [a for a in case.argv if a.startswith("--")]
    if len(lines) != 1:
        rec.bad_refusal = f"{len(lines)} lines"
    elif not any(n and n in lines[0] for n in names):
        rec.bad_refusal = "names no input"


def run_case(case: Case, workdir: Path, time_cap: float = TIME_CAP_S, rss_cap: int = RSS_CAP_BYTES,
             python: str = sys.executable, keep: bool = False) -> Record:
    """Run ``case`` in ``workdir/<id>`` and return its :class:`Record` (the directory is removed unless ``keep``
    or the run shows a problem)."""
    root = workdir / case.id
    if root.exists():
        shutil.rmtree(root)
    indir = _materialize(case, root)
    watched = {k: v for k, v in _snapshot(root).items() if not k.startswith(("out", "cwd"))}
    argv = [a.replace("{in}", str(indir)).replace("{out}", str(root / "out")) for a in case.argv]
    rec = Record(case.id, case.kind, case.argv, case.n_inputs)
    # the graphaudit of this checkout, whatever the environment has installed
    path = os.pathsep.join(x for x in (str(REPO), os.environ.get("PYTHONPATH", "")) if x)
    env = dict(os.environ, COLUMNS="160", PYTHONHASHSEED="0", PYTHONPATH=path)
    t0 = time.monotonic()
    proc = subprocess.Popen([python, "-m", "graphaudit", *argv], cwd=root / "cwd", env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    ps = psutil.Process(proc.pid)
    err_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)
    reader.start()
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            rec.peak_rss = max(rec.peak_rss, ru.ru_maxrss * 1024)
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        rec.peak_rss = max(rec.peak_rss, _tree_rss(ps))
        elapsed = time.monotonic() - t0
        if elapsed > time_cap or rec.peak_rss > rss_cap:
            rec.hang, rec.over_rss = elapsed > time_cap, rec.peak_rss > rss_cap
            os.killpg(proc.pid, signal.SIGKILL)
            os.wait4(proc.pid, 0)
            break
        time.sleep(_POLL_S)
    rec.wall_s = round(time.monotonic() - t0, 3)
    reader.join(5)
    err = b"".join(err_chunks).decode("utf-8", "replace")
    rec.rc = None if (rec.hang or rec.over_rss) else proc.returncode
    rec.traceback = "Traceback (most recent call last)" in err
    rec.stderr_tail = err[-600:]
    if rec.rc == 2:
        _judge_refusal(rec, err, case)
    after = {k: v for k, v in _snapshot(root).items() if not k.startswith(("out", "cwd"))}
    rec.modified = sorted(k for k, v in watched.items() if after.get(k) != v)
    rec.written = sorted(set(after) - set(watched))
    if not keep and not rec.problems():
        shutil.rmtree(root, ignore_errors=True)
    return rec


def run_all(cases: Iterable[Case], workdir: Path, jobs: int = 2, progress=None, **kw) -> list[Record]:
    """Run every case, ``jobs`` at a time; ``progress(record)`` is called as each finishes. ``cases`` is consumed
    lazily (at most ``2 * jobs`` cases held at once: a case holds its files' bytes)."""
    workdir.mkdir(parents=True, exist_ok=True)
    out: list[Record] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        pending: set = set()
        for c in cases:
            pending.add(ex.submit(run_case, c, workdir, **kw))
            if len(pending) >= 2 * jobs:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    out.append(f.result())
                    if progress:
                        progress(out[-1])
        for f in pending:
            out.append(f.result())
            if progress:
                progress(out[-1])
    return out


def totals(records: list[Record]) -> dict:
    """The run's totals: runs, inputs, exit codes, tracebacks, hangs, over-RSS, modified, written, bad refusals,
    slowest run and highest peak RSS."""
    codes: dict[str, int] = {}
    for r in records:
        k = "killed" if r.rc is None else str(r.rc)
        codes[k] = codes.get(k, 0) + 1
    return {"runs": len(records), "inputs": sum(r.inputs for r in records), "exit_codes": dict(sorted(codes.items())),
            "tracebacks": sum(r.traceback for r in records), "hangs": sum(r.hang for r in records),
            "over_rss": sum(r.over_rss for r in records), "modified": sum(bool(r.modified) for r in records),
            "written": sum(bool(r.written) for r in records),
            "bad_refusals": sum(bool(r.bad_refusal) for r in records),
            "max_wall_s": max((r.wall_s for r in records), default=0.0),
            "max_rss_mb": round(max((r.peak_rss for r in records), default=0) / 2 ** 20, 1)}


def as_dicts(records: list[Record]) -> list[dict]:
    return [asdict(r) for r in records]
