"""hold_freed_memory: freed blocks stay in this process for the next sample (glibc), instead of being returned to the
system and touched fresh again. Measured on the process's own resident set (/proc/self/statm), in a child process
(the setting is process-wide)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: The start of a child script: numpy and ``rss()``, this process's resident bytes (/proc/self/statm).
RSS_PRELUDE = r"""
import os, sys
import numpy as np
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
"""

_CHILD = RSS_PRELUDE + r"""
if sys.argv[1] == "hold":
    from graphaudit.numeric.backends import hold_freed_memory
    assert hold_freed_memory() is True
a = np.ones(5 << 20, np.float32)  # 20 MiB, touched
held = rss()
del a
print(held - rss())
"""


def child_numbers(code: str, *args: str, timeout: float = 60) -> list[int]:
    """The numbers a child process running ``code`` with ``args`` prints (the settings are process-wide)."""
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=timeout)
    assert p.returncode == 0, p.stderr[-2000:]
    return [int(x) for x in p.stdout.split()]


def _child(code: str, mode: str) -> int:
    return child_numbers(code, mode)[0]


def _released(mode: str) -> int:
    return _child(_CHILD, mode)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc (Linux)")
def test_a_freed_block_stays_resident_for_reuse():
    mib = 1 << 20
    assert _released("default") >= 19 * mib  # glibc's default: a 20 MiB block is mmapped and unmapped when freed
    assert _released("hold") < mib  # held: it stays in the heap for the next allocation


_THREADS = RSS_PRELUDE + r"""
import threading
from graphaudit.numeric.backends import hold_freed_memory, one_malloc_arena
assert hold_freed_memory() is True  # freed blocks stay in their arena
if sys.argv[1] == "one":
    assert one_malloc_arena() is True
freed, done = threading.Event(), threading.Event()
def first():  # allocates, touches and frees 20 MiB, then stays alive (its arena stays its own)
    a = np.ones(5 << 20, np.float32)
    del a
    freed.set()
    done.wait()
t = threading.Thread(target=first)
t.start()
freed.wait()
before = rss()
out = []
second = threading.Thread(target=lambda: out.append(np.ones(5 << 20, np.float32).sum()))
second.start()
second.join()
done.set()
t.join()
print(rss() - before)
"""


def _grown(mode: str) -> int:
    return _child(_THREADS, mode)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc (Linux)")
def test_one_arena_reuses_what_another_thread_freed():
    """A 20 MiB block freed by one live thread: a second thread's 20 MiB comes from new memory when each thread has
    its own arena (glibc's default), and reuses the freed block when all threads share one."""
    mib = 1 << 20
    assert _grown("default") >= 19 * mib
    assert _grown("one") < 2 * mib
