"""The sample loop's threads: tensor pairs reduced on several threads give the sums of one thread, bit for bit;
stages run side by side return in order and raise the first stage's error."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from graphaudit.numeric import schedule
from graphaudit.numeric.metrics import ErrorStats


def test_threaded_reduction_equals_one_thread(monkeypatch):
    rng = np.random.default_rng(5)
    pairs = [(rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32))
             for n in (4_000_000, 1_000_003, 3_500_000, 40_000, 7)]
    nbytes = sum(b.nbytes for _a, b in pairs)
    assert nbytes >= schedule.PARALLEL_MIN_BYTES  # the threaded path is the one under test
    monkeypatch.setattr(schedule, "_workers", lambda: 3)
    seen: set[str] = set()
    # the two largest pairs go to two different threads' shares (largest first, to the least loaded thread): each
    # waits until the other is running, so the test fails (BrokenBarrierError) when the shares run one after the
    # other, and does not depend on how fast the pool's threads wake up on a loaded machine
    both = threading.Barrier(2, timeout=30)

    def one(k: int, stats: list[ErrorStats]) -> None:
        seen.add(threading.current_thread().name)
        if k in (0, 2):
            both.wait()
        stats[k].update(*pairs[k], scale=0.01)

    threaded = [ErrorStats() for _ in pairs]
    schedule.for_each(lambda k: one(k, threaded), list(range(len(pairs))), [b.nbytes for _a, b in pairs])
    alone = [ErrorStats() for _ in pairs]
    for k in range(len(pairs)):
        alone[k].update(*pairs[k], scale=0.01)
    assert len(seen) >= 2 and threading.current_thread().name not in seen
    assert threaded == alone  # every field, exactly


def test_threaded_reduction_raises_the_error():
    def boom(x: int) -> None:
        if x == 2:
            raise ValueError("pair 2")

    with pytest.raises(ValueError, match="pair 2"):
        schedule.for_each(boom, [0, 1, 2, 3], [schedule.PARALLEL_MIN_BYTES] * 4)


def test_stages_side_by_side_in_order_first_error_wins():
    barrier = threading.Barrier(2, timeout=10)

    def stage(k: int):
        barrier.wait()  # both calls must be running at once, or this times out
        return k

    assert schedule.run_all([lambda: stage(0), lambda: stage(1)], concurrent=True) == [0, 1]

    def fail(k: int):
        raise RuntimeError(f"stage {k}")

    with pytest.raises(RuntimeError, match="stage 0"):
        schedule.run_all([lambda: fail(0), lambda: fail(1)], concurrent=True)
    assert schedule.run_all([lambda: 1, lambda: 2], concurrent=False) == [1, 2]
