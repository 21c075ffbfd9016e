"""Group testing over splice units: a small set of changes whose reversion recovers a share of a transition's drop.

The oracle is ``recovery(units) -> float``: the share of the drop between stage a and stage b that the hybrid with
those units reverted wins back (0 for b itself, 1 for a's numbers; :mod:`graphaudit.numeric.hybrid`). The search is
adaptive group testing in the spirit of delta debugging (Zeller and Hildebrandt, "Simplifying and Isolating
Failure-Inducing Input", IEEE TSE 28(2), 2002): the units are ordered by their isolated error (worst first); a binary
search finds the shortest prefix of that order that reaches the target share; then chunks of the prefix, halving in
size, are dropped while the rest still reaches it. Every oracle call is one hybrid evaluation and counts against a
budget stated up front: at most ``ceil(log2(n)) + 1`` for the search and the rest of the budget for the pruning.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["BisectStep", "BisectResult", "default_budget", "group_test", "order_units"]


@dataclass(frozen=True)
class BisectStep:
    """One hybrid evaluation.

    Attributes
    ----------
    units : tuple of int
        The units reverted (indices into the ordered list the search was given).
    recovered : float
        Share of the drop won back, in [0, 1] for a metric between b's and a's (may leave it: a hybrid can be worse
        than b, or better than a).
    phase : str
        ``"ends"`` (none and all), ``"prefix"`` (binary search) or ``"prune"``.
    kept : bool
        Whether the search went on from this set (it reached the target).
    """

    units: tuple[int, ...]
    recovered: float
    phase: str
    kept: bool


@dataclass
class BisectResult:
    """The outcome of :func:`group_test`.

    Attributes
    ----------
    units : tuple of int
        The final set (indices into the ordered units), in the order given.
    recovered : float
        Its share of the drop recovered (measured, not estimated).
    target : float
        The share asked for.
    budget : int
        Hybrid evaluations allowed; ``len(steps)`` were used.
    steps : list of BisectStep
    reached : bool
        Whether ``recovered >= target``; False when even every unit together does not reach it (then ``units`` is
        every unit) or the budget ran out during the search.
    """

    units: tuple[int, ...]
    recovered: float
    target: float
    budget: int
    steps: list[BisectStep] = field(default_factory=list)
    reached: bool = False


def default_budget(n: int) -> int:
    """Hybrid evaluations allowed for ``n`` units: one for all of them, ``ceil(log2(n)) + 1`` for the prefix search
    and 12 for the pruning (enough to halve a prefix of up to 8 units down to one)."""
    return 1 + (math.ceil(math.log2(n)) + 1 if n > 1 else 1) + 12


def group_test(n: int, recovery: Callable[[tuple[int, ...]], float], target: float = 0.8,
               budget: int | None = None, progress: Callable[[BisectStep], None] | None = None) -> BisectResult:
    """Find a small set of units whose reversion recovers at least ``target`` of the drop.

    Parameters
    ----------
    n : int
        Number of units, already ordered worst isolated error first (unit ``0`` is the most suspect).
    recovery : callable
        ``recovery(units) -> float``: the measured share of the drop recovered with those units reverted; NaN
        counts as not reaching the target.
    target : float
        Share to reach, in (0, 1]; 0.8 by default (the issue's "80% of the drop").
    budget : int, optional
        Most oracle calls; :func:`default_budget` by default. At least 2.
    progress : callable, optional
        Called with each :class:`BisectStep` as it is measured.

    Returns
    -------
    BisectResult

    Raises
    ------
    ValueError
        ``n < 1``, ``target`` outside (0, 1], or ``budget < 2``.
    """
    if n < 1:
        raise ValueError("bisection needs at least one unit to revert")
    if not 0 < target <= 1:
        raise ValueError(f"target share {target} outside (0, 1]")
    budget = default_budget(n) if budget is None else budget
    if budget < 2:
        raise ValueError(f"budget {budget}: at least 2 hybrid evaluations")
    steps: list[BisectStep] = []
    seen: dict[tuple[int, ...], float] = {}

    def measure(units: tuple[int, ...], phase: str) -> float:
        if units in seen:  # measured before (a prefix the pruning meets again): no new evaluation
            return seen[units]
        r = seen[units] = float(recovery(units))
        step = BisectStep(units, r, phase, r >= target)
        steps.append(step)
        if progress is not None:
            progress(step)
        return r

    every = tuple(range(n))
    r_all = measure(every, "ends")
    if not r_all >= target:  # NaN (a hybrid whose metric or outputs are not numbers) does not reach it either
        return BisectResult(every, r_all, target, budget, steps, False)
    lo, hi, best = 0, n, r_all  # prefix lo does not reach the target (the empty set recovers 0), prefix hi does
    while hi - lo > 1 and len(steps) < budget:
        mid = (lo + hi) // 2
        r = measure(every[:mid], "prefix")
        if r >= target:
            hi, best = mid, r
        else:
            lo = mid
    chosen = list(every[:hi])
    if hi - lo > 1:  # the budget ran out during the search
        return BisectResult(tuple(chosen), best, target, budget, steps, True)
    size = max(1, len(chosen) // 2)
    while len(chosen) > 1 and len(steps) < budget:
        changed = False
        k = len(chosen) - size
        while k >= 0 and len(chosen) > 1 and len(steps) < budget:  # least suspect chunk first
            trial = tuple(chosen[:k] + chosen[k + size:])
            if trial:
                r = measure(trial, "prune")
                if r >= target:
                    chosen, best, changed = list(trial), r, True
            k -= size
        if size == 1 and not changed:
            break
        size = max(1, size // 2)
    return BisectResult(tuple(chosen), best, target, budget, steps, True)


def order_units(isolated_db: Sequence[float | None]) -> list[int]:
    """Unit indices ordered by isolated SQNR in dB, lowest (worst) first; units without a measurement last, in
    their given order."""
    measured = sorted((db, k) for k, db in enumerate(isolated_db) if db is not None)
    return [k for _db, k in measured] + [k for k, db in enumerate(isolated_db) if db is None]
