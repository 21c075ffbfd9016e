"""`graphaudit lower` proves what it writes: the lowered model must load and run in stock onnxruntime (and agree with
Horizon's runtime where that is present, tests/horizon_runtime/test_lower_cli.py); a planted fault in the lowering
makes the run exit 2 with one line naming the node, and writes no file."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from graphaudit.cli import main
from graphaudit.numeric.lower import core

from .conftest import save_text

PRE = """
<ir_version: 8, opset_import: ["" : 13, "horizon" : 1]>
g (float[1,3,8,8] x) => (float[1,3,8,8] y)
<float[3] w = {0.0078125, 0.0078125, 0.0078125}, float[3] b = {0.00390625, 0.00390625, 0.00390625}>
{ y = horizon.HzPreprocess <input_type="RGB_128", data_format="NCHW"> (x, w, b) }
"""


def test_lower_writes_a_checked_model(tmp_path, elsewhere, capsys):
    src = save_text(tmp_path, "s.onnx", PRE)
    out = elsewhere / "low.onnx"
    assert main(["lower", str(src), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "loads and runs in onnxruntime (1 output(s))" in said
    assert out.is_file() and not any(n.domain == "horizon" for n in onnx.load(out).graph.node)


def _planted(original_lower):
    """The real lowering, then one step made wrong the way the old NHWC HzPreprocess lowering was wrong: a per-channel
    constant along the wrong axis (5 values where the tensor has 3 channels), in a node named like the lowering's."""

    def lower(model, name="model"):
        res = original_lower(model, name)
        g = res.model.graph
        g.initializer.append(helper.make_tensor("ga_lower/planted_c", onnx.TensorProto.FLOAT, [1, 5, 1, 1], [1.0] * 5))
        last = g.node[-1]
        tmp = last.output[0] + "_pre"
        last.output[0] = tmp
        g.node.append(helper.make_node("Mul", [tmp, "ga_lower/planted_c"], [g.output[0].name],
                                       name="ga_lower/planted/Mul"))
        return res

    return lower


def test_lower_refuses_a_lowering_that_cannot_load(tmp_path, elsewhere, capsys, monkeypatch):
    src = save_text(tmp_path, "s.onnx", PRE)
    out = elsewhere / "low.onnx"
    monkeypatch.setattr(core, "lower_model", _planted(core.lower_model))
    rc = main(["lower", str(src), "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(src) in err and "does not load in onnxruntime" in err and "ga_lower/planted/Mul" in err


@pytest.mark.parametrize("kind", ["run"])
def test_lower_refuses_a_lowering_that_cannot_run(tmp_path, elsewhere, capsys, monkeypatch, kind):
    """Loads, but fails on an input of the declared shape: a Reshape to a size the tensor does not have."""
    src = save_text(tmp_path, "s.onnx", PRE)
    out = elsewhere / "low.onnx"
    original = core.lower_model

    def lower(model, name="model"):
        res = original(model, name)
        g = res.model.graph
        last = g.node[-1]
        shape = helper.make_tensor("ga_lower/planted_shape", onnx.TensorProto.INT64, [2], [7, -1])
        g.initializer.append(shape)
        tmp = last.output[0] + "_pre"
        last.output[0] = tmp
        g.node.append(helper.make_node("Reshape", [tmp, "ga_lower/planted_shape"], [g.output[0].name],
                                       name="ga_lower/planted/Reshape"))
        return res

    monkeypatch.setattr(core, "lower_model", lower)
    rc = main(["lower", str(src), "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists(), err
    assert "does not" in err and "onnxruntime" in err and "Traceback" not in err
