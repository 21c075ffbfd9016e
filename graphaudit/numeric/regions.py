"""Isolated error of each change: b's nodes of the change extracted once (all of a transition in one session), fed
with a's values."""

from __future__ import annotations

import numpy as np

from ..classify import Change
from ..lineage import Alignment
from ..stage import StageGraph
from .backends import make_session
from .batch import ModelIndex, RegionBatch
from .fixedpoint import dequantized_reference, fixed_point_codec
from .layout import as_layout_of
from .metrics import ErrorStats
from .reduction import Updates
from .runner import StageRunner

__all__ = ["COMPARABLE_KINDS", "RegionRunner", "region_io"]

#: Tensor-map kinds whose a and b tensors hold the same quantity (compared by value).
COMPARABLE_KINDS = {"exact", "quantized", "absorbed", "converted"}


def region_io(al: Alignment, c: Change) -> tuple[list[tuple[str, str]], list[tuple[str, str]]] | None:
    """(b input <- a tensor) and (a tensor -> b output) boundary pairs of a change, or None if not closed."""
    b, vb = al.b, al.view_b
    inside = set(c.b_nodes)
    ins: list[tuple[str, str]] = []
    outs: list[tuple[str, str]] = []
    for nid in c.b_nodes:
        n = b.nodes[nid]
        for x in n.inputs:
            if not x or b.tensors[x].is_param or vb.is_param_root(x):
                continue
            p = b.tensors[x].producer
            if p is not None and p in inside:
                continue
            tm = al.tensor_map.get(x)
            if tm is None or tm.kind not in COMPARABLE_KINDS | {"preprocessed"}:
                return None
            if (x, tm.a) not in ins:
                ins.append((x, tm.a))
        for x in n.outputs:
            if not x:
                continue
            tm = al.tensor_map.get(x)
            consumers_out = any(cid not in inside for cid, _k in b.tensors[x].consumers) or b.tensors[x].is_graph_output
            if tm is not None and tm.kind in COMPARABLE_KINDS and consumers_out:
                outs.append((tm.a, x))
    return (ins, outs) if outs else None


def _in_b_layout(v: np.ndarray, shape) -> np.ndarray | None:
    """a's float value ``v`` in the layout of b's tensor of static ``shape``: transposed NCHW -> NHWC where b holds it
    NHWC (the fixed-point stage's HzDequantize outputs before hb_mapper's NHWC -> NCHW Transpose), unchanged where
    the shapes agree or b's is not static; None when both are static and differ otherwise (not b's value)."""
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape) or tuple(shape) == v.shape:
        return v
    if v.ndim == 4 and tuple(v.shape[i] for i in (0, 2, 3, 1)) == tuple(shape):
        return np.ascontiguousarray(v.transpose(0, 2, 3, 1))
    return v if v.size == int(np.prod(shape)) and v.ndim != len(shape) else None


#: Largest input of one batch of regions (bytes of one sample's feeds, which is about the size of the regions'
#: outputs that the batch's run holds until it ends): a transition's regions are split into batches of at most
#: this, so a detector's 170 regions do not hold every region output of a sample at once.
BATCH_MAX_BYTES = 64 << 20


def _groups(feeds: dict[int, dict[str, np.ndarray]], limit: int) -> list[list[int]]:
    """Region indices in order, cut into consecutive groups whose feeds take at most ``limit`` bytes (a region
    larger than ``limit`` alone)."""
    groups: list[list[int]] = [[]]
    size = 0
    for j in sorted(feeds):
        n = sum(v.nbytes for v in feeds[j].values())
        if groups[-1] and size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(j)
        size += n
    return groups


