"""malloc_scope: the glibc settings the numeric step's arena-less sessions apply (freed blocks kept in the heap, one
malloc arena) last only as long as the library call that made them; a caller's process gets glibc's behaviour back.

Observed on the process's own resident set (/proc/self/statm), in child processes (the settings are process-wide):
after the call, a 16 MiB block is freed. With glibc's mmap threshold at its starting value (128 KiB, malloc.c's
DEFAULT_MMAP_THRESHOLD_MIN) such a block is mmapped and unmapped when freed, so the resident set drops by 16 MiB;
while the numeric step's setting holds (32 MiB) it comes from the heap and stays resident (trim threshold 2 GiB).
The real call is ``audit`` on the bundled PP-OCR cls pair with 2 samples and isolated measurement (its region batches
run in onnxruntime sessions without a memory arena, the sessions that apply the settings)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from graphaudit.numeric.backends import malloc_settings_at_start

from .test_hold_freed_memory import RSS_PRELUDE, child_numbers

_CHILD = RSS_PRELUDE + r"""
from graphaudit import NumericOptions, audit
from graphaudit.numeric import backends
def released():
    a = np.ones(4 << 20, np.float32)  # 16 MiB, touched
    held = rss()
    del a
    return held - rss()
samples, mode = sys.argv[1], sys.argv[2]
d = os.path.join(samples, "ort", "ppocr_cls")
stages = [os.path.join(d, f"ppocr_cls_{s}.onnx") for s in ("optimized", "qdq")]
run = lambda: audit(stages, data=os.path.join(samples, "data", "ppocr_cls", "x"),
                    numeric=NumericOptions(max_samples=2))
if mode == "keep":
    backends.keep_malloc_settings()
if mode == "nested":
    with backends.malloc_scope():
        au = run()
        assert au.report.numeric and au.report.numeric[0].regions, "no isolated regions: no arena-less sessions"
        del au
        inside = released()
    print(inside, released())
else:
    au = run()
    assert au.report.numeric and au.report.numeric[0].regions, "no isolated regions: no arena-less sessions"
    del au
    print(released(), 0)
"""


def _child(samples: Path, mode: str) -> list[int]:
    return child_numbers(_CHILD, str(samples), mode, timeout=300)


MIB = 1 << 20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc (Linux)")
def test_an_audit_gives_the_caller_its_malloc_settings_back(samples):
    after, _ = _child(samples, "restore")
    assert after >= 15 * MIB  # mmapped and unmapped: the starting threshold is back


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc (Linux)")
def test_kept_settings_hold_the_freed_block(samples):
    """What the ``graphaudit`` command does (it exits after its job): the settings the audit applied stay."""
    after, _ = _child(samples, "keep")
    assert after < MIB


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc (Linux)")
def test_the_outermost_scope_restores(samples):
    inside, after = _child(samples, "nested")
    assert inside < MIB  # the audit inside an outer scope left the settings to it
    assert after >= 15 * MIB


def test_settings_at_start_read_the_environment():
    assert malloc_settings_at_start({}) == {"arena_max": 0, "mmap_threshold": 128 << 10, "trim_threshold": 128 << 10}
    env = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536:glibc.other=1",
           "MALLOC_ARENA_MAX": "4", "MALLOC_TRIM_THRESHOLD_": "1048576"}
    # the tunable wins over the legacy variable; a setting only the legacy variable names is read from it
    assert malloc_settings_at_start(env) == {"arena_max": 2, "mmap_threshold": 65536, "trim_threshold": 1048576}
    assert malloc_settings_at_start({"MALLOC_ARENA_MAX": "two"})["arena_max"] == 0  # not a number: glibc's default
