"""Model Explorer export: the files load with ai-edge-model-explorer's own data classes and match the models."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import dacite
import onnx
import pytest
from model_explorer import graph_builder, node_data_builder

from graphaudit.pipeline import audit
from graphaudit.measure import NumericOptions
from graphaudit.render.model_explorer import CHANGE_LABELS, KIND_COLORS, write_model_explorer

STRICT = dacite.Config(strict=True)  # unknown keys are errors too
#: Change overlays hold labels: node_data_builder types ``value`` as a number (its web app takes any value, see
#: graphaudit/render/model_explorer.py), so their keys are checked strictly and their values below.
STRICT_KEYS = dacite.Config(strict=True, check_types=False)


@pytest.fixture(scope="module")
def exported(samples, tmp_path_factory):
    hz = samples / "horizon" / "rapid_orientation"
    au = audit([hz], title="rapid_orientation", data=hz / "calibration_data", numeric=NumericOptions(max_samples=2))
    d = tmp_path_factory.mktemp("me")
    files = write_model_explorer(au, d)
    return hz, au, d, files


def _graph(path: Path) -> graph_builder.GraphCollection:
    return dacite.from_dict(graph_builder.GraphCollection, json.loads(path.read_text()), config=STRICT)


def test_stage_graphs_load_as_model_explorer_graph_collections(exported):
    hz, au, d, _files = exported
    for i, role in enumerate(("original", "optimized", "calibrated", "ptq")):
        onnx_path = next(hz.glob(f"*_{role}*model.onnx"))
        m = onnx.load(str(onnx_path), load_external_data=False)
        gc = _graph(d / f"{i}_{role}.json")
        assert gc.label == onnx_path.name and len(gc.graphs) == 1
        g = gc.graphs[0]
        assert g.id == role
        # one node per ONNX node (these models have no subgraphs) plus one per graph input and output
        inputs = [v.name for v in m.graph.input if v.name not in {t.name for t in m.graph.initializer}]
        assert len(g.nodes) == len(m.graph.node) + len(inputs) + len(m.graph.output)
        assert Counter(n.label for n in g.nodes if n.label not in ("Input", "Output")) == \
            Counter(n.op_type for n in m.graph.node)
        ids = {n.id for n in g.nodes}
        assert len(ids) == len(g.nodes)
        # every edge points at an existing node and output; edges = node inputs produced by a node or a graph input
        outputs_of = {n.id: {m2.id for m2 in n.outputsMetadata} for n in g.nodes}
        produced = {o for n in m.graph.node for o in n.output} | set(inputs)
        expected_edges = sum(1 for n in m.graph.node for t in n.input if t in produced) + len(m.graph.output)
        assert sum(len(n.incomingEdges) for n in g.nodes) == expected_edges
        for n in g.nodes:
            for e in n.incomingEdges:
                assert e.sourceNodeId in ids and e.sourceNodeOutputId in outputs_of[e.sourceNodeId]


def test_overlays_load_as_model_explorer_node_data(exported):
    hz, au, d, _files = exported
    graphs = {g.id: {n.id for n in g.nodes} for p in sorted(d.glob("[0-9]_*.json")) for g in _graph(p).graphs}
    overlays = sorted(d.glob("changes_*.json")) + sorted(d.glob("cosine_*.json")) + sorted(d.glob("sqnr_*.json"))
    assert len(overlays) == 3 + 3 * 2 + 3  # changes, cosine+SQNR accumulated per pair, SQNR isolated per pair
    for p in overlays:
        raw = json.loads(p.read_text())
        labels = p.name.startswith("changes_")
        model = node_data_builder.ModelNodeData(graphsData={
            gid: dacite.from_dict(node_data_builder.GraphNodeData, gd, config=STRICT_KEYS if labels else STRICT)
            for gid, gd in raw.items()})
        assert _within(raw, json.loads(model.to_json_string()))  # their writer keeps every field and value of ours
        for gid, gd in model.graphsData.items():
            assert gid in graphs and gd.results and set(gd.results) <= graphs[gid]
            values = [r.value for r in gd.results.values()]
            if labels:  # a change kind is a label and a colour, never a number the stats panel would sum
                assert all(isinstance(v, str) and v in CHANGE_LABELS for v in values)
                assert all(r.bgColor == KIND_COLORS[r.value] for r in gd.results.values())
                assert gd.hideInAggregatedStatsTable and gd.showExpandedSummaryOnGroupNode
            else:  # measured quantities are numbers
                assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
                assert not gd.hideInAggregatedStatsTable and gd.gradient

    # change kinds of original -> optimized, against the ONNX files: each BatchNormalization of the original
    # is fused into its Conv; the optimized stage has one fused Conv per BatchNormalization
    orig = onnx.load(str(next(hz.glob("*_original_float_model.onnx"))), load_external_data=False)
    n_bn = sum(n.op_type == "BatchNormalization" for n in orig.graph.node)
    n_hardswish = sum(n.op_type == "HardSwish" for n in orig.graph.node)
    ch = json.loads((d / "changes_0_original__1_optimized.json").read_text())
    opt_values = Counter(r["value"] for r in ch["optimized"]["results"].values())
    assert n_bn == 27 and opt_values["fused"] == n_bn
    assert opt_values["replaced"] == n_hardswish == 28
    orig_values = Counter(r["value"] for r in ch["original"]["results"].values())
    assert orig_values["fused"] == 2 * n_bn  # Conv and BatchNormalization on the a side

    # error overlay: the lowest cosine on the calibrated graph is the report's lowest cosine of that transition
    num = next(n for n in au.report.numeric if n.b == "calibrated")
    cos = json.loads((d / "cosine_accumulated_1_optimized__2_calibrated.json").read_text())["calibrated"]["results"]
    assert min(r["value"] for r in cos.values()) == pytest.approx(num.min_cosine)
    worst = num.worst_tensor.b_tensor
    producer = next(n for n in onnx.load(str(next(hz.glob("*_calibrated_model.onnx"))),
                                         load_external_data=False).graph.node if worst in n.output)
    assert cos[producer.name]["value"] == pytest.approx(num.min_cosine)


def _within(ours, theirs) -> bool:
    """Every key and value of ``ours`` is in ``theirs`` (which may add fields at their default values)."""
    if isinstance(ours, dict):
        return isinstance(theirs, dict) and all(k in theirs and _within(v, theirs[k]) for k, v in ours.items())
    if isinstance(ours, list):
        return isinstance(theirs, list) and len(ours) == len(theirs) and all(map(_within, ours, theirs))
    return ours == theirs and type(ours) is type(theirs)


def _model_explorer_bundle() -> str:
    import model_explorer

    web = Path(model_explorer.__file__).parent / "web_app"
    return "".join(p.read_text(errors="replace") for p in web.glob("main-*.js"))


def test_node_mapping_uses_model_explorer_sync_navigation_fields(exported):
    hz, au, d, _files = exported
    bundle = _model_explorer_bundle()
    # the web app's sync-navigation loader reads exactly these fields from an uploaded mapping file, and the node
    # data fields the change overlays set
    for field in ("mappingEntries", "leftNodeIds", "rightNodeIds", "showDiffHighlights", "hideInAggregatedStatsTable",
                  "showExpandedSummaryOnGroupNode"):
        assert field in bundle
    graphs = {g.id: {n.id for n in g.nodes} for p in sorted(d.glob("[0-9]_*.json")) for g in _graph(p).graphs}
    m = json.loads((d / "mapping_0_original__1_optimized.json").read_text())
    assert set(m) == {"mappingEntries", "showDiffHighlights"}
    for e in m["mappingEntries"]:
        assert set(e) == {"leftNodeIds", "rightNodeIds"} and e["leftNodeIds"] and e["rightNodeIds"]
        assert set(e["leftNodeIds"]) <= graphs["original"] and set(e["rightNodeIds"]) <= graphs["optimized"]
    # 27 Conv+BatchNormalization -> Conv entries (2 nodes on the left, 1 on the right), by the ONNX file
    fused = [e for e in m["mappingEntries"] if len(e["leftNodeIds"]) == 2 and len(e["rightNodeIds"]) == 1]
    assert len(fused) == 27
    # the input x and the output fetch_name_0 map to each other
    assert {"leftNodeIds": ["input:x"], "rightNodeIds": ["input:x"]} in m["mappingEntries"]
    assert {"leftNodeIds": ["output:fetch_name_0"], "rightNodeIds": ["output:fetch_name_0"]} in m["mappingEntries"]
    readme = (d / "README.txt").read_text()
    assert "model-explorer 0_original.json 1_optimized.json" in readme
