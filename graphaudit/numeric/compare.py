"""Run every stage on the same samples and compare aligned tensors: accumulated and isolated error, first divergence."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from ..classify import Change
from ..errors import GraphAuditError
from ..lineage import Alignment
from ..stage import StageGraph
from ..toolchains.discovery import NUMERICALLY_EQUAL_TRANSITIONS
from ..toolchains.contracts import convert_sample, pipeline_normalization, stage_contracts
from .metrics import ErrorStats, top1_agreement
from .runner import StageRunner, extract_submodel, session_options

__all__ = ["TensorError", "RegionError", "TransitionNumeric", "compare_stages", "transition_dict", "DEFAULT_COSINE_THRESHOLD"]

#: Changes measured on their own per transition (each needs its own onnxruntime session, extracted from the
#: stage); the rest are counted as skipped. 5,000-node graphs have about 2,500 changes.
MAX_ISOLATED_REGIONS = 400

#: First-divergence threshold on cosine similarity (configurable per call).
DEFAULT_COSINE_THRESHOLD = 0.999

#: Between stages documented as numerically equal (original -> optimized), a tensor has also diverged when its
#: SQNR falls below this (dB; 60 dB = relative L2 error 1e-3). Cosine alone misses a rescaled tensor (a Conv whose
#: weights are 2% off keeps cosine 1.0 at 34 dB); float32 rewrites of the same math measure above 100 dB.
FLOAT_EQUAL_SQNR_DB = 60.0

_FLOAT = {"FLOAT", "FLOAT16", "DOUBLE", "BFLOAT16"}
_COMPARABLE_KINDS = {"exact", "quantized", "absorbed", "converted"}


@dataclass
class TensorError:
    """Accumulated error of one aligned tensor pair (a = reference stage, b = test stage).

    ``order`` is the position of the b tensor's producer in b's topological order; ``change``
    the pattern of the change that produced it (``""`` when kept).
    """

    a_tensor: str
    b_tensor: str
    kind: str
    order: int
    change: str
    stats: ErrorStats = field(default_factory=ErrorStats)
    scale: tuple | None = None  # (scales, axis) of b's quantization, for LSB error
    is_output: bool = False
    top1: list[int] = field(default_factory=lambda: [0, 0])


@dataclass
class RegionError:
    """Isolated error of one change: b's nodes of the change run on a's values at their inputs."""

    change: Change
    outputs: list[tuple[str, str]]  # (a tensor, b tensor)
    stats: ErrorStats = field(default_factory=ErrorStats)


@dataclass
class TransitionNumeric:
    """Numeric comparison of one stage pair."""

    a: str
    b: str
    threshold: float
    tensors: list[TensorError]
    regions: list[RegionError]
    first_divergence: TensorError | None = None
    skipped_regions: int = 0
    sqnr_threshold: float | None = None  # dB; set for transitions documented as numerically equal

    def worst_regions(self, n: int = 5) -> list[RegionError]:
        """Regions with the lowest isolated SQNR first."""
        return sorted((r for r in self.regions if r.stats.samples), key=lambda r: r.stats.sqnr_db)[:n]

    def outputs(self) -> list[TensorError]:
        return [t for t in self.tensors if t.is_output]


def _quant_scale(stage: StageGraph, al_view, tensor: str) -> tuple | None:
    """(scales, axis) of the wrapper that produced ``tensor`` (DequantizeLinear scale input or HzCalibration attr)."""
    via = al_view.via.get(tensor)
    if via is None:
        return None
    n = stage.nodes[via]
    if n.op_type in ("DequantizeLinear", "HzDequantize") and len(n.inputs) > 1:
        v = stage.tensors[n.inputs[1]].value() if n.inputs[1] in stage.tensors else None
        if v is not None:
            return (tuple(np.asarray(v, np.float64).ravel()), int(n.attributes.get("axis", 1)))
    if n.op_type == "HzCalibration":
        scales = n.attributes.get("scales")
        if isinstance(scales, list) and scales:
            return (tuple(float(x) for x in scales), int(n.attributes.get("axis", 1)) if isinstance(
                n.attributes.get("axis", 1), int) else 1)
    return None


def _pairs(al: Alignment, changes: list[Change]) -> list[TensorError]:
    a, b, vb = al.a, al.b, al.view_b
    b_order = {nid: i for i, nid in enumerate(b.nodes)}
    change_of: dict[str, str] = {}
    for c in changes:
        if c.kind != "kept":
            for nid in c.b_nodes:
                change_of[nid] = f"{c.kind}: {c.pattern}"
    out: list[TensorError] = []
    seen: set[str] = set()
    for n in a.nodes.values():
        if n.parent is not None:
            continue
        for t in n.outputs:
            if not t or t in seen or a.tensors[t].is_param or a.tensors[t].dtype not in _FLOAT | {""}:
                continue  # unknown dtype (no value_info) is checked on the arrays at run time
            bt = al.b_for(t)
            if bt is None or bt not in al.tensor_map or al.tensor_map[bt].kind not in _COMPARABLE_KINDS:
                continue
            if b.tensors[bt].dtype and b.tensors[bt].dtype not in _FLOAT:
                continue
            seen.add(t)
            prod = b.tensors[bt].producer
            root_prod = b.tensors[vb.root.get(bt, bt)].producer
            order = b_order.get(prod, -1) if prod else -1
            change = change_of.get(root_prod or "", "") or change_of.get(prod or "", "")
            if not change and root_prod:
                # a kept node: name the changes on its inputs (fake quantization of activations/weights)
                upstream = []
                for x in b.nodes[root_prod].inputs:
                    w = vb.via.get(x) if x else None
                    if w is not None and change_of.get(w) and change_of[w] not in upstream:
                        upstream.append(change_of[w])
                if upstream:
                    change = f"kept {b.nodes[root_prod].op_type} reading " + ", ".join(upstream)
            out.append(TensorError(t, bt, al.tensor_map[bt].kind, order, change,
                                   scale=_quant_scale(b, vb, bt), is_output=a.tensors[t].is_graph_output))
    out.sort(key=lambda te: te.order)
    return out


def _region_io(al: Alignment, c: Change) -> tuple[list[tuple[str, str]], list[tuple[str, str]]] | None:
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
            if tm is None or tm.kind not in _COMPARABLE_KINDS | {"preprocessed"}:
                return None
            if (x, tm.a) not in ins:
                ins.append((x, tm.a))
        for x in n.outputs:
            if not x:
                continue
            tm = al.tensor_map.get(x)
            consumers_out = any(cid not in inside for cid, _k in b.tensors[x].consumers) or b.tensors[x].is_graph_output
            if tm is not None and tm.kind in _COMPARABLE_KINDS and consumers_out:
                outs.append((tm.a, x))
    return (ins, outs) if outs else None


def _label(names: list[str] | None, k: int) -> str:
    return names[k] if names and k < len(names) else f"sample {k}"


def _check_feed(x: np.ndarray, ic, stage: StageGraph, label: str) -> None:
    """Data must be finite and fit the stage's static dims (raise naming the sample and both shapes)."""
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise GraphAuditError(f"{label}: input {ic.name!r} holds NaN or infinite values")
    if ic.shape is not None and (len(ic.shape) != x.ndim or any(
            isinstance(d, int) and d > 0 and d != n for d, n in zip(ic.shape, x.shape))):
        hint = " (images are not resized: give them at the model's input size)" if x.ndim == 4 else ""
        raise GraphAuditError(f"{label}: input {ic.name!r} has shape {list(x.shape)} for {stage.name}, which takes "
                              f"{list(ic.shape)}{hint}")


