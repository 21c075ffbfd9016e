"""The typed report: ``AuditReport.from_dict(r.to_dict()) == r`` on real pipeline reports, and the JSON layout written
is the one README documents and, without the fields schema 1.6 added, the one written before the report was typed
(tests/data/report_layout_1.5.json)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from graphaudit.config import load_config
from graphaudit.jsonvalues import json_safe
from graphaudit.numeric.summary import TensorSummary, TransitionSummary
from graphaudit.report import SCHEMA_VERSION, AuditReport, ChangeRecord, RunInfo
from graphaudit.toolchains.section import ToolchainSection
from graphaudit.measure import NumericOptions
from graphaudit.pipeline import audit

from .test_hblog import ROWS, _cls_format_log

sys.path.insert(0, str(Path(__file__).resolve().parent))
import horizon_check as hc  # noqa: E402

#: The key layout of the report as the old (untyped) writer wrote it, taken from its output before the report was
#: typed: the bundled Horizon sample with its config, --random 2 and a toolchain log, and without any of them.
GOLDEN = Path(__file__).resolve().parent / "data" / "report_layout_1.5.json"

# Keys in the order README's "JSON report (schema 1.9)" section lists them, written out by hand.
TOP = ["schema_version", "tool", "title", "verdict", "stages", "transitions", "findings", "numeric", "toolchain", "run",
       "metric"]
TOOL = ["name", "version"]
STAGE = ["name", "role", "path", "ir_version", "opsets", "producer", "nodes", "op_histogram", "custom_ops", "inputs",
         "outputs"]
IO = ["name", "dtype", "shape"]
TRANSITION = ["a", "b", "coverage", "counts", "patterns", "op_delta", "changes", "opset_delta"]
COVERAGE = ["a_nodes", "a_accounted", "a_ratio", "b_nodes", "b_accounted", "b_ratio"]
COUNTS = ["fused", "replaced", "modified", "inserted", "removed", "unmatched", "kept"]
CHANGE = ["kind", "pattern", "confidence", "evidence", "a_nodes", "b_nodes", "a_ops", "b_ops", "tensors"]
FINDING = ["code", "severity", "title", "message", "stage", "location", "evidence", "fix"]
NUMERIC = ["a", "b", "threshold", "sqnr_threshold", "tensors_compared", "min_cosine", "worst_tensor",
           "first_divergence", "outputs", "worst_regions", "regions", "regions_measured", "regions_skipped", "tensors",
           "reference", "vs_reference", "inner_divergence"]
METRICS = ["cosine", "sqnr_db", "rel_l2", "max_abs", "lsb_max", "lsb_mean", "samples", "elements", "nonfinite",
           "first_sample_cosine"]
VERDICT = ["cause", "scope", "text", "evidence", "action", "stage", "nodes", "codes", "sqnr_db"]
TENSOR = ["a_tensor", "b_tensor", "a_node", "b_node", "source_node", "kind", "order", "change", *METRICS]
REGION = ["kind", "pattern", "a_nodes", "b_nodes", "source_nodes", "outputs", *METRICS]
RUN = ["config", "config_family", "data", "random", "log", "numeric_skipped", "numeric_not_run", "runtime", "runtimes",
       "data_from_config", "samples_used", "log_skipped"]
#: The run section when nothing was measured: no runtime keys.
RUN_UNMEASURED = [k for k in RUN if k not in ("runtime", "runtimes")]
TOOLCHAIN = ["source", "tool", "toolchain_version", "horizon_nn_version", "hbdk_version", "config_line", "stage",
             "compared", "nodes_total", "nodes_mapped", "nodes", "outputs", "warnings"]
TC_NODE = ["node", "truncated", "line", "node_id", "on", "subgraph", "type", "cosine", "threshold", "dtype", "extra",
           "graphaudit_cosine", "graphaudit_tensor", "graphaudit_first_sample_cosine", "graphaudit_note"]
TC_OUTPUT = ["output", "line", "tensor", "cosine", "l1", "l2", "chebyshev", "extra", "graphaudit_cosine",
             "graphaudit_first_sample_cosine"]

#: Maps keyed by data (ops, domains, patterns, rule evidence, log columns, stage names), not by the schema.
OPAQUE = {"opsets", "op_histogram", "custom_ops", "patterns", "op_delta", "opset_delta", "location", "evidence",
          "extra", "runtimes"}


def layout(x, key: str | None = None):
    """The key layout of a report dict: objects as ``{key: layout}`` in written order, lists as ``[the layouts of
    their items merged]``, data-keyed maps as ``"map"``, scalars as None."""
    if isinstance(x, dict):
        return "map" if key in OPAQUE else {k: layout(v, k) for k, v in x.items()}
    if isinstance(x, list):
        merged = None
        for item in x:
            merged = _merge(merged, layout(item, key))
        return [] if merged is None else [merged]
    return None


def _merge(a, b):
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = _merge(out[k], v) if k in out else v
        return out
    if isinstance(a, list) and isinstance(b, list):
        return [_merge(a[0] if a else None, b[0] if b else None)] if a or b else []
    return a


def _json(d: dict) -> dict:
    """``d`` as written to report.json and read back."""
    return json.loads(json.dumps(json_safe(d), allow_nan=False))


@pytest.fixture(scope="module")
def horizon_reports(samples, tmp_path_factory):
    """The bundled Horizon sample explained with its config, 2 random samples and a toolchain log; and bare."""
    hz = samples / "horizon" / "rapid_orientation"
    log = tmp_path_factory.mktemp("log") / "hb_mapper_makertbin.log"
    log.write_text(_cls_format_log(ROWS))
    full = audit([hz], config=load_config(hz / "config.yaml"), log=log, numeric=NumericOptions(random=2)).report
    bare = audit([hz]).report
    return full, bare


def test_sections_are_typed(horizon_reports):
    full, bare = horizon_reports
    assert all(isinstance(c, ChangeRecord) for t in full.transitions for c in t.changes)
    assert all(isinstance(n, TransitionSummary) for n in full.numeric)
    assert all(isinstance(t, TensorSummary) for n in full.numeric for t in n.tensors + n.outputs)
    assert isinstance(full.toolchain, ToolchainSection) and isinstance(full.run, RunInfo)
    assert full.run.random == 2 and full.run.config.endswith("config.yaml") and full.run.runtime == "onnxruntime"
    assert bare.numeric is None and bare.toolchain is None and bare.run.runtime is None
    # a summary is truthy when the pair passes: no tensor below the threshold
    def diverged(t: TensorSummary, n: TransitionSummary) -> bool:
        return float(t.cosine) < n.threshold or (n.sqnr_threshold is not None
                                                  and float(t.sqnr_db) < n.sqnr_threshold)

    for n in full.numeric:
        assert bool(n) == (n.first_divergence is None) == n.passed
        assert bool(n) == (not any(diverged(t, n) for t in n.tensors))
    assert any(n for n in full.numeric) and not all(n for n in full.numeric)  # original -> optimized passes


def test_round_trip(horizon_reports):
    for rep in horizon_reports:
        d = rep.to_dict()
        assert AuditReport.from_dict(d) == rep
        written = _json(d)  # through the file: the same JSON comes back
        assert _json(AuditReport.from_dict(written).to_dict()) == written


def test_layout_is_readme_schema(horizon_reports):
    full, bare = (r.to_dict() for r in horizon_reports)
    assert full["schema_version"] == SCHEMA_VERSION == "1.9"
    assert list(full) == list(bare) == TOP and list(full["tool"]) == TOOL
    assert full["verdict"] and bare["verdict"] and all(list(v) == VERDICT for v in full["verdict"] + bare["verdict"])
    st = full["stages"][0]
    assert list(st) == STAGE and list(st["inputs"][0]) == list(st["outputs"][0]) == IO
    for tr in full["transitions"]:
        assert list(tr) == TRANSITION and list(tr["coverage"]) == COVERAGE and list(tr["counts"]) == COUNTS
        assert all(list(c) == CHANGE for c in tr["changes"])
    assert all(list(f) == FINDING for f in full["findings"])
    for n in full["numeric"]:
        assert list(n) == NUMERIC
        for t in n["tensors"] + n["outputs"] + n["vs_reference"] + [x for x in (n["worst_tensor"],
                                                                               n["first_divergence"]) if x]:
            assert list(t) in (TENSOR, TENSOR + ["top1_agreement"])
        assert all(list(r) == REGION for r in n["regions"] + n["worst_regions"])
    assert any("top1_agreement" in o for n in full["numeric"] for o in n["outputs"])
    assert list(full["run"]) == RUN
    assert list(bare["run"]) == RUN_UNMEASURED  # nothing measured: no runtime keys
    tc = full["toolchain"]
    assert list(tc) == TOOLCHAIN
    assert all(list(x) == TC_NODE for x in tc["nodes"]) and all(list(x) == TC_OUTPUT for x in tc["outputs"])
    assert bare["numeric"] is None and bare["toolchain"] is None


#: Keys added after the untyped writer (schema 1.6, 1.7, 1.8, 1.9): without them the layout is the golden 1.5 one (minor
#: versions only add fields).
ADDED_SINCE_1_5 = {"verdict", "a_node", "b_node", "source_node", "source_nodes", "data_from_config", "samples_used",
                   "reference", "vs_reference", "metric", "log_skipped", "inner_divergence"}


def _without(x, keys: set[str]):
    if isinstance(x, dict):
        return {k: _without(v, keys) for k, v in x.items() if k not in keys}
    if isinstance(x, list):
        return [_without(v, keys) for v in x]
    return x


def test_layout_is_what_the_untyped_writer_wrote(horizon_reports):
    golden = json.loads(GOLDEN.read_text())
    full, bare = (_without(_json(r.to_dict()), ADDED_SINCE_1_5) for r in horizon_reports)
    # compared as text: key order matters
    assert json.dumps(layout(full)) == json.dumps(golden["measured_with_config_and_log"])
    assert json.dumps(layout(bare)) == json.dumps(golden["structure_only"])


SETS = hc.built_sets()


@pytest.mark.skipif(not SETS, reason="no real Horizon stage set in samples/build/hb (set-up builds them)")
@pytest.mark.parametrize("set_dir", SETS, ids=[p.name for p in SETS])
def test_round_trip_of_real_horizon_sets(set_dir):
    """A real hb_mapper set: its config, its own log found beside the stages, one random sample."""
    cfg = load_config(set_dir / "config.yaml")
    rep = audit([set_dir], config=cfg, find_log=True, numeric=NumericOptions(random=1, isolated=False)).report
    assert rep.numeric and rep.toolchain is not None and rep.toolchain.nodes_mapped > 0
    assert rep.run.numeric_not_run  # the fixed-point stage: not run by stock onnxruntime
    d = rep.to_dict()
    assert AuditReport.from_dict(d) == rep
    assert _json(AuditReport.from_dict(_json(d)).to_dict()) == _json(d)
    assert list(d) == TOP and list(d["run"]) == RUN and list(d["toolchain"]) == TOOLCHAIN
    assert all(list(n) == NUMERIC for n in d["numeric"])
