"""AuditReport: the result of `explain`/`diff` as data, with a versioned JSON schema."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .classify import CHANGE_KINDS, Change, Coverage
from .findings import Finding
from .stage import StageGraph
from .toolchains.ops import HORIZON_DOMAIN

__all__ = ["SCHEMA_VERSION", "AuditReport", "StageSummary", "Transition", "summarize_stage", "make_transition"]

#: Version of the JSON layout written by :meth:`AuditReport.to_dict` (documented in README.md).
SCHEMA_VERSION = "1.5"


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


@dataclass
class Transition:
    """Changes between two consecutive stages."""

    a: str
    b: str
    coverage: dict[str, Any]
    counts: dict[str, int]
    patterns: dict[str, dict[str, int]]
    op_delta: dict[str, int]
    changes: list[dict[str, Any]] = field(default_factory=list)
    opset_delta: dict[str, list] = field(default_factory=dict)


def _change_dict(c: Change, a: StageGraph, b: StageGraph) -> dict[str, Any]:
    return {"kind": c.kind, "pattern": c.pattern, "confidence": round(c.confidence, 3), "evidence": c.evidence,
            "a_nodes": c.a_nodes, "b_nodes": c.b_nodes,
            "a_ops": [a.nodes[n].op_type for n in c.a_nodes], "b_ops": [b.nodes[n].op_type for n in c.b_nodes],
            "tensors": c.tensors}


def make_transition(a: StageGraph, b: StageGraph, changes: list[Change], cov: Coverage) -> Transition:
    """Transition record: coverage, counts by kind, pattern histogram per kind, op histogram delta."""
    counts = Counter(c.kind for c in changes)
    patterns: dict[str, Counter] = {k: Counter() for k in CHANGE_KINDS}
    for c in changes:
        patterns[c.kind][c.pattern] += 1
    ha, hb = a.op_histogram(), b.op_histogram()
    delta = {op: hb.get(op, 0) - ha.get(op, 0) for op in sorted(set(ha) | set(hb)) if hb.get(op, 0) != ha.get(op, 0)}
    order = {k: i for i, k in enumerate(CHANGE_KINDS)}
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
        changes=[_change_dict(c, a, b) for c in sorted(changes, key=lambda c: order[c.kind])])


@dataclass
class AuditReport:
    """Everything `graphaudit explain` found, as data.

    ``to_dict()`` gives the JSON layout of :data:`SCHEMA_VERSION`; ``from_dict()`` reads it back.
    """

    stages: list[StageSummary]
    transitions: list[Transition]
    findings: list[Finding]
    title: str = ""
    tool_version: str = ""
    numeric: list[dict[str, Any]] | None = None
    #: 1.2: the toolchain's own per-node similarity (hb_mapper/hb_compile log or quant_info.json) mapped
    #: onto the stages, see :func:`graphaudit.toolchain_log.toolchain_section`; None when no log was read.
    toolchain: dict[str, Any] | None = None
    #: 1.3: what the run was given: ``{"config", "config_family", "data", "random", "log"}`` (None when not given).
    run: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``{"schema_version", "tool", "title", "stages", "transitions", "findings"}``."""
        return {"schema_version": SCHEMA_VERSION, "tool": {"name": "graphaudit", "version": self.tool_version},
                "title": self.title,
                "stages": [vars(s) for s in self.stages],
                "transitions": [vars(t) for t in self.transitions],
                "findings": [f.to_dict() for f in self.findings],
                "numeric": self.numeric, "toolchain": self.toolchain, "run": self.run}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AuditReport":
        """Rebuild a report from :meth:`to_dict` output; ValueError on another schema major version."""
        if str(d.get("schema_version", "")).split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(f"unsupported report schema {d.get('schema_version')!r}")
        return cls(stages=[StageSummary(**s) for s in d["stages"]],
                   transitions=[Transition(**t) for t in d["transitions"]],
                   findings=[Finding.from_dict(f) for f in d["findings"]],
                   title=d.get("title", ""), tool_version=d.get("tool", {}).get("version", ""),
                   numeric=d.get("numeric"), toolchain=d.get("toolchain"), run=d.get("run"))
