"""How local worker processes ended, and ending the ones that do not (:class:`graphaudit.scaleout.WorkerPool`)."""

from __future__ import annotations

import contextlib
import signal
import time

__all__ = ["how_ended", "end_processes"]


def how_ended(processes: dict, wait: float = 1.0) -> str:
    """How the local worker processes that ended did: ``"exit code 7"``, ``"killed by SIGKILL"`` (``"it ended"`` when
    none says). The pool may see a worker's pipe close a moment before its exit status can be read: up to ``wait``
    seconds are given for one to show."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not any(getattr(p, "exitcode", None) for p in processes.values()):
        time.sleep(0.02)
    ends = []
    for proc in processes.values():
        code = getattr(proc, "exitcode", None)
        if code is None or code == 0:
            continue
        if code < 0:
            try:
                ends.append(f"killed by {signal.Signals(-code).name}")
            except ValueError:
                ends.append(f"killed by signal {-code}")
        else:
            ends.append(f"exit code {code}")
    own = [e for e in ends if e != "killed by SIGTERM"]  # SIGTERM: the pool stopping the others once one died
    return ", ".join(dict.fromkeys(own or ends)) or "it ended"


def end_processes(procs: list, wait: float) -> int:
    """Join the processes ``procs`` (multiprocessing) for up to ``wait`` seconds in all, then terminate those still
    alive (SIGTERM: a worker's exit that waits for a thread the ``--eval`` hook left running); returns how many
    were."""
    deadline = time.monotonic() + wait
    stuck = 0
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            stuck += 1
            with contextlib.suppress(Exception):
                proc.terminate()
    return stuck
