"""SIGTERM and SIGHUP stop the ``graphaudit`` command as Ctrl-C does.

``timeout``, CI cancellations, systemd and a closed terminal stop a process with SIGTERM or SIGHUP, whose default
action ends the process at once: its local worker processes (which block SIGINT, not SIGTERM) were left running,
re-parented to PID 1 and holding their memory (2 GB each on PP-OCRv4 det). :func:`install` makes each signal raise
:class:`Stopped` (a ``KeyboardInterrupt``) in the main thread, so the clean-up that follows a Ctrl-C runs
(:class:`graphaudit.scaleout.WorkerPool` stops its workers, Ray's tasks are cancelled), and the command exits with
``128 + the signal's number`` (143, 129) and one line. A second such signal during the clean-up ends the process at
once (the default action, restored by the first).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

__all__ = ["Stopped", "install", "settle", "deferred", "STOP_SIGNALS", "RECEIVED", "exit_line"]

#: The signals handled: SIGTERM (timeout, kill, CI, systemd) and SIGHUP (the terminal closed).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


#: The stop signals received in this process, in order (a library may catch :class:`Stopped` and raise its own
#: KeyboardInterrupt instead: Ray's ``ray.get`` does; :func:`exit_line` still names the signal).
RECEIVED: list[int] = []


class Stopped(KeyboardInterrupt):
    """A stop signal arrived (``signum``): the run stops as on Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        RECEIVED.append(signum)


def _stop(signum, _frame) -> None:
    for s in STOP_SIGNALS:  # a second signal ends the process (default action) instead of interrupting the clean-up
        signal.signal(s, signal.SIG_DFL)
    raise Stopped(signum)


def install() -> None:
    """Have SIGTERM and SIGHUP raise :class:`Stopped` in this process's main thread (nothing done elsewhere, or for
    a signal the process was started with ignored, as ``nohup`` does for SIGHUP)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in STOP_SIGNALS:
        if signal.getsignal(s) is signal.SIG_DFL:
            signal.signal(s, _stop)


def settle() -> None:
    """The default action back for :data:`STOP_SIGNALS` (main thread only): the run is over, the process is exiting,
    and a stop signal now must end it without a traceback."""
    if threading.current_thread() is threading.main_thread():
        for s in STOP_SIGNALS:
            if signal.getsignal(s) is _stop:
                signal.signal(s, signal.SIG_DFL)


@contextmanager
def deferred():
    """Within: a stop signal is only recorded, and :class:`Stopped` is raised for it when the block ends (a start
    that must not be cut in the middle, such as Ray's: interrupted, its agents outlived the run). Yields whether it
    defers (main thread, :func:`install`'s handlers in place); elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread() or \
            not any(signal.getsignal(s) is _stop for s in STOP_SIGNALS):
        yield False
        return
    got: list[int] = []
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}  # SIGHUP stays ignored under nohup
    for s, h in before.items():
        if h is _stop:
            signal.signal(s, lambda signum, _frame: got.append(signum))
    try:
        yield True
    finally:
        for s, h in before.items():  # at the C level too, whatever the block installed
            signal.signal(s, h)
    if got:
        raise Stopped(got[0])


def exit_line(e: KeyboardInterrupt) -> tuple[str, int]:
    """The one line and exit status of a run stopped by ``e``: Ctrl-C ("interrupted", 130) or a stop signal
    ("stopped by SIGTERM", 128 + its number)."""
    signum = e.signum if isinstance(e, Stopped) else (RECEIVED[0] if RECEIVED else None)
    if signum is not None:
        return f"stopped by {signal.Signals(signum).name}", 128 + signum
    return "interrupted", 130
