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
from ..toolchains.ops import DEQUANTIZE_OPS
from ..toolchains.roles import NUMERICALLY_EQUAL_TRANSITIONS
from ..toolchains.contracts import convert_sample, pipeline_normalization, stage_contracts
from .metrics import ErrorStats, top1_agreement
from .backends import make_session
from .fixedpoint import FixedPointCodec, fixed_point_codec, nhwc_as
from .runner import StageRunner, extract_submodel

__all__ = ["TensorError", "FixedPointCodec", "RegionError", "TransitionNumeric", "compare_stages", "transition_dict", "DEFAULT_COSINE_THRESHOLD"]

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
    codec: "FixedPointCodec | None" = None  # b holds integers of a fixed-point stage: how to read them as reals


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
    if n.op_type in DEQUANTIZE_OPS and len(n.inputs) > 1:
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
            codec = None
            if b.tensors[bt].dtype and b.tensors[bt].dtype not in _FLOAT:
                codec = fixed_point_codec(a, t)
                if codec is None or codec.dtype != b.tensors[bt].dtype:
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
                                   scale=_quant_scale(b, vb, bt) if codec is None else (codec.scale, codec.axis),
                                   is_output=a.tensors[t].is_graph_output, codec=codec))
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
                   config=None, runtime: str = "onnxruntime") -> list[TransitionNumeric]:
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
    runtime : {"onnxruntime", "horizon"}
        Which runtime executes every stage and region (:mod:`graphaudit.numeric.backends`). With ``"horizon"``
        the fixed-point stage runs too; its int8 tensors are read as reals with :class:`FixedPointCodec`.

    Returns
    -------
    list of TransitionNumeric, one per stage pair.

    Raises
    ------
    GraphAuditError
        A stage cannot be lowered/loaded, or the data do not fit a stage's inputs.
    """
    plan = _plan(stages, alignments, changes, isolated)
    runners = [StageRunner(s, plan.capture[i], runtime=runtime) for i, s in enumerate(stages)]
    results = [TransitionNumeric(al.a.name, al.b.name, threshold, ps, [RegionError(c, outs) for c, _i, outs in ri],
                                 skipped_regions=sk)
               for al, ps, ri, sk in zip(alignments, plan.pairs, plan.regions, plan.skipped)]
    feeder = _Feeder(stages, data_stage, data_domain, config, sample_names)
    regions = _RegionRunner(runners, plan.regions, runtime)
    n_samples = 0
    for k, sample in enumerate(samples):
        if max_samples is not None and k >= max_samples:
            break
        values = [runners[i].run(feeder.feeds(i, sample, k)) for i in range(len(stages))]
        for i, res in enumerate(results):
            _reduce_tensors(res, values[i], values[i + 1])
            regions.measure(i, res, values[i], stages[i])
        n_samples += 1
        del values  # hold at most one sample's captured tensors
        if progress is not None:
            progress(k)
    if n_samples == 0:
        raise GraphAuditError("no samples in the data")
    for i, res in enumerate(results):
        res.skipped_regions += regions.failed(i)
        res.regions = [r for r in res.regions if r.stats.samples]
        if (stages[i].role, stages[i + 1].role) in NUMERICALLY_EQUAL_TRANSITIONS:
            res.sqnr_threshold = FLOAT_EQUAL_SQNR_DB
        res.first_divergence = _first_divergence(res)
    return results


@dataclass
class _Plan:
    """What to capture per stage and what to measure per transition."""

    pairs: list[list[TensorError]]
    regions: list[list[tuple[Change, list, list]]]
    skipped: list[int]
    capture: list[set[str]]


def _plan(stages: list[StageGraph], alignments: list[Alignment], changes: list[list[Change]],
          isolated: bool) -> _Plan:
    pairs = [_pairs(al, ch) for al, ch in zip(alignments, changes)]
    capture: list[set[str]] = [set() for _ in stages]
    for i, ps in enumerate(pairs):
        for te in ps:
            capture[i].add(te.codec.a_value if te.codec else te.a_tensor)
            capture[i + 1].add(te.b_tensor)
    regions, skipped = [], []
    for i, (al, ch) in enumerate(zip(alignments, changes)):
        items, miss = [], 0
        for c in ch if isolated else []:
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
            for a_name in [a for _b, a in io[0]] + [a for a, _b in io[1]]:
                capture[i].add(a_name)
                codec = fixed_point_codec(al.a, a_name)
                if codec is not None:
                    capture[i].add(codec.a_value)
        regions.append(items)
        skipped.append(miss)
    return _Plan(pairs, regions, skipped, capture)


class _Feeder:
    """Each stage's feeds for one sample, converted from the data stage's contract (or raw pixels)."""

    def __init__(self, stages: list[StageGraph], data_stage: int, data_domain: str, config,
                 sample_names: list[str] | None):
        self.stages = stages
        self.contracts = [stage_contracts(s, config) for s in stages]
        self.norm = pipeline_normalization(self.contracts)
        self.home = self.contracts[data_stage]
        self.domain = data_domain
        self.names = sample_names

    def feeds(self, i: int, sample: dict[str, np.ndarray], k: int) -> dict[str, np.ndarray]:
        s, contracts, out = self.stages[i], self.contracts[i], {}
        for name, ic in contracts.items():
            src_name = name if name in sample else (next(iter(sample)) if len(sample) == 1 and len(contracts) == 1
                                                     else None)
            if src_name is None:
                raise GraphAuditError(f"{s.path}: the data have no values for input {name!r}")
            src = "pixels" if self.domain == "pixels" else self.home.get(name) or self.home.get(src_name) or ic
            try:
                out[name] = convert_sample(sample[src_name], src, ic, self.norm.get(name))
            except ValueError as e:
                raise GraphAuditError(f"{s.path}: {e}") from e
            _check_feed(out[name], ic, s, _label(self.names, k))
        return out


def _reduce_tensors(res: TransitionNumeric, va: dict, vb: dict) -> None:
    """Add one sample's captured values to the accumulated error of every tensor pair of a transition."""
    for te in res.tensors:
        ref = va.get(te.codec.a_value if te.codec else te.a_tensor)
        got = vb.get(te.b_tensor)
        if ref is None or got is None or ref.dtype.kind != "f":
            continue
        if te.codec is not None:
            if got.dtype.kind not in "iu":
                continue
            got = te.codec.decode(got, ref.shape)
        elif got.dtype.kind != "f":
            continue
        else:  # the fixed-point stage's float tensors (HzDequantize outputs) are NHWC like its integers
            got = nhwc_as(got, ref.shape)
        sc = te.scale
        te.stats.update(ref, got, np.asarray(sc[0]) if sc else None, sc[1] if sc else 1)
        if te.is_output and ref.ndim == 2 and ref.shape[-1] > 1:
            agree, rows = top1_agreement(ref, got)
            te.top1[0] += agree
            te.top1[1] += rows


