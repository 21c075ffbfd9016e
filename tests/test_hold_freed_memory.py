"""hold_freed_memory: freed blocks stay in this process for the next sample (glibc), instead of being returned to the
system and touched fresh again. Measured on the process's own resident set (/proc/self/statm), in a child process
(the setting is process-wide)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_CHILD = r"""
import os, sys
import numpy as np
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
if sys.argv[1] == "hold":
    from graphaudit.numeric.backends import hold_freed_memory
    assert hold_freed_memory() is True
a = np.ones(5 << 20, np.float32)  # 20 MiB, touched
held = rss()
del a
print(held - rss())
"""


def _released(mode: str) -> int:
    p = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert p.returncode == 0, p.stderr
    return int(p.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc (Linux)")
def test_a_freed_block_stays_resident_for_reuse():
    mib = 1 << 20
    assert _released("default") >= 19 * mib  # glibc's default: a 20 MiB block is mmapped and unmapped when freed
    assert _released("hold") < mib  # held: it stays in the heap for the next allocation