class RegionRunner:
    """Isolated error of each change: b's nodes of the change fed with a's values at the change's inputs (encoded as
    the fixed-point stage's integers where b holds integers).

    In stock onnxruntime every region of a transition is extracted once from b's model and they run together in
    a few sessions (:class:`graphaudit.numeric.batch.RegionBatch`: disconnected subgraphs of one model whose
    tensors are renamed per region; a new batch every :data:`BATCH_MAX_BYTES` of inputs), one run per batch and
    sample instead of one session and run per region. A region that cannot join the batch (a Loop, a subgraph
    attribute, a cut that is not closed) runs alone as before; when the batch cannot load or fails on a sample,
    every region of the transition runs alone from then on. Horizon's runtime runs the batches too (its sessions
    with the toolchain's own options: no parallel executor there), with the same figures as each region alone (the
    real PP-OCRv4 det set's 452 regions, reports equal to the bit) and 0.4 GB less peak RSS there.

    Parameters
    ----------
    runners : list of StageRunner
        One per stage (``runners[i + 1].model`` is what regions of transition ``i`` are extracted from).
    regions : list of list of (Change, list, list)
        Per transition, the changes to measure with their :func:`region_io` boundary pairs.
    runtime : {"onnxruntime", "horizon"}
        Which runtime runs the extracted regions.
    """

    def __init__(self, runners: list[StageRunner], regions: list[list[tuple[Change, list, list]]], runtime: str):
        self.runners, self.regions, self.runtime = runners, regions, runtime
        self.sessions: list[dict[int, object]] = [dict() for _ in regions]
        self.batches: list[list[RegionBatch] | None | bool] = [None for _ in regions]
        self._index: dict[int, ModelIndex] = {}

    def failed(self, i: int) -> int:
        """Number of regions of transition ``i`` that could not run on their own (or had no reference)."""
        return sum(1 for v in self.sessions[i].values() if v is False)

    def _feeds(self, i: int, ins: list, va: dict, memo: dict | None = None) -> dict | None:
        """Region inputs ``ins`` (pairs of b's and a's tensor names) fed with a's values ``va`` as b holds them, or
        None when one cannot be. ``memo``: the feeds already made for this sample and transition, by pair (a tensor
        that several regions read, at the same b tensor, is encoded once)."""
        feeds = {}
        for b_in, a_in in ins:
            if a_in not in va:
                return None
            if memo is not None:
                v = memo.get((b_in, a_in), memo)
                if v is memo:
                    v = memo[(b_in, a_in)] = self._feed(i, b_in, a_in, va)
            else:
                v = self._feed(i, b_in, a_in, va)
            if v is None:
                return None
            feeds[b_in] = v
        return feeds

    def _feed(self, i: int, b_in: str, a_in: str, va: dict) -> np.ndarray | None:
        """a's value of ``a_in`` as b's region input ``b_in`` takes it (encoded, cast or transposed), or None."""
        b = self.runners[i + 1].stage
        a = self.runners[i].stage
        v = va[a_in]
        bt = b.tensors.get(b_in)
        if bt is not None and bt.dtype in ("INT8", "INT16") and v.dtype.kind == "f":
            codec = fixed_point_codec(a, a_in, b, b_in)
            if codec is None or codec.dtype != bt.dtype:
                return None
            v = codec.encode(va.get(codec.a_value, v), bt.shape if bt.shape and all(
                isinstance(d, int) and d > 0 for d in bt.shape) else None,
                np.int16 if bt.dtype == "INT16" else np.int8)
        elif v.dtype == np.float64:
            v = v.astype(np.float32)
        if v.dtype.kind == "f" and bt is not None:
            v = _in_b_layout(v, bt.shape)
        return v

    def _model_index(self, i: int) -> ModelIndex:
        if i not in self._index:
            self._index[i] = ModelIndex(self.runners[i + 1].model)
        return self._index[i]

    def _session(self, i: int, j: int, feeds: dict, outs: list):
        sess = self.sessions[i].get(j)
        if sess is None:
            sub = self._model_index(i).extract(feeds, [b for _a, b in outs])
            try:
                # a region holding a Loop could run for ever (its trip count is data): not measured alone
                loop = sub is not None and any(n.op_type == "Loop" for n in sub.graph.node)
                sess = False if sub is None or loop else make_session(sub.SerializeToString(), self.runtime, threads=1)
            except Exception:  # noqa: BLE001 - a region that cannot run alone is skipped, counted in failed()
                sess = False
            self.sessions[i][j] = sess
        return sess

    def _batches(self, i: int, feeds: dict[int, dict]) -> list[RegionBatch]:
        """The batches of transition ``i`` to run for this sample (built on the first sample): those whose regions
        all have feeds."""
        if self.batches[i] is None:
            outs = {j: [b for _a, b in self.regions[i][j][2]] for j in feeds}
            built = [RegionBatch.build(self._model_index(i), {j: feeds[j] for j in group}, outs, self.runtime)
                     for group in _groups(feeds, BATCH_MAX_BYTES)]
            self.batches[i] = [b for b in built if b is not None] or False
        return [b for b in self.batches[i] or () if all(j in feeds for j in b.members)]

    def _run_batch(self, i: int, batch: RegionBatch, feeds: dict[int, dict]) -> dict[int, list] | None:
        """Outputs of the batch's regions by region index; None when its run fails (the batch is then dropped for
        good: its regions run alone)."""
        try:
            return batch.run(feeds)
        except Exception:  # noqa: BLE001 - one region's a values do not fit b's region: its batch runs alone
            self.batches[i].remove(batch)
            return None

    def _same_weight(self, i: int, c: Change, ref) -> bool:
        """Whether the float weight that b's change quantizes is a's weight. hb_mapper's activation equalization
        (PP-OCRv4 det) rescales some weights between optimized and calibrated: measured against a's unscaled
        weight, their quantization would read as a loss of 0.5-6.6 dB that Horizon's runtime does not see."""
        b = self.runners[i + 1].stage
        for nid in c.b_nodes:
            n = b.nodes[nid]
            w = b.tensors.get(n.inputs[0]) if n.inputs else None
            if w is not None and w.is_param:
                v = w.value()
                if v is None or ref is None or np.shape(v) != np.shape(ref):
                    return False
                return bool(np.allclose(np.asarray(v, np.float64), np.asarray(ref, np.float64), rtol=1e-6, atol=0))
        return True

    def measure(self, i: int, stats: list[ErrorStats], va: dict, a_stage: StageGraph) -> None:
        """Add one sample to the isolated error of each region of transition ``i``. The updates of each batch's
        regions are applied before the next batch runs, so one batch's outputs are held at a time, not every
        region output of the transition (on the bundled PP-OCRv4 det pipeline, about the size of the b stage's
        captured tensors again).

        Parameters
        ----------
        i : int
            The transition (stages ``i`` -> ``i + 1``).
        stats : list of ErrorStats
            One per region of the transition, in the plan's order; updated in place.
        va : dict of str to ndarray
            The values stage ``i`` computed for this sample (its captured tensors).
        a_stage : StageGraph
            Stage ``i``.
        """
        updates = Updates()
        memo: dict = {}
        feeds = {j: f for j, (_c, ins, _o) in enumerate(self.regions[i])
                 if (f := self._feeds(i, ins, va, memo)) is not None}
        done: set[int] = set()
        for batch in self._batches(i, feeds) if feeds else ():
            got = self._run_batch(i, batch, feeds)
            if got is None:
                continue
            for j, outs_j in got.items():
                if self.sessions[i].get(j) is not False:
                    c, _ins, outs = self.regions[i][j]
                    self._add(i, j, c, outs, outs_j, stats[j], va, a_stage, updates)
            done.update(got)
            got = outs_j = None  # noqa: F841 - the batch's outputs are freed by the apply, before the next batch
            updates.apply()
        for j, (c, _ins, outs) in enumerate(self.regions[i]):
            if j in done or j not in feeds or self.sessions[i].get(j) is False:
                continue
            sess = self._session(i, j, feeds[j], outs)
            if sess is False:
                continue
            try:
                got = sess.run([b for _a, b in outs], feeds[j])
            except Exception:  # noqa: BLE001 - a's tensors that do not fit b's region (a misaligned pipeline:
                # stages of two models, a --source that is not the float model): skipped like one that cannot load
                self.sessions[i][j] = False
                continue
            self._add(i, j, c, outs, got, stats[j], va, a_stage, updates)
        updates.apply()

    def _add(self, i: int, j: int, c: Change, outs: list, got: list, stats: ErrorStats, va: dict,
             a_stage: StageGraph, updates: Updates) -> None:
        """One sample of region ``j``'s outputs against a's values (decoded where b holds integers)."""
        b_stage = self.runners[i + 1].stage
        for (a_out, b_out), bv in zip(outs, got):
            codec = fixed_point_codec(a_stage, a_out, b_stage, b_out) if bv.dtype.kind in "iu" else None
            ref = va.get(codec.a_value if codec else dequantized_reference(a_stage, a_out, b_stage, b_out))
            if ref is None and a_stage.tensors.get(a_out) is not None and a_stage.tensors[a_out].is_param:
                ref = a_stage.tensors[a_out].value()  # a weight: the fake-quantized copy vs the float one
                if not self._same_weight(i, c, ref):
                    self.sessions[i][j] = False  # counted as skipped: no reference for this change
                    break
            if ref is None or (bv.dtype.kind in "iu" and codec is None):
                continue
            if codec is not None and codec.reference_on_grid:  # the Concat's HzCalibration clips a's there
                ref = codec.on_grid(ref)
            # a fixed-point output is read on its own grid: its error in LSB of that grid (as a tensor's)
            updates.add(stats, ref, codec.lazy(bv, np.shape(ref)) if codec else as_layout_of(bv, np.shape(ref)),
                        (codec.scale, codec.axis) if codec else None)
