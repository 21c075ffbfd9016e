"""Progress of the long phase (the numeric run), on stderr: a rich bar on a terminal, a heartbeat line otherwise.

The factory is :attr:`graphaudit.measure.NumericOptions.progress`: called with the number of samples, it returns the
per-sample callback (called with the 0-based index of the sample just done).
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from rich.console import Console

__all__ = ["progress_factory", "heartbeat", "HEARTBEAT_SECONDS"]

#: Seconds between two heartbeat lines when stderr is not a terminal.
HEARTBEAT_SECONDS = 10.0


def progress_factory() -> Callable[[int], Callable[[int], None]]:
    """A rich progress bar per run when stderr is a terminal, else :func:`heartbeat` lines on stderr."""
    if not Console(stderr=True).is_terminal:
        return heartbeat
    return _bar


def _bar(total: int) -> Callable[[int], None]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(TextColumn("samples"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)
    task = prog.add_task("run", total=total)
    prog.start()

    def tick(i: int) -> None:
        prog.update(task, completed=i + 1)
        if i + 1 >= total:
            prog.stop()

    return tick


def heartbeat(total: int, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
              every: float = HEARTBEAT_SECONDS) -> Callable[[int], None]:
    """A callback printing ``comparing stages: sample k/total`` to ``stream`` (default stderr) at most once per
    ``every`` seconds, and once when the last sample is done (a log or CI job sees the run is alive)."""
    last = clock()

    def tick(i: int) -> None:
        nonlocal last
        now = clock()
        if i + 1 >= total or now - last >= every:
            last = now
            out = stream if stream is not None else sys.stderr
            print(f"comparing stages: sample {i + 1}/{total}" + (" done" if i + 1 >= total else ""), file=out,
                  flush=True)

    return tick