def compare_stages(stages: list[StageGraph], alignments: list[Alignment], changes: list[list[Change]],
                   samples: Iterable[dict[str, np.ndarray]], data_stage: int, data_domain: str = "tensor",
                   threshold: float = DEFAULT_COSINE_THRESHOLD, isolated: bool = True,
                   progress: Callable[[int], None] | None = None,
                   sample_names: list[str] | None = None, max_samples: int | None = None,
                   config=None) -> list[TransitionNumeric]:
    """Compare every consecutive stage pair on the same samples.

    Parameters
    ----------
    stages, alignments, changes
        From :func:`graphaudit.explain.audit` (``alignments[i]``: stages[i] -> stages[i+1]).
    samples : iterable of dict
        Input arrays by graph input name, in the contract of ``stages[data_stage]`` (or raw
        pixels when ``data_domain == "pixels"``: uint8 [N,H,W,3] RGB). Streamed: one sample is
        converted, run through every stage and reduced before the next is read.
    data_stage : int
        Index of the stage whose input contract the data follow.
    threshold : float
        Cosine similarity below which a tensor counts as diverged (first divergence).
    isolated : bool
        Also measure each change on its own: b's nodes of the change fed with a's values.
    progress : callable, optional
        Called with the sample index after each sample.
    sample_names : list of str, optional
        A label per sample (its file) for error messages.
    max_samples : int, optional
        Stop after this many samples.
    config : graphaudit.config.ConversionConfig, optional
        Declares layout and colour order where a stage does not (see :func:`stage_contracts`).

    Returns
    -------
    list of TransitionNumeric, one per stage pair.

    Raises
    ------
    GraphAuditError
        A stage cannot be lowered/loaded, or the data do not fit a stage's inputs.
    """
    contracts = [stage_contracts(s, config) for s in stages]
    norm = pipeline_normalization(contracts)
    pairs = [_pairs(al, ch) for al, ch in zip(alignments, changes)]
    capture: list[set[str]] = [set() for _ in stages]
    for i, ps in enumerate(pairs):
        for te in ps:
            capture[i].add(te.a_tensor)
            capture[i + 1].add(te.b_tensor)
    region_io: list[list[tuple[Change, list, list]]] = []
    skipped = []
    for i, (al, ch) in enumerate(zip(alignments, changes)):
        items, miss = [], 0
        if isolated:
            for c in ch:
                if c.kind in ("kept", "removed", "unmatched") or not c.b_nodes:
                    continue
                if len(items) >= MAX_ISOLATED_REGIONS:  # one session per region: bound memory and time
                    miss += 1
                    continue
                io = _region_io(al, c)
                if io is None:
                    miss += 1
                    continue
                items.append((c, io[0], io[1]))
                capture[i].update(a for _b, a in io[0])
                capture[i].update(a for a, _b in io[1])
        region_io.append(items)
        skipped.append(miss)
    runners = [StageRunner(s, capture[i]) for i, s in enumerate(stages)]
    results = [TransitionNumeric(al.a.name, al.b.name, threshold, ps, [RegionError(c, outs) for c, _i, outs in ri],
                                 skipped_regions=sk)
               for al, ps, ri, sk in zip(alignments, pairs, region_io, skipped)]
    region_sessions: list[dict[int, object]] = [dict() for _ in alignments]
    home = contracts[data_stage]
    n_samples = 0
    for k, sample in enumerate(samples):
        if max_samples is not None and k >= max_samples:
            break
        values = []
        for i, s in enumerate(stages):
            feeds = {}
            for name, ic in contracts[i].items():
                src_name = name if name in sample else (next(iter(sample)) if len(sample) == 1 and len(contracts[i]) == 1
                                                         else None)
                if src_name is None:
                    raise GraphAuditError(f"{s.path}: the data have no values for input {name!r}")
                src = "pixels" if data_domain == "pixels" else home.get(name) or home.get(src_name) or ic
                try:
                    feeds[name] = convert_sample(sample[src_name], src, ic, norm.get(name))
                except ValueError as e:
                    raise GraphAuditError(f"{s.path}: {e}") from e
                _check_feed(feeds[name], ic, s, _label(sample_names, k))
            values.append(runners[i].run(feeds))
        for i, res in enumerate(results):
            va, vb = values[i], values[i + 1]
            for te in res.tensors:
                if te.a_tensor in va and te.b_tensor in vb and va[te.a_tensor].dtype.kind == "f" \
                        and vb[te.b_tensor].dtype.kind == "f":
                    sc = te.scale
                    te.stats.update(va[te.a_tensor], vb[te.b_tensor], np.asarray(sc[0]) if sc else None,
                                    sc[1] if sc else 1)
                    if te.is_output and va[te.a_tensor].ndim == 2 and va[te.a_tensor].shape[-1] > 1:
                        agree, rows = top1_agreement(va[te.a_tensor], vb[te.b_tensor])
                        te.top1[0] += agree
                        te.top1[1] += rows
            for j, (c, ins, outs) in enumerate(region_io[i]):
                feeds = {b_in: va[a_in] for b_in, a_in in ins if a_in in va}
                if len(feeds) != len(ins):
                    continue
                sess = region_sessions[i].get(j)
                if sess is None:
                    sub = extract_submodel(runners[i + 1].model, feeds, [b for _a, b in outs])
                    if sub is None:
                        region_sessions[i][j] = False
                        continue
                    import onnxruntime as ort

                    try:
                        sess = ort.InferenceSession(sub.SerializeToString(), session_options(threads=1),
                                                    providers=["CPUExecutionProvider"])
                    except Exception:  # noqa: BLE001 - a region that cannot run alone is skipped, counted below
                        sess = False
                    region_sessions[i][j] = sess
                if sess is False:
                    continue
                got = sess.run([b for _a, b in outs], {k2: v.astype(np.float32) if v.dtype == np.float64 else v
                                                         for k2, v in feeds.items()})
                for (a_out, _b_out), bv in zip(outs, got):
                    ref = va.get(a_out)
                    if ref is None and stages[i].tensors.get(a_out) is not None and stages[i].tensors[a_out].is_param:
                        ref = stages[i].tensors[a_out].value()  # a weight: the fake-quantized copy vs the float one
                    if ref is not None:
                        results[i].regions[j].stats.update(ref, bv)
        n_samples += 1
        del values, va, vb  # hold at most one sample's captured tensors
        if progress is not None:
            progress(k)
    if n_samples == 0:
        raise GraphAuditError("no samples in the data")
    for i, res in enumerate(results):
        res.skipped_regions += sum(1 for v in region_sessions[i].values() if v is False)
        res.regions = [r for r in res.regions if r.stats.samples]
        if (stages[i].role, stages[i + 1].role) in NUMERICALLY_EQUAL_TRANSITIONS:
            res.sqnr_threshold = FLOAT_EQUAL_SQNR_DB
        for te in res.tensors:
            if te.stats.samples and ((math.isnan(te.stats.cosine) and te.stats.diverged_nonfinite)
                                     or te.stats.cosine < threshold
                                     or (res.sqnr_threshold is not None and te.stats.sqnr_db < res.sqnr_threshold)):
                res.first_divergence = te
                break
    return results


