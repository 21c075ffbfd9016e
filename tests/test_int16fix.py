"""The calibrated model bisect predicts an hb_mapper ``node_info`` int16 fix with, against the real rebuilt one.

Expected values come from the real hb_mapper (horizon_nn 1.x, bayes-e): the ppocr_cls_bayes-e set copied to /tmp, its
config.yaml given ``model_parameters: node_info: {Relu@4: {OutputType: int16}, Mul@0: {OutputType: int16}}`` (the
fix ``graphaudit bisect samples/build/hb/ppocr_cls_bayes-e --max-samples 4`` writes), ``hb_mapper makertbin
--model-type onnx --config config.yaml`` run (about 50 s), and the new ppocr_cls_calibrated_model.onnx read with
onnx: which HzCalibration nodes have qtype int16, at which thresholds and scales, and which it inserted. Its outputs on
the set's first 4 calibration samples, run in Horizon's runtime and in onnxruntime (both agree to 1e-6) against the
optimized stage: noise 0.160144 (sum of squared differences over outputs and samples), where the int8 build has
0.203918 (output SQNR 13.41 dB vs 12.36 dB): the fix recovers 1 - 0.160144 / 0.203918 = 21.47% of the drop.
graphaudit 808d76c predicted -41.6% (only relu_4 and hardswish_0 in int16).
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper

from graphaudit.bisection import _data
from graphaudit.hybrideval import HybridEvaluator, fix_model
from graphaudit.measure import NumericOptions, data_stage_of, sample_source
from graphaudit.numeric.int16fix import int16_calibration
from graphaudit.pipeline import _as_config, _structure, load_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
import horizon_check as hc  # noqa: E402

CLS = next((p for p in hc.built_sets() if p.name == "ppocr_cls_bayes-e"), None)
needs_cls = pytest.mark.skipif(CLS is None, reason="no real ppocr_cls_bayes-e set (set-up builds it)")

CHOSEN = ["relu_4.tmp_0_HzCalibration", "hardswish_0.tmp_0_HzCalibration"]  # the HzCalibration of Relu@4, Mul@0

#: int16 HzCalibration nodes of the real rebuilt model: the tensor each quantizes -> (threshold, scale).
#: linear_1.tmp_1_reshape (the model output) is int16 in the int8 build too.
REAL_INT16 = {
    "conv2d_53.tmp_0": (7.601056098937988, 0.00023197289556264877),  # Mul@0's input (HzHardSwish -> HzLut2Layer)
    "hardswish_0.tmp_0": (5.418363571166992, 0.00016536038310732692),  # Mul@0's output
    "relu_4.tmp_0": (6.586205005645752, 0.00020100116671528667),  # Relu@4's output
    "conv2d_59.tmp_0": (6.744497776031494, 0.00020583202422130853),  # inserted: Conv@8 reads relu_4 in int16
    "relu_0.tmp_0": (13.89687728881836, 0.0004241119895596057),  # inserted: Conv@1 (+Relu@0) reads hardswish_0
    "linear_1.tmp_1_reshape": (13.970383, None),
}
#: Nodes the real rebuild inserted (HzCalibration_288/289): tensor read -> the int8 HzCalibration they feed.
REAL_INSERTED = {"conv2d_59.tmp_0": "conv2d_59.tmp_0_HzCalibration", "relu_0.tmp_0": "relu_0.tmp_0_HzCalibration"}
REAL_NOISE_INT8, REAL_NOISE_INT16 = 0.203918, 0.160144


def _attr(n: onnx.NodeProto, name: str):
    return next((helper.get_attribute_value(a) for a in n.attribute if a.name == name), None)


@needs_cls
def test_int16_model_has_the_real_rebuilds_int16_nodes():
    old = onnx.load(CLS / "model_output" / "ppocr_cls_calibrated_model.onnx")
    g = int16_calibration(old, CHOSEN).graph
    cals = [n for n in g.node if n.op_type == "HzCalibration"]
    got = {n.input[0]: n for n in cals if _attr(n, "qtype") == b"int16"}
    assert set(got) == set(REAL_INT16)
    for x, (th, scale) in REAL_INT16.items():
        assert _attr(got[x], "thresholds")[0] == pytest.approx(th, rel=1e-6)
        if scale is not None:
            assert _attr(got[x], "scales")[0] == pytest.approx(scale, rel=1e-6)
    assert len(cals) == sum(n.op_type == "HzCalibration" for n in old.graph.node) + len(REAL_INSERTED)
    readers = {x: n for n in g.node for x in n.input}
    for x, int8_cal in REAL_INSERTED.items():
        assert readers[got[x].output[0]].name == int8_cal
        assert _attr(readers[got[x].output[0]], "qtype") == b"int8"


@needs_cls
def test_predicted_share_equals_the_real_rebuilds():
    cfg = _as_config(CLS / "config.yaml")
    stages = load_pipeline([CLS], None)
    lineage, changes, _ = _structure(stages)
    opts = NumericOptions(runtime="onnxruntime", max_samples=4)
    idx = data_stage_of(stages)
    al, ch = lineage.alignments[1], changes[1]  # optimized -> calibrated
    ev = HybridEvaluator(stages, 1, al, ch, sample_source(stages, idx, _data(None, opts, cfg), opts, cfg), idx, cfg,
                         "onnxruntime", 4)
    units = [j for j, c in enumerate(ch) if c.kind == "inserted" and list(c.b_nodes) in ([x] for x in CHOSEN)]
    assert len(units) == 2
    noise_b, _ = ev.noise([])
    noise_fix, _ = ev.noise([], fix_model(ev, units))
    assert noise_b == pytest.approx(REAL_NOISE_INT8, rel=1e-4)
    assert 1 - noise_fix / noise_b == pytest.approx(1 - REAL_NOISE_INT16 / REAL_NOISE_INT8, abs=0.002)
