"""Run every stage on the same samples and compare aligned tensors: accumulated and isolated error, first divergence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from ..classify import Change
from ..errors import DataError, GraphAuditError, NonFiniteSampleError, NoSampleLeftError, StageRunError
from ..lineage import Alignment, Lineage
from ..stage import StageGraph
from ..toolchains.roles import NUMERICALLY_EQUAL_TRANSITIONS
from ..toolchains.contracts import convert_sample, pipeline_normalization, stage_contracts
from .divergence import linear_readers, set_divergence
from .fixedpoint import FixedPointCodec, fixed_point_codec
from .thin import thin as _thin
from .tensorfacts import class_scores, quant_scale
from .metrics import ErrorStats
from .regions import COMPARABLE_KINDS, RegionRunner, region_io
from .runner import StageRunner
from .schedule import StageValues, cores, run_all, stream
from .reduction import Updates
from .thresholds import DEFAULT_COSINE_THRESHOLD
from .backends import HORIZON_RUNTIME  # stages run side by side, each on its share of the cores, in onnxruntime

__all__ = ["TensorError", "FixedPointCodec", "RegionError", "TransitionNumeric", "CompareOptions", "compare_stages", "StageFeeder",
           "DEFAULT_COSINE_THRESHOLD"]

#: Changes measured on their own per transition (extracted from the stage and run together in one session,
#: :class:`graphaudit.numeric.batch.RegionBatch`); the rest are counted as skipped. 5,000-node graphs have about
#: 2,500 changes.
MAX_ISOLATED_REGIONS = 400

#: Between stages documented as numerically equal (original -> optimized), a tensor has also diverged when its
#: SQNR falls below this (dB; 60 dB = relative L2 error 1e-3). Cosine alone misses a rescaled tensor (a Conv whose
#: weights are 2% off keeps cosine 1.0 at 34 dB); float32 rewrites of the same math measure above 100 dB.
FLOAT_EQUAL_SQNR_DB = 60.0

_FLOAT = {"FLOAT", "FLOAT16", "DOUBLE", "BFLOAT16"}


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
    class_scores: bool = False  # a's value is a Softmax's output: top-1 agreement applies (rank-2 outputs)
    codec: "FixedPointCodec | None" = None  # b holds integers of a fixed-point stage: how to read them as reals
    a_node: str = ""  # the node of a that computes a_tensor ("" for a graph input)
    b_node: str = ""  # the compute node of b behind b_tensor (past fake quantization; "" for a graph input)
    source_node: str = ""  # the node of stages[0] computing a_tensor's value, through the lineage ("" if none)
    #: outputs of b's weighted linear ops reading b_tensor, directly or through data movement (divergence.py)
    linear_readers: tuple[str, ...] = ()


@dataclass
class RegionError:
    """Isolated error of one change: b's nodes of the change run on a's values at their inputs."""

    change: Change
    outputs: list[tuple[str, str]]  # (a tensor, b tensor)
    stats: ErrorStats = field(default_factory=ErrorStats)
    source_nodes: list[str] = field(default_factory=list)  # nodes of stages[0] computing the outputs' a values


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
    reference: str = ""  # the first stage compared: ``vs_reference`` measures b's outputs against it
    vs_reference: list[TensorError] = field(default_factory=list)
    #: samples left out of the whole comparison (every transition) for NaN or infinite values in a stage's feed:
    #: ``(sample label, input name)`` in sample order (the same list on every transition of one comparison)
    left_out: list[tuple[str, str]] = field(default_factory=list)
    #: between stages documented as numerically equal, the tensors below the thresholds that heal at the linear op
    #: reading them (a scale folded forward: pairs of different quantities, not a loss; divergence.py)
    inner_divergence: list[TensorError] = field(default_factory=list)

    def worst_regions(self, n: int = 5) -> list[RegionError]:
        """Regions with the lowest isolated SQNR first."""
        return sorted((r for r in self.regions if r.stats.samples), key=lambda r: r.stats.sqnr_db)[:n]

    def outputs(self) -> list[TensorError]:
        return [t for t in self.tensors if t.is_output]


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
            if bt is None or bt not in al.tensor_map or al.tensor_map[bt].kind not in COMPARABLE_KINDS:
                continue
            codec = None
            if b.tensors[bt].dtype and b.tensors[bt].dtype not in _FLOAT:
                codec = fixed_point_codec(a, t, b, bt)
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
                                   scale=quant_scale(b, vb, bt) if codec is None else (codec.scale, codec.axis),
                                   is_output=a.tensors[t].is_graph_output, codec=codec,
                                   class_scores=class_scores(a, t),
                                   a_node=_node_name(a, a.tensors[t].producer),
                                   b_node=_node_name(b, root_prod or prod), linear_readers=linear_readers(b, bt)))
    # a graph output of b that no output of a reaches (a's output is a layout Transpose the stage absorbed, as in
    # Horizon's quantized stage, which ends in NHWC): the tensor paired with it is an output pair too
    reached = {te.b_tensor for te in out if te.is_output}
    for te in out:
        if not te.is_output and te.b_tensor not in reached and b.tensors[te.b_tensor].is_graph_output:
            te.is_output = True
            reached.add(te.b_tensor)
    out.sort(key=lambda te: te.order)
    return out


def _source_namer(stages: list[StageGraph], alignments: list[Alignment]):
    """``name(i, tensor)``: the ONNX name of the node of ``stages[0]`` (the user's source model, or the toolchain's
    first stage) computing the value of ``tensor`` of ``stages[i]``, followed back through the chain of alignments
    (:meth:`graphaudit.lineage.Lineage.origin`); ``""`` when the value has no counterpart in stage 0 or is a graph
    input there."""
    lineage, first = Lineage(stages, alignments), stages[0]

    def name(i: int, tensor: str) -> str:
        k, t0, _kind = lineage.origin(i, tensor)[-1]
        return _node_name(first, first.tensors[t0].producer) if k == 0 and t0 in first.tensors else ""

    return name


def _node_name(st: StageGraph, node_id: str | None) -> str:
    """The ONNX name of a node (what the toolchain's config and log use), its id when it has none."""
    if not node_id or node_id not in st.nodes:
        return ""
    return st.nodes[node_id].name or node_id


def _label(names: list[str] | None, k: int) -> str:
    return names[k] if names and k < len(names) else f"sample {k}"


def _check_feed(x: np.ndarray, ic, stage: StageGraph, label: str) -> None:
    """Data must be finite and fit the stage's static dims (DataError naming the sample and both shapes)."""
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise NonFiniteSampleError(f"{label}: input {ic.name!r} holds NaN or infinite values", label, ic.name)
    if ic.shape is not None and (len(ic.shape) != x.ndim or any(
            isinstance(d, int) and d > 0 and d != n for d, n in zip(ic.shape, x.shape))):
        hint = " (images are not resized: give them at the model's input size)" if x.ndim == 4 else ""
        raise DataError(f"{label}: input {ic.name!r} has shape {list(x.shape)} for {stage.name}, which takes "
                              f"{list(ic.shape)}{hint}")


@dataclass
class CompareOptions:
    """How :func:`compare_stages` feeds, runs and judges the stages.

    Attributes
    ----------
    data_stage : int
        Index of the stage whose input contract the data follow.
    data_domain : {"tensor", "pixels"}
        ``"pixels"``: the samples are raw pixels (uint8 [N,H,W,3] RGB), converted for every stage.
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
    """

    data_stage: int = 0
    data_domain: str = "tensor"
    threshold: float = DEFAULT_COSINE_THRESHOLD
    isolated: bool = True
    progress: Callable[[int], None] | None = None
    sample_names: list[str] | None = None
    max_samples: int | None = None
    config: object = None
    runtime: str = "onnxruntime"
    partial: bool = False  # one shard of a larger run: no error when every one of its samples is left out


def compare_stages(stages: list[StageGraph], alignments: list[Alignment], changes: list[list[Change]],
                   samples: Iterable[dict[str, np.ndarray]], options: CompareOptions | None = None
                   ) -> list[TransitionNumeric]:
    """Compare every consecutive stage pair on the same samples.

    Three steps: plan (the tensor pairs and isolated regions to measure, the tensors each stage captures), run
    (each sample converted to every stage's contract and run through every stage) and reduce (the sample's values
    added to the accumulated and isolated error, then the first divergence found).

    Parameters
    ----------
    stages, alignments, changes
        From :func:`graphaudit.pipeline.audit` (``alignments[i]``: stages[i] -> stages[i+1]).
    samples : iterable of dict
        Input arrays by graph input name, in the contract of ``stages[options.data_stage]`` (or raw
        pixels when ``options.data_domain == "pixels"``: uint8 [N,H,W,3] RGB). Streamed: one sample is
        converted, run through every stage (side by side in stock onnxruntime when there are cores) and reduced
        before the next is read.
    options : CompareOptions, optional
        Data stage and domain, threshold, isolated regions, progress, sample names, sample cap, config, runtime
        (defaults: :class:`CompareOptions`).

    Returns
    -------
    list of TransitionNumeric, one per stage pair.
        A sample whose feed for any stage holds NaN or infinite values is left out of every transition and listed
        in each one's ``left_out`` (sample label, input name); the figures are of the other samples.

    Raises
    ------
    NoSampleLeftError
        Every sample was left out for NaN or infinite values (not with ``options.partial``: a shard's results
        then carry only ``left_out``).
    GraphAuditError
        A stage cannot be lowered/loaded, the data do not fit a stage's inputs, or there are no samples.
    """
    opts = options or CompareOptions()
    comparison = _Comparison(stages, alignments, _plan(stages, alignments, changes, opts.isolated), opts)
    n_samples = stream(samples, comparison.run, comparison.reduce, opts.max_samples, opts.progress)
    if n_samples == 0:
        raise GraphAuditError("no samples in the data")
    if len(comparison.left_out) == n_samples and not opts.partial:
        raise NoSampleLeftError.of(comparison.left_out)
    return comparison.finish()


@dataclass
class _Plan:
    """What to capture per stage and what to measure per transition."""

    pairs: list[list[TensorError]]
    regions: list[list[tuple[Change, list, list]]]
    skipped: list[int]
    capture: list[set[str]]
    reference: list[list[TensorError]] = field(default_factory=list)


def _reference_chains(pairs: list[list[TensorError]]) -> list[list[TensorError]]:
    """Per transition ``i``, the graph outputs of ``stages[i + 1]`` paired with the outputs of ``stages[0]`` they
    descend from: each output pair of transition 0 followed through the output pairs of the later transitions
    (``b_tensor`` of one is the ``a_tensor`` of the next). The pair keeps the last transition's decoding (fixed-point
    codec, quantization scale), so stage k's values are read as reals exactly as in its own transition; where a
    stage absorbed a layout Transpose before an output (Horizon's quantized stage ends in NHWC without it) the
    link is the output of the same name. A chain ends where an output has no counterpart in the next stage."""
    chains: list[list[TensorError]] = []
    prev: list[TensorError] = []
    for i, ps in enumerate(pairs):
        outs = [t for t in ps if t.is_output]
        if i == 0:
            cur = [TensorError(t.a_tensor, t.b_tensor, t.kind, t.order, "", scale=t.scale, is_output=True,
                               codec=t.codec, class_scores=t.class_scores, a_node=t.a_node, b_node=t.b_node, source_node=t.source_node)
                   for t in outs]
        else:
            by_a = {t.a_tensor: t for t in outs}
            by_b = {t.b_tensor: t for t in outs}  # toolchains keep output names where they absorb a last Transpose
            cur = [TensorError(r.a_tensor, n.b_tensor, n.kind, n.order, "", scale=n.scale, is_output=True,
                               codec=n.codec, class_scores=r.class_scores, a_node=r.a_node, b_node=n.b_node, source_node=r.source_node)
                   for r in prev for n in [by_a.get(r.b_tensor) or by_b.get(r.b_tensor)] if n is not None]
        chains.append(cur)
        prev = cur
    return chains


def _plan(stages: list[StageGraph], alignments: list[Alignment], changes: list[list[Change]],
          isolated: bool) -> _Plan:
    """The plan step: tensor pairs per transition, isolated regions (at most :data:`MAX_ISOLATED_REGIONS`, the
    rest and those without a closed boundary counted as skipped) and the tensors each stage must capture."""
    pairs = [_thin(_pairs(al, ch)) for al, ch in zip(alignments, changes)]
    source = _source_namer(stages, alignments)
    capture: list[set[str]] = [set() for _ in stages]
    for i, ps in enumerate(pairs):
        for te in ps:
            te.source_node = source(i, te.a_tensor)
            capture[i].add(te.codec.a_value if te.codec else te.a_tensor)
            capture[i + 1].add(te.b_tensor)
    reference = _reference_chains(pairs)
    for ps in reference[1:]:
        capture[0].update(te.a_tensor for te in ps)
    regions, skipped = [], []
    for i, (al, ch) in enumerate(zip(alignments, changes)):
        items, miss = [], 0
        for c in ch if isolated else []:
            if c.kind in ("kept", "removed", "unmatched") or not c.b_nodes:
                continue
            if len(items) >= MAX_ISOLATED_REGIONS:  # bound memory and time
                miss += 1
                continue
            io = region_io(al, c)
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
    return _Plan(pairs, regions, skipped, capture, reference)


class _Feeder:
    """Each stage's feeds for one sample, converted from the data stage's contract (or raw pixels)."""

    def __init__(self, stages: list[StageGraph], data_stage: int, data_domain: str, config,
                 sample_names: list[str] | None):
        self.stages = stages
        self.contracts = [stage_contracts(s, config) for s in stages]
        self.norm = pipeline_normalization(self.contracts)
        self.data_stage = data_stage
        self.home = self.contracts[data_stage]
        self.domain = data_domain
        self.names = sample_names

    def label(self, k: int) -> str:
        """How errors name sample ``k``: its file, or ``sample K``."""
        return _label(self.names, k)

    def feeds(self, i: int, sample: dict[str, np.ndarray], k: int) -> dict[str, np.ndarray]:
        s, contracts, out = self.stages[i], self.contracts[i], {}
        for name, ic in contracts.items():
            src_name = name if name in sample else (next(iter(sample)) if len(sample) == 1 and len(contracts) == 1
                                                     else None)
            if src_name is None:
                msg = f"{s.path}: the data have no values for input {name!r}"
                if i != self.data_stage:  # a stage with an input the data stage lacks: that stage cannot be run (N403)
                    raise StageRunError(f"{msg} (the samples hold {', '.join(repr(n) for n in sample)}: the "
                                        "inputs of the data stage)", str(s.path))
                raise GraphAuditError(msg)
            src = "pixels" if self.domain == "pixels" else self.home.get(name) or self.home.get(src_name) or ic
            try:
                out[name] = convert_sample(sample[src_name], src, ic, self.norm.get(name))
            except ValueError as e:
                raise GraphAuditError(f"{s.path}: {e}") from e
            _check_feed(out[name], ic, s, _label(self.names, k))
        return out


#: Public name of the per-stage feed conversion (the bisection and the eval hook feed stages the same way).
StageFeeder = _Feeder


class _Comparison:
    """The run and reduce steps of :func:`compare_stages` over a plan: one sample at a time."""

    def __init__(self, stages: list[StageGraph], alignments: list[Alignment], plan: _Plan, opts: CompareOptions):
        self.stages = stages
        self.concurrent = opts.runtime != HORIZON_RUNTIME and len(stages) > 1 and cores() >= len(stages)
        threads = cores() // len(stages) if self.concurrent else 0
        # onnxruntime's arena is left out only where something runs after a stage within the sample and reuses what
        # it frees: isolated regions, or (one stage after the other) stage i + 2 after stage i's values are freed.
        # Else all of a sample's stage values are held at once and arena-less runs fragment malloc's heap (peak RSS,
        # two stages, --no-isolated, 24b8125 -> arena-less: PP-OCRv4 det, 4 samples, 1968 -> 2030 MB side by side,
        # 1973 -> 2026 MB one after the other; cls, 16 samples, 123.6 -> 128.0 MB and 123.5 -> 126.9 MB)
        arena = not any(plan.regions) and (self.concurrent or len(stages) < 3)
        # a stage's model is kept only where isolated regions are extracted from it (the b stage of a transition)
        self.runners = [StageRunner(s, plan.capture[i], runtime=opts.runtime, threads=threads,
                                    keep_model=i > 0 and bool(plan.regions[i - 1]), arena=arena)
                        for i, s in enumerate(stages)]
        source = _source_namer(stages, alignments)
        self.results = [TransitionNumeric(al.a.name, al.b.name, opts.threshold, ps,
                                          [RegionError(c, outs, source_nodes=list(dict.fromkeys(
                                              n for n in (source(i, a) for a, _b in outs) if n)))
                                           for c, _i, outs in ri], skipped_regions=sk,
                                          reference=stages[0].name, vs_reference=ref)
                        for i, (al, ps, ri, sk, ref) in enumerate(zip(alignments, plan.pairs, plan.regions,
                                                                      plan.skipped, plan.reference))]
        #: stage 0's tensors that transitions after the first compare against (kept until a sample is reduced)
        self.reference_names = {te.a_tensor for res in self.results[1:] for te in res.vs_reference}
        self.feeder = _Feeder(stages, opts.data_stage, opts.data_domain, opts.config, opts.sample_names)
        self.regions = RegionRunner(self.runners, plan.regions, opts.runtime)
        self.left_out: list[tuple[str, str]] = []

    def run(self, sample: dict[str, np.ndarray], k: int) -> list[dict[str, np.ndarray]] | None:
        """Sample ``k`` through every stage: per stage, its captured tensors by name; None when a stage's feed of
        it holds NaN or infinite values (the sample is left out and recorded in :attr:`left_out`)."""
        try:
            feeds = [self.feeder.feeds(i, sample, k) for i in range(len(self.stages))]
        except NonFiniteSampleError as e:
            self.left_out.append((e.label, e.input))
            return None
        label = self.feeder.label(k)
        if not self.concurrent:  # one stage after the other: each run when the reduction first reads it
            return StageValues(self.runners, feeds, label)
        return run_all([lambda i=i: self.runners[i].run(feeds[i], label) for i in range(len(self.stages))],
                       self.concurrent)

    def reduce(self, values: list[dict[str, np.ndarray]] | StageValues | None) -> None:
        """Add one sample's values to every transition's accumulated and isolated error (None: a sample left out).
        Transition i's last reader of stage i's values is transition i itself: they are released after it (stage
        0's down to the tensors later transitions compare against it, :attr:`TensorError.vs_reference`)."""
        if values is None:
            return
        for i, res in enumerate(self.results):
            # the regions read stage i's values alone: measured (and their outputs freed) before stage i + 1 runs
            self.regions.measure(i, [r.stats for r in res.regions], values[i], self.stages[i])
            u = Updates()
            va, vb = values[i], values[i + 1]
            for te in res.tensors:
                u.pair(te, va.get(te.codec.a_value if te.codec else te.a_tensor), vb.get(te.b_tensor))
            if i:  # transition 0's outputs are already against stages[0]
                for te in res.vs_reference:
                    u.pair(te, values[0].get(te.a_tensor), vb.get(te.b_tensor))
            u.apply()
            u = va = vb = None  # noqa: F841 - no reference left to stage i's values but ``values``'
            if i:
                values[i] = None
            else:
                ref = values[0]
                values[0] = {n: ref[n] for n in self.reference_names if n in ref}
                ref = None  # noqa: F841

    def finish(self) -> list[TransitionNumeric]:
        """The results: regions that never ran dropped (counted as skipped), thresholds and first divergence set."""
        for i, res in enumerate(self.results):
            res.left_out = list(self.left_out)
            res.skipped_regions += self.regions.failed(i)
            res.regions = [r for r in res.regions if r.stats.samples]
            if (self.stages[i].role, self.stages[i + 1].role) in NUMERICALLY_EQUAL_TRANSITIONS:
                res.sqnr_threshold = FLOAT_EQUAL_SQNR_DB
            set_divergence(res)
        return self.results
