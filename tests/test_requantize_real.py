"""An HzRequantize output of Horizon's fixed-point stage is read on its own grid, not on its input's.

On the real ddddocr detector set (hb_mapper 1.24.3, bayes-e; the only real set with HzRequantize nodes) hb_mapper
puts an HzRequantize before each Concat input whose grid differs from the Concat's: ``822_quantized`` (Sigmoid_284,
int16 on threshold 0.999985) becomes ``822_calibrated_Requantize_requantized_output`` on the grid of the Concat's
output (``824_HzCalibration``, int16 threshold 1.718829). Read on the input's grid, the output measured 7.6 dB
alone (cosine 1.0, magnitude 0.58) and the verdict advised int16 for tensors that are int16 already.

Expected values come from the toolchain's files, read here with ``onnx`` alone: the scale of the HzCalibration on the
output of the node that reads the requantized tensor in the calibrated model (the Concat), and the HzRequantize's
own ``output_scale`` / ``output_right_shift`` (``q_out = q_in * M / 2**shift``, so ``s_out = s_in * 2**shift / M``).
Horizon's runtime check (decoded values against the calibrated stage) is
``tests/horizon_runtime/test_requantize_horizon.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from graphaudit.load import load_stage
from graphaudit.numeric.fixedpoint import fixed_point_codec

SET = Path(__file__).resolve().parent.parent / "samples" / "build" / "hb" / "ddddocr_det_bayes-e" / "model_output"
CAL, QUANT = SET / "ddddocr_det_calibrated_model.onnx", SET / "ddddocr_det_quantized_model.onnx"

pytestmark = pytest.mark.skipif(not QUANT.is_file(), reason="no real Horizon stage set in samples/build/hb "
                                "(set-up builds them with the toolchain environment, which needs Python 3.10)")

#: The multiplier of an HzRequantize is a 15- or 16-bit integer: its scale ratio is rounded to 2**-15 relative at
#: most (seen: 1.4e-5 at 667_calibrated_Requantize, M = 16553, shift 14).
MULTIPLIER_RTOL = 2.0 ** -15


def _attrs(n: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}


def _toolchain_grids() -> list[tuple[str, str, float, float, float]]:
    """Per HzRequantize of the quantized model: (its output, the calibrated tensor it holds, the input's scale, the
    scale of the HzCalibration after the calibrated node that reads that tensor (the Concat), the scale its own
    multiplier and shift give)."""
    q, c = onnx.load(str(QUANT), load_external_data=False), onnx.load(str(CAL), load_external_data=False)
    cal = {n.input[0]: _attrs(n) for n in c.graph.node if n.op_type == "HzCalibration"}
    readers: dict[str, list] = {}
    for n in c.graph.node:
        for x in n.input:
            readers.setdefault(x, []).append(n)
    out = []
    for n in q.graph.node:
        if n.op_type != "HzRequantize":
            continue
        t = n.input[0].removesuffix("_quantized")
        a = _attrs(n)
        s_in = cal[t]["scales"][0]
        m, sh = set(a["output_scale"]), set(a["output_right_shift"])
        assert len(m) == len(sh) == 1, "one multiplier for every channel on this set"
        # the requantized tensor feeds one Concat in the quantized stage; its calibrated counterpart reads
        # t_calibrated and is followed by the HzCalibration whose grid the Concat's inputs must share
        concat = [r for r in readers[t + "_calibrated"] if r.op_type == "Concat"]
        assert len(concat) == 1
        out.append((n.output[0], t, s_in, cal[concat[0].output[0]]["scales"][0], s_in * 2.0 ** sh.pop() / m.pop()))
    return out


@pytest.fixture(scope="module")
def stages():
    return load_stage(CAL, "calibrated"), load_stage(QUANT, "quantized")


def test_requantize_output_decoded_on_the_concat_grid(stages):
    a, b = stages
    grids = _toolchain_grids()
    assert len(grids) == 8  # 4 int8 before Concat_166/188, 4 int16 Sigmoid outputs before Concat_286/307
    for b_out, t, s_in, s_concat, s_attr in grids:
        codec = fixed_point_codec(a, t, b, b_out)
        assert codec is not None, b_out
        assert codec.dtype == b.tensors[b_out].dtype
        assert len(codec.scale) == 1
        assert codec.scale[0] == pytest.approx(s_attr, rel=1e-12), b_out
        assert codec.scale[0] == pytest.approx(s_concat, rel=MULTIPLIER_RTOL), b_out
        assert codec.a_value == t + "_calibrated"
        # the input keeps its own grid: the calibrated HzCalibration on t
        inp = fixed_point_codec(a, t, b, t + "_quantized")
        assert inp is not None and inp.scale == (s_in,)


def test_sigmoid_requantize_grid_figures(stages):
    """The figures of the node the bug showed at: int16 thresholds 0.999985 -> 1.718829 (from the calibrated
    model's HzCalibration nodes), multiplier 19064 / 2**15."""
    a, b = stages
    codec = fixed_point_codec(a, "822", b, "822_calibrated_Requantize_requantized_output")
    assert codec.dtype == "INT16"
    assert codec.scale[0] == pytest.approx(1.7188293933868408 / 32767, rel=MULTIPLIER_RTOL)
    assert codec.scale[0] / fixed_point_codec(a, "822").scale[0] == pytest.approx(32768 / 19064, rel=1e-12)
    q = np.array([[[[32767]]]], np.int16)
    assert codec.decode(q, (1, 1, 1, 1)).item() == pytest.approx(1.7188, abs=1e-3)


def test_reference_put_on_the_concat_grid(stages):
    """Each requantized tensor is read by a Concat whose calibrated namesake is followed by an HzCalibration on the
    same grid, so the calibrated stage clips and rounds those values there: the change measured alone is compared
    with them on that grid. Not so for a fixed-point tensor that no HzRequantize wrote, nor when the scales differ."""
    from dataclasses import replace

    from graphaudit.numeric.fixedpoint import _concat_grid

    a, b = stages
    for b_out, t, _s_in, _s_concat, _s_attr in _toolchain_grids():
        codec = fixed_point_codec(a, t, b, b_out)
        assert codec.reference_on_grid, b_out
        assert not _concat_grid(a, replace(codec, scale=(codec.scale[0] * 1.001,)), b, b_out)
        assert not fixed_point_codec(a, t, b, t + "_quantized").reference_on_grid
    x = np.array([[0.25, 1.9, -3.0]])
    got = fixed_point_codec(a, "822", b, "822_calibrated_Requantize_requantized_output").on_grid(x)
    s = 3.051804378628731e-05 * 2 ** 15 / 19064  # 822_HzCalibration's scale, the HzRequantize's multiplier and shift
    np.testing.assert_allclose(got, [[np.rint(0.25 / s) * s, 32767 * s, -32768 * s]], rtol=1e-12)


B2 = SET.parent.parent / "ddddocr_det_bernoulli2" / "model_output"


@pytest.mark.skipif(not (B2 / "ddddocr_det_quantized_model.onnx").is_file(), reason="no ddddocr det bernoulli2 set")
def test_dequantized_output_compared_with_the_fake_quantized_value():
    """On bernoulli2 the int8 Sigmoid outputs leave the BPU through an HzDequantize whose ``y_scale`` initializer is
    the ``scales`` of the calibrated HzCalibration on the same tensor (both read here with onnx): its float output is
    that HzCalibration's output, not the unquantized Sigmoid output, so it is compared with ``<t>_calibrated``."""
    from onnx import numpy_helper

    from graphaudit.numeric.fixedpoint import dequantized_reference

    q = onnx.load(str(B2 / "ddddocr_det_quantized_model.onnx"), load_external_data=False)
    c = onnx.load(str(B2 / "ddddocr_det_calibrated_model.onnx"), load_external_data=False)
    init = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    cal = {n.input[0]: (_attrs(n), n.output[0]) for n in c.graph.node if n.op_type == "HzCalibration"}
    a, b = load_stage(B2 / "ddddocr_det_calibrated_model.onnx"), load_stage(B2 / "ddddocr_det_quantized_model.onnx")
    deq = [n for n in q.graph.node if n.op_type == "HzDequantize"]
    assert len(deq) == 9
    for n in deq:
        if n.name.endswith("_calibrated_HzDequantize"):
            continue
        # an int32 Conv accumulator dequantized on its own per-channel scale: no HzCalibration grid, a's tensor
        t = n.input[0].removesuffix("_quantized")
        assert t not in cal and init[n.input[1]].size > 1
        assert dequantized_reference(a, t, b, n.output[0]) == t
    for n in (n for n in deq if n.name.endswith("_calibrated_HzDequantize")):
        t = n.input[0].removesuffix("_quantized")
        assert float(init[n.input[1]].ravel()[0]) == pytest.approx(cal[t][0]["scales"][0], rel=1e-7)
        assert dequantized_reference(a, t, b, n.output[0]) == cal[t][1] == t + "_calibrated"
        assert dequantized_reference(a, t, b, n.input[0]) == t  # not an HzDequantize output: a's own tensor
