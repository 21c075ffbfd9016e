"""How local worker processes ended, and ending the ones that do not (:class:`graphaudit.scaleout.WorkerPool`)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

__all__ = ["how_ended", "close_executor"]


def how_ended(processes: dict, wait: float = 3.0) -> str:
    """How the local worker processes that ended did: ``"exit code 7"``, ``"killed by SIGKILL"`` (``"it ended"`` when
    none says). The pool may see a worker's pipe close a moment before its exit status can be read, and it sends
    SIGTERM to the others at once, whose status may show first: up to ``wait`` seconds are given for a status other
    than that SIGTERM to show (CI once read only "killed by SIGTERM" after an os._exit(7))."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not any(
            getattr(p, "exitcode", None) not in (None, 0, -signal.SIGTERM) for p in processes.values()):
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


def close_executor(executor, procs: list, wait: float) -> int:
    """``executor.shutdown(wait=True, cancel_futures=True)`` (a ProcessPoolExecutor whose worker processes are
    ``procs``), given ``wait`` seconds; then the processes still alive are terminated (SIGTERM: a worker whose exit
    waits for a thread the ``--eval`` hook left running) and the shutdown is awaited. Returns how many were. The
    executor's own thread reaps its processes: they are only looked at once the wait is over."""
    closer = threading.Thread(target=executor.shutdown, kwargs={"wait": True, "cancel_futures": True},
                              name="graphaudit-pool-close", daemon=True)
    closer.start()
    closer.join(wait)
    if not closer.is_alive():
        return 0
    stuck = [p for p in procs if p.is_alive()]
    for proc in stuck:
        with contextlib.suppress(Exception):
            proc.terminate()
    closer.join()
    return len(stuck)


#: ``prctl``'s option that sends the calling process a signal when its parent ends (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """In a worker process (Linux): be sent SIGTERM when the process that started it ends, even killed (SIGKILL, the
    OOM killer), so no worker outlives the run holding its memory (``prctl(PR_SET_PDEATHSIG)``, prctl(2)); exits at
    once when ``parent`` is already gone. Elsewhere nothing is done."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before the setting took effect
        os._exit(1)
