"""The numeric comparison of a stage pair as the report keeps it: typed summaries, dicts only at the JSON edge.

:func:`transition_summary` builds a :class:`TransitionSummary` from the accumulators of a run
(:class:`graphaudit.numeric.compare.TransitionNumeric`, read by attribute: this module imports no runner); ``to_dict`` gives the ``numeric`` entries of the report schema (README "JSON report"), ``from_dict`` reads them
back. Figures keep the schema's spelling: finite floats, the strings ``"nan"``, ``"inf"``, ``"-inf"``
(:func:`graphaudit.jsonvalues.json_number`), or None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:  # the run's accumulators, read by attribute
    from .compare import RegionError, TensorError, TransitionNumeric

__all__ = ["Figure", "ErrorFigures", "TensorSummary", "RegionSummary", "TransitionSummary", "transition_summary",
           "StageMetric", "MetricSection", "least_top1"]

#: A metric as the report holds it: a float, ``"nan"``/``"inf"``/``"-inf"``, or None (not measured).
Figure = Union[float, str, None]


@dataclass(kw_only=True)
class ErrorFigures:
    """The error figures of a tensor pair over all samples (the schema's ``METRICS``; see :class:`ErrorStats`).

    Attributes
    ----------
    cosine : float or str
        Cosine similarity (1.0 when both tensors are all zero).
    sqnr_db : float or str
        SQNR in dB, ``"inf"`` for identical tensors.
    rel_l2, max_abs : float or str
        Relative L2 error and largest absolute error (units of the tensor).
    lsb_max, lsb_mean : float, str or None
        Error in steps of the test tensor's quantization scale; None when it has no scale.
    samples, elements : int
        Samples and elements compared.
    nonfinite : list of int
        ``[a, b]``: NaN/inf elements seen in the reference and in the test tensor.
    first_sample_cosine : float, str or None
        The first sample alone with hb_mapper's eps (:attr:`graphaudit.numeric.metrics.ErrorStats.first_sample_cosine`).
    """

    cosine: Figure = None
    sqnr_db: Figure = None
    rel_l2: Figure = None
    max_abs: Figure = None
    lsb_max: Figure = None
    lsb_mean: Figure = None
    samples: int = 0
    elements: int = 0
    nonfinite: list[int] = field(default_factory=lambda: [0, 0])
    first_sample_cosine: Figure = None

    def figures_dict(self) -> dict[str, Any]:
        """The figures in the schema's order (``cosine`` .. ``first_sample_cosine``)."""
        return {f.name: getattr(self, f.name) for f in fields(ErrorFigures)}

    @classmethod
    def _kwargs(cls, d: dict[str, Any]) -> dict[str, Any]:
        """The known keys of ``d``, type-checked (ValueError naming the key: a hand-edited report.json must fail
        here, in one line, not while a renderer draws it)."""
        if not isinstance(d, dict):
            raise ValueError(f"a tensor or region entry is a JSON object, not {type(d).__name__}")
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        for k, v in kw.items():
            _check_field(k, v)
        return kw


_FIGURES = {"cosine", "sqnr_db", "rel_l2", "max_abs", "lsb_max", "lsb_mean", "first_sample_cosine"}
_TEXTS = {"a_tensor", "b_tensor", "kind", "change", "a_node", "b_node", "source_node", "pattern", "a", "b"}
_COUNTS = {"samples", "elements", "order", "tensors_compared", "regions_measured", "regions_skipped"}
_TEXT_LISTS = {"a_nodes", "b_nodes", "source_nodes"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2 ** 63


def _check_field(key: str, v: Any) -> None:
    """ValueError when ``v`` is not what the schema puts under ``key`` (README "JSON report")."""
    if key in _FIGURES | {"min_cosine", "threshold", "sqnr_threshold"}:
        ok = v is None or v in ("nan", "inf", "-inf") or _is_int(v) or (
            isinstance(v, float) and not isinstance(v, bool))
    elif key in _TEXTS:
        ok = isinstance(v, str)
    elif key == "reference":
        ok = v is None or isinstance(v, str)
    elif key in _COUNTS:
        ok = _is_int(v)
    elif key in _TEXT_LISTS:
        ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
    elif key in ("nonfinite", "top1_agreement"):
        ok = (v is None and key == "top1_agreement") or (
            isinstance(v, list) and len(v) == 2 and all(_is_int(x) and x >= 0 for x in v))
    elif key == "outputs":  # a region's [a tensor, b tensor] per output
        ok = isinstance(v, list) and all(isinstance(o, list) and all(isinstance(x, str) for x in o) for o in v)
    else:
        ok = True
    if not ok:
        raise ValueError(f"{key!r} cannot be {_short(v)}")


def _short(v: Any) -> str:
    text = repr(v) if not isinstance(v, int) or abs(v) < 10 ** 30 else f"an integer of {len(str(abs(v)))} digits"
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(kw_only=True)
class TensorSummary(ErrorFigures):
    """Accumulated error of one aligned tensor pair (the schema's ``TENSOR``).

    Attributes
    ----------
    a_tensor, b_tensor : str
        The tensor in the reference stage (a) and in the test stage (b).
    kind : str
        How the tensors align (``exact``, ``quantized``, ``absorbed``, ``converted``).
    order : int
        Position of b's producer in b's topological order (-1: a graph input).
    change : str
        The change that produced b's tensor (``"kind: pattern"``), ``""`` for a kept node.
    top1_agreement : list of int or None
        ``[agreeing rows, rows]`` of argmax for class-score outputs ``[N, classes]`` (a Softmax's output, through
        ops that keep its values: :func:`graphaudit.numeric.tensorfacts.class_scores`); None (not written) otherwise,
        e.g. for MTCNN's box and landmark regressions.
    a_node, b_node : str
        1.6: the ONNX names of the nodes computing the tensors (b's: the compute node behind its fake quantization,
        the name the toolchain's config and log use); ``""`` for a graph input.
    source_node : str
        1.6: the ONNX name of the node of the pipeline's first stage (the user's source model with ``--source``)
        computing ``a_tensor``'s value, found through the chain of alignments; ``""`` when the value has no
        counterpart there (an inserted node's) or is a graph input there.
    """

    a_tensor: str
    b_tensor: str
    kind: str
    order: int
    change: str = ""
    top1_agreement: list[int] | None = None
    a_node: str = ""
    b_node: str = ""
    source_node: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``{"a_tensor", "b_tensor", "a_node", "b_node", "source_node", "kind", "order", "change", METRICS[,
        "top1_agreement"]}``."""
        d = {"a_tensor": self.a_tensor, "b_tensor": self.b_tensor, "a_node": self.a_node, "b_node": self.b_node,
             "source_node": self.source_node, "kind": self.kind, "order": self.order, "change": self.change, **self.figures_dict()}
        if self.top1_agreement is not None:
            d["top1_agreement"] = self.top1_agreement
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TensorSummary":
        """Inverse of :meth:`to_dict`."""
        return cls(**cls._kwargs(d))


@dataclass(kw_only=True)
class RegionSummary(ErrorFigures):
    """Isolated error of one change: the test stage's nodes of the change fed the reference stage's values
    (the schema's ``REGION``).

    Attributes
    ----------
    kind, pattern : str
        The change (:class:`graphaudit.classify.Change`).
    a_nodes, b_nodes : list of str
        Its node ids in both stages.
    outputs : list of list of str
        ``[a tensor, b tensor]`` per output of the change.
    source_nodes : list of str
        1.6: the ONNX names of the nodes of the pipeline's first stage computing the values of the change's outputs
        (their a tensors followed back through the lineage, as :attr:`TensorSummary.source_node`); empty when none.
    """

    kind: str
    pattern: str
    a_nodes: list[str] = field(default_factory=list)
    b_nodes: list[str] = field(default_factory=list)
    outputs: list[list[str]] = field(default_factory=list)
    source_nodes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``{"kind", "pattern", "a_nodes", "b_nodes", "source_nodes", "outputs", METRICS}``."""
        return {"kind": self.kind, "pattern": self.pattern, "a_nodes": self.a_nodes, "b_nodes": self.b_nodes,
                "source_nodes": self.source_nodes, "outputs": self.outputs, **self.figures_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RegionSummary":
        """Inverse of :meth:`to_dict`."""
        return cls(**cls._kwargs(d))


def _opt(x: TensorSummary | None) -> dict[str, Any] | None:
    return x.to_dict() if x is not None else None


@dataclass
class TransitionSummary:
    """Numeric comparison of one stage pair, as the report keeps it (an entry of ``AuditReport.numeric``).

    Truthy when the pair passes: no tensor diverged (``first_divergence`` is None), as Polygraphy's comparison
    results are truthy when they pass. Use ``is not None`` to test for presence.

    Attributes
    ----------
    a, b : str
        Stage names (reference, test).
    threshold : float
        Cosine similarity below which a tensor diverged.
    sqnr_threshold : float or None
        dB; also a divergence between stages documented as numerically equal, else None.
    tensors_compared : int
    min_cosine : float, str or None
        Lowest cosine over the compared tensors (``worst_tensor``'s).
    worst_tensor, first_divergence : TensorSummary or None
    outputs : list of TensorSummary
        The graph outputs.
    worst_regions : list of RegionSummary
        The changes with the lowest isolated SQNR (10 by default).
    regions : list of RegionSummary
        Every change measured on its own.
    regions_measured, regions_skipped : int
    tensors : list of TensorSummary
        Every compared tensor, in b's topological order.
    reference : str or None
        1.6: the first stage of the comparison (the reference stage of the pipeline), None when not measured.
    inner_divergence : list of str
        1.9: between stages documented as numerically equal, the b tensors below the thresholds whose error ends
        at the linear op reading them (it agrees to float rounding: a scale folded forward into its weights), in
        b's order: pairs that do not hold the same quantity, not a first divergence
        (:func:`graphaudit.numeric.divergence.set_divergence`).
    vs_reference : list of TensorSummary
        1.6: b's graph outputs against ``reference``'s outputs they descend from (followed through the output
        pairs of the transitions in between): the accumulated agreement of stage b with the reference stage, as the
        user measures it end to end. For the first transition the same figures as ``outputs``.
    """

    a: str
    b: str
    threshold: float
    sqnr_threshold: float | None = None
    tensors_compared: int = 0
    min_cosine: Figure = None
    worst_tensor: TensorSummary | None = None
    first_divergence: TensorSummary | None = None
    outputs: list[TensorSummary] = field(default_factory=list)
    worst_regions: list[RegionSummary] = field(default_factory=list)
    regions: list[RegionSummary] = field(default_factory=list)
    regions_measured: int = 0
    regions_skipped: int = 0
    tensors: list[TensorSummary] = field(default_factory=list)
    reference: str | None = None
    vs_reference: list[TensorSummary] = field(default_factory=list)
    inner_divergence: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.first_divergence is None

    @property
    def passed(self) -> bool:
        """No tensor diverged (same as ``bool(self)``)."""
        return self.first_divergence is None

    def to_dict(self) -> dict[str, Any]:
        """The report's ``numeric`` entry (README "JSON report", schema 1.9), keys in the schema's order."""
        return {"a": self.a, "b": self.b, "threshold": self.threshold, "sqnr_threshold": self.sqnr_threshold,
                "tensors_compared": self.tensors_compared, "min_cosine": self.min_cosine,
                "worst_tensor": _opt(self.worst_tensor), "first_divergence": _opt(self.first_divergence),
                "outputs": [t.to_dict() for t in self.outputs],
                "worst_regions": [r.to_dict() for r in self.worst_regions],
                "regions": [r.to_dict() for r in self.regions],
                "regions_measured": self.regions_measured, "regions_skipped": self.regions_skipped,
                "tensors": [t.to_dict() for t in self.tensors],
                "reference": self.reference, "vs_reference": [t.to_dict() for t in self.vs_reference],
                "inner_divergence": list(self.inner_divergence)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TransitionSummary":
        """Inverse of :meth:`to_dict`; reports of schema < 1.3 have no ``regions`` (read as empty)."""

        def tensor(x: dict | None) -> TensorSummary | None:
            return TensorSummary.from_dict(x) if x is not None else None

        if not isinstance(d, dict):
            raise ValueError(f"a numeric entry is a JSON object, not {type(d).__name__}")
        for k in ("a", "b", "threshold", "sqnr_threshold", "tensors_compared", "min_cosine", "regions_measured",
                  "regions_skipped", "reference"):
            if k in d:
                _check_field(k, d[k])
        for k in ("outputs", "worst_regions", "regions", "tensors", "vs_reference", "inner_divergence"):
            if not isinstance(d.get(k, []), list):
                raise ValueError(f"{k!r} cannot be {_short(d[k])}")
        return cls(a=d["a"], b=d["b"], threshold=d["threshold"], sqnr_threshold=d.get("sqnr_threshold"),
                   tensors_compared=d.get("tensors_compared", 0), min_cosine=d.get("min_cosine"),
                   worst_tensor=tensor(d.get("worst_tensor")), first_divergence=tensor(d.get("first_divergence")),
                   outputs=[TensorSummary.from_dict(t) for t in d.get("outputs", [])],
                   worst_regions=[RegionSummary.from_dict(r) for r in d.get("worst_regions", [])],
                   regions=[RegionSummary.from_dict(r) for r in d.get("regions", [])],
                   regions_measured=d.get("regions_measured", 0), regions_skipped=d.get("regions_skipped", 0),
                   tensors=[TensorSummary.from_dict(t) for t in d.get("tensors", [])],
                   reference=d.get("reference"),
                   vs_reference=[TensorSummary.from_dict(t) for t in d.get("vs_reference", [])],
                   inner_divergence=[str(x) for x in d.get("inner_divergence", [])])


def _tensor_summary(te: TensorError) -> TensorSummary:
    return TensorSummary(a_tensor=te.a_tensor, b_tensor=te.b_tensor, kind=te.kind, order=te.order, change=te.change,
                         a_node=te.a_node, b_node=te.b_node, source_node=te.source_node,
                         top1_agreement=[te.top1[0], te.top1[1]] if te.top1[1] else None, **te.stats.to_dict())


def _region_summary(r: RegionError) -> RegionSummary:
    return RegionSummary(kind=r.change.kind, pattern=r.change.pattern, a_nodes=r.change.a_nodes,
                         b_nodes=r.change.b_nodes, source_nodes=r.source_nodes, outputs=[list(o) for o in r.outputs], **r.stats.to_dict())


def least_top1(outputs: list["TensorSummary"]) -> tuple[str, list[int]] | None:
    """``(b_tensor, [agreeing rows, rows])`` of the class-score output whose top-1 agrees least (the only one when one
    carries top-1), or None when no output does. Summary lines that show the worst output's cosine and SQNR name
    this output beside its top-1 when there are several outputs: the worst output may be a regression (MTCNN ONet's
    ``dense_5`` box [1, 4]) that has no top-1."""
    top = [(o.b_tensor, o.top1_agreement) for o in outputs if o.top1_agreement]
    return min(top, key=lambda x: x[1][0] / max(x[1][1], 1)) if top else None


def transition_summary(res: TransitionNumeric, worst: int = 10) -> TransitionSummary:
    """What the report keeps of one transition's numeric comparison (an entry of ``AuditReport.numeric``):
    ``worst_regions`` the ``worst`` changes by isolated SQNR, ``regions`` every measured change, ``tensors``
    every compared tensor."""
    compared = [t for t in res.tensors if t.stats.samples]
    worst_t = min(compared, key=lambda t: (not math.isnan(t.stats.cosine), t.stats.cosine), default=None)
    return TransitionSummary(
        a=res.a, b=res.b, threshold=res.threshold, sqnr_threshold=res.sqnr_threshold,
        tensors_compared=len(compared),
        min_cosine=worst_t.stats.to_dict()["cosine"] if worst_t else None,
        worst_tensor=_tensor_summary(worst_t) if worst_t else None,
        first_divergence=_tensor_summary(res.first_divergence) if res.first_divergence else None,
        outputs=[_tensor_summary(t) for t in res.outputs()],
        worst_regions=[_region_summary(r) for r in res.worst_regions(worst)],
        regions=[_region_summary(r) for r in res.regions if r.stats.samples],
        regions_measured=len(res.regions), regions_skipped=res.skipped_regions,
        tensors=[_tensor_summary(t) for t in res.tensors if t.stats.samples],
        reference=res.reference or None,
        vs_reference=[_tensor_summary(t) for t in (res.outputs() if res.a == res.reference else res.vs_reference)
                      if t.stats.samples],
        inner_divergence=[t.b_tensor for t in res.inner_divergence])


@dataclass(kw_only=True)
class StageMetric:
    """The user's metric on one stage (``--eval``; an entry of the report's ``metric.stages``, schema 1.7).

    Attributes
    ----------
    stage : str
        Stage name.
    runtime : str or None
        The runtime that measured it, with its version; None when not run.
    values : dict of str to float or str
        What the hook returned (a number alone under its ``metric_name``, default ``"metric"``); non-finite
        values as ``"nan"``/``"inf"``/``"-inf"``. Empty when not run or the hook failed.
    samples : int
        Samples the hook ran through the stage (calls of the runner).
    seconds : float
        Wall time of the hook on this stage.
    error : str or None
        The hook raised (or returned something else than numbers): the exception's type and first line (finding
        N405). None otherwise.
    not_run : str or None
        Why the stage was not evaluated (the runtime cannot run it), else None.
    left_out : list of str
        1.8: sample files a per-sample hook was not given the values of because they hold NaN or infinite values
        (the runner refuses them, as the numeric comparison leaves them out; finding P209): the values are the means
        over the other samples.
    """

    stage: str
    runtime: str | None = None
    values: dict[str, Figure] = field(default_factory=dict)
    samples: int = 0
    seconds: float = 0.0
    error: str | None = None
    not_run: str | None = None
    left_out: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``{"stage", "runtime", "values", "samples", "seconds", "error", "not_run", "left_out"}``."""
        return {"stage": self.stage, "runtime": self.runtime, "values": dict(self.values), "samples": self.samples,
                "seconds": self.seconds, "error": self.error, "not_run": self.not_run, "left_out": list(self.left_out)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StageMetric":
        """Inverse of :meth:`to_dict` (ValueError naming a key of the wrong type)."""
        if not isinstance(d, dict) or not isinstance(d.get("stage"), str):
            raise ValueError("a metric stage entry is a JSON object with a 'stage' string")
        for k in ("runtime", "error", "not_run"):
            if d.get(k) is not None and not isinstance(d[k], str):
                raise ValueError(f"metric {k!r} cannot be {_short(d[k])}")
        vals = d.get("values", {})
        if not isinstance(vals, dict) or not all(isinstance(k, str) for k in vals):
            raise ValueError(f"metric 'values' cannot be {_short(vals)}")
        for v in vals.values():
            _check_field("cosine", v)  # a figure: a number, "nan"/"inf"/"-inf" or null
        if not _is_int(d.get("samples", 0)):
            raise ValueError(f"metric 'samples' cannot be {_short(d.get('samples'))}")
        sec = d.get("seconds", 0.0)
        if isinstance(sec, bool) or not isinstance(sec, (int, float)):
            raise ValueError(f"metric 'seconds' cannot be {_short(sec)}")
        left = d.get("left_out", [])
        if not isinstance(left, list) or not all(isinstance(x, str) for x in left):
            raise ValueError(f"metric 'left_out' cannot be {_short(left)}")
        return cls(stage=d["stage"], runtime=d.get("runtime"), values=dict(vals), samples=d.get("samples", 0),
                   seconds=float(sec), error=d.get("error"), not_run=d.get("not_run"), left_out=list(left))


@dataclass
class MetricSection:
    """The user's metric on every stage (the report's ``metric``, schema 1.7).

    Attributes
    ----------
    hook : str
        The ``--eval`` spec.
    samples : str or None
        The ``--eval-samples`` path given to the hook.
    lower_is_better : list of str
        Value names that are better when lower (the rest: higher is better).
    stages : list of StageMetric
        One per stage, in pipeline order.
    """

    hook: str
    samples: str | None = None
    lower_is_better: list[str] = field(default_factory=list)
    stages: list[StageMetric] = field(default_factory=list)

    def names(self) -> list[str]:
        """Every value name, in first-seen order."""
        return list(dict.fromkeys(k for s in self.stages for k in s.values))

    def changes(self, name: str) -> list[tuple[str, str, float | None]]:
        """Per consecutive pair of stages that both have ``name``: ``(a, b, change)``, where ``change`` is
        ``b - a`` signed so that a negative number is a loss (``a - b`` for a lower-is-better value); None when
        either value is not finite."""
        have = [(s.stage, s.values[name]) for s in self.stages if name in s.values]
        sign = -1.0 if name in self.lower_is_better else 1.0
        out = []
        for (a, va), (b, vb) in zip(have, have[1:]):
            ok = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (va, vb))
            out.append((a, b, sign * (vb - va) if ok else None))
        return out

    def to_dict(self) -> dict[str, Any]:
        """``{"hook", "samples", "lower_is_better", "stages": [StageMetric]}``."""
        return {"hook": self.hook, "samples": self.samples, "lower_is_better": list(self.lower_is_better),
                "stages": [s.to_dict() for s in self.stages]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MetricSection":
        """Inverse of :meth:`to_dict` (ValueError naming a key of the wrong type)."""
        if not isinstance(d, dict) or not isinstance(d.get("hook"), str):
            raise ValueError("the metric section is a JSON object with a 'hook' string")
        if d.get("samples") is not None and not isinstance(d["samples"], str):
            raise ValueError(f"metric 'samples' cannot be {_short(d['samples'])}")
        lib = d.get("lower_is_better", [])
        if not isinstance(lib, list) or not all(isinstance(x, str) for x in lib):
            raise ValueError(f"metric 'lower_is_better' cannot be {_short(lib)}")
        st = d.get("stages", [])
        if not isinstance(st, list):
            raise ValueError(f"metric 'stages' cannot be {_short(st)}")
        return cls(hook=d["hook"], samples=d.get("samples"), lower_is_better=list(lib),
                   stages=[StageMetric.from_dict(s) for s in st])
