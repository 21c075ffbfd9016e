"""Merge the accumulators of sample shards: the numeric comparison's per-transition results and the eval hook's
per-sample sums, so that a sharded run reports what one process would.

Every figure the comparison reports is a function of sums over samples (:class:`~graphaudit.numeric.metrics.ErrorStats`:
float64 sums of a^2, b^2, a*b, err^2 and |err|/scale, element and sample counts, maxima) and of top-1 agreement
counts (integers). Shards hold contiguous sample ranges and are merged in range order, so every count, maximum and
the first sample's figures are exactly the single-process ones; the float64 sums add the same per-sample terms with
a different association (shard sums added last instead of sample by sample), which moves a sum of n float64 terms by
at most about ``n * 2**-53`` of the sum of their magnitudes (Higham, "Accuracy and Stability of Numerical Algorithms",
2nd ed., section 4.2). For the non-negative sums (energies) that is a relative difference below 1e-12 for fewer
than 10,000 added terms (chunks of 32,768 elements per sample and tensor); derived figures (cosine, SQNR, relative
L2) differ by the same order. The first divergence is found after the merge, from the merged figures.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..classify import Change
from .compare import TransitionNumeric
from .divergence import set_divergence
from .metrics import ErrorStats

__all__ = ["merge_stats", "merge_transitions", "change_key", "MeanAccumulator"]


def merge_stats(a: ErrorStats, b: ErrorStats) -> ErrorStats:
    """``a`` then ``b`` (a's samples come first) as one accumulator: :meth:`ErrorStats.merge`, with a NaN maximum
    kept as the single-process run keeps it (once a sample's error is NaN its ``max_abs`` stays NaN) and the shape
    mismatch the last sample reported (as ``update`` overwrites it)."""
    out = a.merge(b)
    if math.isnan(a.max_abs) or math.isnan(b.max_abs):
        out.max_abs = math.nan
    out.shape_mismatch = b.shape_mismatch or a.shape_mismatch
    return out


def change_key(c: Change) -> tuple:
    """What identifies a change across processes (each process classifies the same stages the same way):
    kind, pattern and node ids of both stages."""
    return (c.kind, c.pattern, tuple(c.a_nodes), tuple(c.b_nodes))


def _merge_tensors(into: list, other: list, what: str) -> None:
    if [(t.a_tensor, t.b_tensor) for t in into] != [(t.a_tensor, t.b_tensor) for t in other]:
        raise ValueError(f"shards compared different tensor pairs ({what}): not the same stages or options")
    for t, o in zip(into, other):
        t.stats = merge_stats(t.stats, o.stats)
        t.top1 = [t.top1[0] + o.top1[0], t.top1[1] + o.top1[1]]


def merge_transitions(shards: list[list[TransitionNumeric]], changes: list[list[Change]] | None = None
                      ) -> list[TransitionNumeric]:
    """The results of sample shards (in sample order) merged into the results of all samples.

    Parameters
    ----------
    shards : list of list of TransitionNumeric
        Per shard, what :func:`graphaudit.numeric.compare.compare_stages` returned for its samples (consumed: the
        first shard's objects carry the merged figures).
    changes : list of list of Change, optional
        The caller's changes per transition: each region's ``change`` is replaced by the caller's object of the
        same :func:`change_key` (so that identity lookups in the caller work), and regions are put in the order of
        that list (the plan's order). Without it, the first shard's objects and first-seen order are kept.

    Returns
    -------
    list of TransitionNumeric
        Per-tensor and per-region figures merged (:func:`merge_stats`), top-1 counts added, ``first_divergence``
        found again on the merged figures, ``left_out`` joined in shard order. ``skipped_regions`` is the largest of the shards' counts: a region
        whose session cannot be built fails in every shard alike; one that fails on some samples only is counted
        once, like the single-process run counts it (its samples before the failure are kept in both).

    Raises
    ------
    ValueError
        No shards, or shards of different transitions or tensor pairs.
    """
    if not shards:
        raise ValueError("no shard results to merge")
    base = shards[0]
    for other in shards[1:]:
        if [(r.a, r.b) for r in other] != [(r.a, r.b) for r in base]:
            raise ValueError("shards compared different stage pairs: not the same stages")
    for i, res in enumerate(base):
        regions: dict[tuple, object] = {}
        for shard in shards:
            for r in shard[i].regions:
                k = change_key(r.change)
                regions[k] = r if k not in regions else replace(regions[k], stats=merge_stats(regions[k].stats,
                                                                                               r.stats))
        for other in shards[1:]:
            _merge_tensors(res.tensors, other[i].tensors, f"{res.a} -> {res.b}")
            _merge_tensors(res.vs_reference, other[i].vs_reference, f"{res.a} -> {res.b} against the reference")
        res.skipped_regions = max(s[i].skipped_regions for s in shards)
        res.left_out = [x for s in shards for x in s[i].left_out]  # in sample order, as one process lists them
        res.regions = _ordered(list(regions.values()), changes[i] if changes is not None and i < len(changes)
                               else None)
        set_divergence(res)
    return base


def _ordered(regions: list, changes: list[Change] | None) -> list:
    """Regions in the order of ``changes`` with the caller's Change objects (unknown ones last, as found)."""
    if changes is None:
        return regions
    mine = {change_key(c): (j, c) for j, c in enumerate(changes)}
    out = []
    for r in regions:
        j, c = mine.get(change_key(r.change), (len(changes), r.change))
        out.append((j, replace(r, change=c)))
    return [r for _j, r in sorted(out, key=lambda x: x[0])]


class MeanAccumulator:
    """Per-sample values of an eval hook, kept as float64 sums and a count per value name, mergeable across shards.

    A hook that returns one value per sample (``per_sample = True``) is reported as the mean over samples of each
    value: ``sum / count``. Sums of shards add as the samples would (same tolerance as the comparison's sums).

    Attributes
    ----------
    sums : dict of str to float
    counts : dict of str to int
        Samples that returned each name.
    """

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, values: dict[str, float]) -> None:
        """One sample's values (name -> float)."""
        for k, v in values.items():
            self.sums[k] = self.sums.get(k, 0.0) + float(v)
            self.counts[k] = self.counts.get(k, 0) + 1

    def merge(self, other: "MeanAccumulator") -> "MeanAccumulator":
        """This accumulator then ``other`` (a new object)."""
        out = MeanAccumulator()
        for src in (self, other):
            for k, v in src.sums.items():
                out.sums[k] = out.sums.get(k, 0.0) + v
                out.counts[k] = out.counts.get(k, 0) + src.counts[k]
        return out

    def means(self) -> dict[str, float]:
        """Name -> mean over the samples that returned it, in first-seen order."""
        return {k: self.sums[k] / self.counts[k] for k in self.sums}