def _te_dict(te: TensorError) -> dict:
    d = {"a_tensor": te.a_tensor, "b_tensor": te.b_tensor, "kind": te.kind, "order": te.order, "change": te.change,
         **te.stats.to_dict()}
    if te.top1[1]:
        d["top1_agreement"] = [te.top1[0], te.top1[1]]
    return d


def _region_dict(r: RegionError) -> dict:
    return {"kind": r.change.kind, "pattern": r.change.pattern, "a_nodes": r.change.a_nodes, "b_nodes": r.change.b_nodes,
            "outputs": [list(o) for o in r.outputs], **r.stats.to_dict()}


def transition_dict(res: TransitionNumeric, worst: int = 10) -> dict:
    """JSON-ready dict of one transition's numeric comparison (``numeric`` entries of the report schema:
    ``worst_regions`` the ``worst`` changes by isolated SQNR, ``regions`` (1.3) every measured change)."""
    compared = [t for t in res.tensors if t.stats.samples]
    worst_t = min(compared, key=lambda t: (not math.isnan(t.stats.cosine), t.stats.cosine), default=None)
    return {
        "a": res.a, "b": res.b, "threshold": res.threshold, "sqnr_threshold": res.sqnr_threshold,
        "tensors_compared": len(compared),
        "min_cosine": worst_t.stats.to_dict()["cosine"] if worst_t else None,
        "worst_tensor": _te_dict(worst_t) if worst_t else None,
        "first_divergence": _te_dict(res.first_divergence) if res.first_divergence else None,
        "outputs": [_te_dict(t) for t in res.outputs()],
        "worst_regions": [_region_dict(r) for r in res.worst_regions(worst)],
        "regions": [_region_dict(r) for r in res.regions if r.stats.samples],
        "regions_measured": len(res.regions), "regions_skipped": res.skipped_regions,
        "tensors": [_te_dict(t) for t in res.tensors if t.stats.samples],
    }
