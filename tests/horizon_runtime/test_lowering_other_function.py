"""A fixed-point op that computes another function is a toolchain fault, not quantization noise (verdict).

PP-OCR mobile cls (the real bayes-e set) has nine ``HardSigmoid`` (alpha 0.2, beta 0.5); hb_mapper lowers each to an
``HzLut`` (``lut_type: hardsigmoid``). Run in Horizon's own runtime, that table computes a hard-sigmoid of slope 1/6
(``clip(x / 6 + 0.5, 0, 1)``, the HardSwish one), not the model's 0.2. This suite checks it from the formula, in the
toolchain's runtime, independently of graphaudit, then checks what graphaudit says: the change's isolated mean error
in LSB of its own grid (the same figure as computed here), and a verdict that names the lowering as a ``toolchain``
cause instead of advising int16 for it (``graphaudit.verdict.SYSTEMATIC_LSB``).

Runs only where ``horizon_nn`` imports (the toolchain venv ``samples/hbenv.sh`` builds).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("horizon_nn", reason="Horizon's runtime (horizon_nn) imports only in the toolchain's Python 3.10 "
                                         "venv (samples/hbenv.sh); tests/test_toolchain_env.py runs this suite there")

from horizon_nn.executor.session import InferenceSession  # noqa: E402

from graphaudit.cli import main  # noqa: E402
from graphaudit.verdict_toolchain import SYSTEMATIC_MAX_LSB, SYSTEMATIC_SPREAD  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SET = ROOT / "samples" / "build" / "hb" / "ppocr_cls_bayes-e"
SAMPLES = 2
X, Y = "conv2d_56.tmp_1", "hardsigmoid_0.tmp_0"  # HardSigmoid@0's input and output

pytestmark = pytest.mark.skipif(not (SET / "model_output").is_dir(), reason=f"{SET} not built (./setup.sh)")


def _scales(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {n.input[0]: np.asarray([a.floats for a in n.attribute if a.name == "scales"][0], np.float64)
            for n in model.graph.node if n.op_type == "HzCalibration"}


def _with_outputs(path: Path, names: list[str], dtype: int, out: Path) -> InferenceSession:
    m = onnx.load(str(path))
    for name in names:
        m.graph.output.append(helper.make_tensor_value_info(name, dtype, None))
    onnx.save(m, str(out))
    return InferenceSession(str(out))


@pytest.fixture(scope="module")
def runtime_figures(tmp_path_factory):
    """HardSigmoid@0 run by Horizon's runtime: the calibrated stage's fake-quantized output, the quantized stage's
    int8 HzLut input and output (NHWC here, 1x1 spatial), per sample."""
    d = tmp_path_factory.mktemp("hs")
    mo = SET / "model_output"
    cal_path, q_path = mo / "ppocr_cls_calibrated_model.onnx", mo / "ppocr_cls_quantized_model.onnx"
    scales = _scales(onnx.load(str(cal_path)))
    cal = _with_outputs(cal_path, [Y + "_calibrated"], TensorProto.FLOAT, d / "c.onnx")
    q = _with_outputs(q_path, [X + "_quantized", Y + "_quantized"], TensorProto.INT8, d / "q.onnx")
    rows = []
    for f in sorted((SET / "calibration_data_bgr").iterdir())[:SAMPLES]:
        pix = np.fromfile(f, np.uint8).reshape(1, 3, 48, 192).astype(np.float32) - 128  # the set's contract
        yc = dict(zip([o.name for o in cal.get_outputs()], cal.run(None, {"x": pix})))[Y + "_calibrated"]
        got = dict(zip([o.name for o in q.get_outputs()], q.run(None, {"x": pix.astype(np.int8)})))
        rows.append((np.asarray(yc, np.float64).ravel(), np.asarray(got[X + "_quantized"], np.float64).ravel(),
                     np.asarray(got[Y + "_quantized"], np.float64).ravel()))
    return rows, float(scales[X][0]), float(scales[Y][0])


def _hard_sigmoid(x, alpha):
    return np.clip(alpha * x + 0.5, 0.0, 1.0)


def test_hzlut_computes_slope_one_sixth_not_the_models_alpha(runtime_figures):
    """From the formula: the table's int8 output equals round(clip(x / 6 + 0.5, 0, 1) / s_out) of its own int8 input
    exactly; with the model's alpha 0.2 it is several LSB off on average."""
    rows, s_in, s_out = runtime_figures
    for _yc, xq, yq in rows:
        x = xq * s_in
        sixth = np.abs(yq - np.clip(np.rint(_hard_sigmoid(x, 1 / 6) / s_out), -128, 127))
        model = np.abs(yq - np.clip(np.rint(_hard_sigmoid(x, 0.2) / s_out), -128, 127))
        assert sixth.max() == 0.0, sixth
        assert model.mean() >= 4.0, model.mean()


def test_graphaudit_names_the_lowering_not_int16(runtime_figures, tmp_path):
    rows, _s_in, s_out = runtime_figures
    # the isolated change's figure, computed here: mean |HzLut output - calibrated output| in LSB of the output grid
    # (HardSigmoid@0's input is the first lossy tensor's: the change is fed the calibrated values, which the quantized
    # stage's own input matches on these samples, checked first)
    lsb = np.concatenate([np.abs(yq * s_out - yc) / s_out for yc, _xq, yq in rows])
    out = tmp_path / "r.json"
    rc = main(["explain", str(SET / "model_output"), "--config", str(SET / "config.yaml"), "--data",
               str(SET / "calibration_data_bgr"), "--runtime", "horizon", "--max-samples", str(SAMPLES),
               "--no-report", "--json", str(out), "--fail-on", "never"])
    assert rc == 0
    rep = json.loads(out.read_text())
    rep = rep[0] if isinstance(rep, list) else rep
    t = next(t for t in rep["numeric"] if (t["a"], t["b"]) == ("calibrated", "quantized"))
    region = next(r for r in t["regions"] if r["b_nodes"] == ["HardSigmoid@0"])
    tensor = next(x for x in t["tensors"] if x["b_tensor"] == Y + "_quantized" and x["a_tensor"] == Y + "_calibrated")
    assert tensor["lsb_mean"] == pytest.approx(lsb.mean(), abs=1e-6)
    if region["sqnr_db"] == tensor["sqnr_db"]:  # the quantized stage's input equals the calibrated one here
        assert region["lsb_mean"] == pytest.approx(lsb.mean(), abs=1e-6)
    assert region["lsb_mean"] >= 4.0 and region["lsb_mean"] >= SYSTEMATIC_SPREAD * region["lsb_max"] > 0
    assert region["lsb_max"] > SYSTEMATIC_MAX_LSB
    lines = [v for v in rep["verdict"] if v["scope"] == "calibrated -> quantized"]
    tool = [v for v in lines if v["cause"] == "toolchain"]
    assert tool and "HardSigmoid@0" in tool[0]["nodes"] and "another function" in tool[0]["text"]
    assert "int16" not in tool[0]["action"].replace("int16 keeps the same lowering", "")
    quant = [v for v in lines if v["cause"] == "quantization"]
    assert quant and "HardSigmoid@0" not in quant[0]["nodes"]
    assert "'HardSigmoid@0': {'OutputType': 'int16'}" not in quant[0]["action"]