class _RegionRunner:
    """Isolated error of each change: b's nodes of the change, extracted once into their own session, fed with
    a's values at the change's inputs (encoded as the fixed-point stage's integers where b holds integers)."""

    def __init__(self, runners: list[StageRunner], regions: list[list[tuple[Change, list, list]]], runtime: str):
        self.runners, self.regions, self.runtime = runners, regions, runtime
        self.sessions: list[dict[int, object]] = [dict() for _ in regions]

    def failed(self, i: int) -> int:
        return sum(1 for v in self.sessions[i].values() if v is False)

    def _feeds(self, i: int, ins: list, va: dict) -> dict | None:
        b = self.runners[i + 1].stage
        a = self.runners[i].stage
        feeds = {}
        for b_in, a_in in ins:
            if a_in not in va:
                return None
            v = va[a_in]
            bt = b.tensors.get(b_in)
            if bt is not None and bt.dtype in ("INT8", "INT16") and v.dtype.kind == "f":
                codec = fixed_point_codec(a, a_in)
                if codec is None or codec.dtype != bt.dtype:
                    return None
                v = codec.encode(va.get(codec.a_value, v), bt.shape if bt.shape and all(
                    isinstance(d, int) and d > 0 for d in bt.shape) else None,
                    np.int16 if bt.dtype == "INT16" else np.int8)
            elif v.dtype == np.float64:
                v = v.astype(np.float32)
            feeds[b_in] = v
        return feeds

    def _session(self, i: int, j: int, feeds: dict, outs: list):
        sess = self.sessions[i].get(j)
        if sess is None:
            sub = extract_submodel(self.runners[i + 1].model, feeds, [b for _a, b in outs])
            try:
                sess = False if sub is None else make_session(sub.SerializeToString(), self.runtime, threads=1)
            except Exception:  # noqa: BLE001 - a region that cannot run alone is skipped, counted in failed()
                sess = False
            self.sessions[i][j] = sess
        return sess

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

    def measure(self, i: int, res: TransitionNumeric, va: dict, a_stage: StageGraph) -> None:
        for j, (c, ins, outs) in enumerate(self.regions[i]):
            feeds = self._feeds(i, ins, va)
            if feeds is None:
                continue
            sess = self._session(i, j, feeds, outs)
            if sess is False:
                continue
            got = sess.run([b for _a, b in outs], feeds)
            for (a_out, _b_out), bv in zip(outs, got):
                codec = fixed_point_codec(a_stage, a_out) if bv.dtype.kind in "iu" else None
                ref = va.get(codec.a_value if codec else a_out)
                if ref is None and a_stage.tensors.get(a_out) is not None and a_stage.tensors[a_out].is_param:
                    ref = a_stage.tensors[a_out].value()  # a weight: the fake-quantized copy vs the float one
                    if not self._same_weight(i, c, ref):
                        self.sessions[i][j] = False  # counted as skipped: no reference for this change
                        break
                if ref is None or (bv.dtype.kind in "iu" and codec is None):
                    continue
                res.regions[j].stats.update(ref, codec.decode(bv, np.shape(ref)) if codec else bv)


def _first_divergence(res: TransitionNumeric) -> TensorError | None:
    for te in res.tensors:
        if te.stats.samples and ((math.isnan(te.stats.cosine) and te.stats.diverged_nonfinite)
                                 or te.stats.cosine < res.threshold
                                 or (res.sqnr_threshold is not None and te.stats.sqnr_db < res.sqnr_threshold)):
            return te
    return None


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
