"""Issue 15, "runs that end in exit 2 where the user should get findings": each class on real models, the right
answer worked out here independently (raw bytes read with numpy, the protobuf read with onnx, onnxruntime itself).

1. hb_mapper 1.x calibration folders of raw files, whatever the files are named (hb_mapper reads every file of
   ``cal_data_dir`` with ``np.fromfile(cal_data_type).reshape(input_shape)``): ``lint --data``, ``check-inputs``.
2. A stage onnxruntime refuses to load: a finding with onnxruntime's reason, the rest of the run reported.
3. One already-quantized model (dynamic, QOperator, QDQ; made with onnxruntime.quantization at test time): its
   structure findings.
4. A change whose isolated error is an outlier among its peers: a warning naming the node and its threshold/scale.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from ruamel.yaml import YAML

from graphaudit.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
import horizon_check as hc  # noqa: E402

SETS = {p.name: p for p in hc.built_sets()}
SKIP = "no real Horizon stage set in samples/build/hb (set-up builds them)"

# (set, suffix the copies get): bgr NCHW, rgb NHWC, gray NCHW; names hb_mapper users give (run-time types too)
RAW_CASES = [("ppocr_cls_bayes-e", ".nv12"), ("mtcnn_onet_bayes-e", ".yuv444"), ("ddddocr_ocr_bayes-e", ".rgbchw")]


def _raw_copy(set_dir: Path, tmp: Path, suffix: str, dtype: str | None, dirname: str) -> tuple[Path, Path, dict]:
    """The set's config and first 3 calibration files, renamed to ``suffix`` and stored as ``dtype`` (``None``:
    float32 chosen by the ``_f32`` directory name, no cal_data_type), into ``tmp``; the config points at them."""
    yaml = YAML(typ="safe")
    cfg = yaml.load((set_dir / "config.yaml").read_text())
    src = set_dir / cfg["calibration_parameters"]["cal_data_dir"]
    dst = tmp / dirname
    dst.mkdir()
    for f in sorted(src.iterdir())[:3]:
        x = np.fromfile(f, dtype=np.uint8)
        x.astype(dtype or "float32").tofile(dst / (f.stem + suffix))
    cfg["model_parameters"]["onnx_model"] = str(set_dir / cfg["model_parameters"]["onnx_model"])
    cfg["calibration_parameters"]["cal_data_dir"] = f"./{dirname}"
    if dtype is None:
        cfg["calibration_parameters"].pop("cal_data_type", None)
    else:
        cfg["calibration_parameters"]["cal_data_type"] = dtype
    path = tmp / "config.yaml"
    with open(path, "w") as fh:
        YAML(typ="safe").dump(cfg, fh)
    return path, dst, cfg


@pytest.mark.skipif(not SETS, reason=SKIP)
@pytest.mark.parametrize("dtype", ["uint8", "float32", None], ids=["uint8", "float32", "f32-dir"])
@pytest.mark.parametrize("name, suffix", RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_raw_calibration_folder_is_read_whatever_the_names(name, suffix, dtype, tmp_path, capsys):
    if name not in SETS:
        pytest.skip(f"{name} not built")
    set_dir = SETS[name]
    config, data, cfg = _raw_copy(set_dir, tmp_path, suffix, dtype, "cal_f32" if dtype is None else "cal")
    rc = main(["lint", str(config), "--data", str(data)])
    out = capsys.readouterr().out
    assert rc in (0, 1), out
    assert f"checked: calibration data: input 0 ({cfg['input_parameters']['input_name']})" in out
    assert " C325 " not in out and " C326 " not in out  # the files are what the config says (no dtype finding)

    report = tmp_path / "ci.json"
    rc = main(["check-inputs", str(set_dir / "model_output"), "--config", str(config), "--data", str(data),
               "--json", str(report)])
    assert rc in (0, 1)
    rep = json.loads(report.read_text())
    (name_in, st), = rep["inputs"].items()
    contract = rep["contracts"][name_in]
    assert contract["domain"] == "x128"  # every stage set here starts with HzPreprocess (pixel - 128)
    # independently: the raw bytes at input_shape in input_layout_train, per channel, minus 128
    shape = [int(v) for v in str(cfg["input_parameters"]["input_shape"]).split("x")]
    axis = 1 if cfg["input_parameters"]["input_layout_train"] == "NCHW" else 3
    arrs = [np.fromfile(f, dtype=dtype or "float32").reshape(shape) for f in sorted(data.iterdir())]
    x = np.moveaxis(np.concatenate(arrs).astype(np.float64), axis, 0).reshape(shape[axis], -1) - 128
    assert st["samples"] == 3 and rep["findings"] is not None
    np.testing.assert_allclose(st["channel_mean"], x.mean(axis=1), rtol=1e-6)
    assert st["min"] == x.min() and st["max"] == x.max()


@pytest.mark.skipif("ppocr_cls_bayes-e" not in SETS, reason=SKIP)
def test_raw_folder_of_the_wrong_size_is_one_line(tmp_path, capsys):
    """A raw file that is not input_shape's size is left out with finding P212 naming it (the others are checked);
    when no file has the size, check-inputs ends in exit 2 with one line naming the first."""
    config, data, _ = _raw_copy(SETS["ppocr_cls_bayes-e"], tmp_path, ".nv12", "uint8", "cal")
    bad = sorted(data.iterdir())[1]
    bad.write_bytes(bad.read_bytes()[:-7])
    args = ["check-inputs", str(SETS["ppocr_cls_bayes-e"] / "model_output"), "--config", str(config),
            "--data", str(data)]
    assert main(args) in (0, 1)
    out = " ".join(capsys.readouterr().out.split())
    assert "P212" in out and f"{bad}:" in out and "needs" in out
    for f in data.iterdir():
        f.write_bytes(f.read_bytes()[:-7])
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and sorted(data.iterdir())[0].name in err and "needs" in err


# -- 3. one already-quantized model ---------------------------------------------------------------------------------

ORT_FLOAT = Path(__file__).resolve().parent.parent / "samples" / "build" / "ort" / "ppocr_cls" / "ppocr_cls_original.onnx"


@pytest.fixture(scope="module")
def quantized_models(tmp_path_factory) -> dict[str, Path]:
    """The bundled float PP-OCR classifier quantized by onnxruntime.quantization three ways (made here, never
    committed): dynamic (ConvInteger), static QOperator (QLinearConv, com.microsoft QLinearAdd...), static QDQ."""
    if not ORT_FLOAT.is_file():
        pytest.skip("bundled onnxruntime samples not built (setup.sh builds them)")
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)
            self.it = iter([{"x": x}])

        def get_next(self):
            return next(self.it, None)

    d = tmp_path_factory.mktemp("quantized")
    out = {"dynamic": d / "cls_dynamic.onnx", "QOperator": d / "cls_qop.onnx", "QDQ": d / "cls_qdq.onnx"}
    quantize_dynamic(ORT_FLOAT, out["dynamic"], weight_type=QuantType.QUInt8)
    quantize_static(ORT_FLOAT, out["QOperator"], Reader(), quant_format=QuantFormat.QOperator)
    quantize_static(ORT_FLOAT, out["QDQ"], Reader(), quant_format=QuantFormat.QDQ)
    return out


def _census(path: Path) -> dict[str, dict[str, int]]:
    """Quantized ops per format, read from the protobuf here (op lists from onnxruntime's operator docs)."""
    import onnx

    dyn = {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}
    out: dict[str, dict[str, int]] = {}
    for n in onnx.load(path).graph.node:
        fmt = ("dynamic" if n.op_type in dyn else "QOperator" if n.op_type.startswith(("QLinear", "QGemm"))
               else "QDQ" if n.op_type in ("QuantizeLinear", "DequantizeLinear") else None)
        if fmt:
            key = (n.domain + "." if n.domain not in ("", "ai.onnx") else "") + n.op_type
            out.setdefault(fmt, {})[key] = out.get(fmt, {}).get(key, 0) + 1
    return out


@pytest.mark.parametrize("fmt", ["dynamic", "QOperator", "QDQ"])
def test_one_quantized_model_gets_its_structure_findings(quantized_models, fmt, tmp_path):
    import onnxruntime as ort

    model = quantized_models[fmt]
    out = tmp_path / "r.json"
    rc = main(["explain", str(model), "--json", str(out), "--no-report"])
    assert rc in (0, 1)
    rep = json.loads(out.read_text())
    assert len(rep["stages"]) == 1 and rep["transitions"] == []
    codes = {f["code"]: f for f in rep["findings"]}
    want = _census(model)
    assert fmt in want
    if fmt == "QDQ":  # Q/DQ only: S105's census, no S112
        assert "S112" not in codes and codes["S105"]["evidence"]["QuantizeLinear"] == want["QDQ"]["QuantizeLinear"]
    else:
        assert codes["S112"]["evidence"]["formats"] == want and codes["S112"]["evidence"]["no_kernel"] == []
    # stock onnxruntime itself loads and runs the model: none of its ops (com.microsoft QLinearAdd...) is custom
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    sess.run(None, {"x": np.zeros((1, 3, 48, 192), np.float32)})
    assert "S101" not in codes and rep["stages"][0]["custom_ops"] == {}


def test_one_stage_directory_is_a_pipeline_of_one(quantized_models, tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    shutil.copy(quantized_models["QDQ"], d / "cls_qdq.onnx")
    out = tmp_path / "r.json"
    assert main(["explain", str(d), "--json", str(out), "--no-report"]) in (0, 1)
    rep = json.loads(out.read_text())
    assert [s["role"] for s in rep["stages"]] == ["quantized"] and any(f["code"] == "S105" for f in rep["findings"])
    # without data too, the run says why nothing was compared, and the verdict asks for the other stages, not data
    assert "one stage" in rep["run"]["numeric_skipped"]
    assert all("--data" not in v["action"] for v in rep["verdict"]), rep["verdict"]
    assert any("other stages" in v["action"] for v in rep["verdict"]), rep["verdict"]
    for cmd in (["compare", "--random", "1"], ["diff"]):  # they still need two stages
        assert main([cmd[0], str(d / "cls_qdq.onnx"), *cmd[1:]]) == 2


def test_one_model_with_data_checks_the_inputs(quantized_models, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(1)
    for i in range(2):
        np.save(data / f"{i}.npy", rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32))
    out = tmp_path / "r.json"
    rc = main(["explain", str(quantized_models["QOperator"]), "--data", str(data), "--json", str(out),
               "--no-report"])
    assert rc in (0, 1)
    rep = json.loads(out.read_text())
    assert rep["numeric"] is None and "one stage" in rep["run"]["numeric_skipped"]
    assert any(f["code"] == "P209" for f in rep["findings"])  # uniform noise is seen as noise: inputs were read


# -- 2. onnxruntime refuses to load one stage -------------------------------------------------------------------------

def _ppocr_cls_with_opset(tmp_path, role: str, version: int):
    """A copy of the bundled onnxruntime PP-OCR cls pipeline whose ``role`` stage declares ai.onnx opset
    ``version`` (the other stages copied as they are); skips when set-up did not build the samples."""
    import onnx

    src = ORT_FLOAT.parent
    if not src.is_dir():
        pytest.skip("bundled onnxruntime samples not built (setup.sh builds them)")
    stages = tmp_path / "stages"
    stages.mkdir()
    for other in ("original", "optimized", "qdq"):
        if other != role:
            shutil.copy(src / f"ppocr_cls_{other}.onnx", stages)
    m = onnx.load(src / f"ppocr_cls_{role}.onnx")
    next(o for o in m.opset_import if o.domain in ("", "ai.onnx")).version = version
    onnx.save(m, stages / f"ppocr_cls_{role}.onnx")
    return stages


def test_stage_onnxruntime_refuses_to_load_is_a_finding(tmp_path):
    """The bundled onnxruntime pipeline with its QDQ stage's ai.onnx opset set to 12: per-channel Q/DQ (an ``axis``
    attribute) is then invalid and onnxruntime refuses to load the stage. The run still reports the structure (S107
    names the cause), the data findings and the numbers of the two stages that run; N403 carries onnxruntime's reason."""
    import onnxruntime as ort

    stages = _ppocr_cls_with_opset(tmp_path, "qdq", 12)
    with pytest.raises(Exception) as refused:  # onnxruntime's own reason, worked out here
        ort.InferenceSession(str(stages / "ppocr_cls_qdq.onnx"), providers=["CPUExecutionProvider"])
    reason = str(refused.value).rsplit("Error ", 1)[-1]
    assert "axis" in reason

    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(2)
    xs = [rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32) for _ in range(3)]
    for i, x in enumerate(xs):
        np.save(data / f"{i}.npy", x)
    out = tmp_path / "r.json"
    rc = main(["explain", str(stages), "--data", str(data), "--json", str(out), "--no-report", "--no-isolated"])
    assert rc in (0, 1)
    rep = json.loads(out.read_text())
    codes = {f["code"]: f for f in rep["findings"]}
    assert "S107" in codes and codes["S107"]["stage"] == "quantized"
    assert reason in codes["N403"]["message"] and codes["N403"]["evidence"]["not_compared"] == ["quantized"]
    assert "P209" in codes  # the data findings are there (uniform noise)
    (num,) = rep["numeric"]
    assert (num["a"], num["b"]) == ("original", "optimized")
    # the numbers of the stages that run, against onnxruntime run here (each graph as written: no ORT fusions)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    runs = [ort.InferenceSession(str(stages / f"ppocr_cls_{r}.onnx"), so, providers=["CPUExecutionProvider"])
            for r in ("original", "optimized")]
    got = [np.concatenate([s.run(None, {"x": x})[0] for x in xs]) for s in runs]
    (o,) = num["outputs"]
    assert o["samples"] == 3 and o["max_abs"] == pytest.approx(float(np.abs(got[0] - got[1]).max()), rel=1e-3)
    assert o["max_abs"] > 0


def test_middle_stage_refused_keeps_the_later_stages(tmp_path):
    """The bundled onnxruntime pipeline with its *middle* stage (optimized) stamped ai.onnx opset 10000, which
    onnxruntime refuses to load: the quantized stage after it is still measured, against the original stage (the
    last one run before the gap); N403 names the refused stage only. The figures are worked out here by running the
    two files in onnxruntime."""
    import onnxruntime as ort

    stages = _ppocr_cls_with_opset(tmp_path, "optimized", 10000)
    with pytest.raises(Exception):  # onnxruntime's own refusal, worked out here
        ort.InferenceSession(str(stages / "ppocr_cls_optimized.onnx"), providers=["CPUExecutionProvider"])
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(3)
    xs = [rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32) for _ in range(2)]
    for i, x in enumerate(xs):
        np.save(data / f"{i}.npy", x)
    out = tmp_path / "r.json"
    rc = main(["explain", str(stages), "--data", str(data), "--json", str(out), "--out", str(tmp_path / "rep")])
    assert rc in (0, 1)
    assert (tmp_path / "rep" / "report.html").is_file()
    rep = json.loads(out.read_text())
    (n403,) = [f for f in rep["findings"] if f["code"] == "N403"]
    assert n403["stage"] == "optimized" and n403["evidence"]["not_compared"] == ["optimized"]
    assert "original -> quantized is compared across it" in n403["message"]
    (num,) = rep["numeric"]
    assert (num["a"], num["b"]) == ("original", "quantized")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    runs = [ort.InferenceSession(str(stages / f"ppocr_cls_{r}.onnx"), so, providers=["CPUExecutionProvider"])
            for r in ("original", "qdq")]
    got = [np.concatenate([s.run(None, {"x": x})[0] for x in xs]) for s in runs]
    out_b = runs[1].get_outputs()[0].name
    (o,) = [o for o in num["outputs"] if o["b_tensor"] == out_b]  # the quantized stage's graph output
    assert o["samples"] == 2 and o["max_abs"] == pytest.approx(float(np.abs(got[0] - got[1]).max()), rel=1e-3)


# -- 4. a change that is an outlier among its peers -------------------------------------------------------------------

PLANTED = "relu_1.tmp_0"  # an activation of the bundled PP-OCR classifier's QDQ stage, its Q/DQ scale made 200x coarser


def test_outlier_change_is_a_warning_naming_its_node_and_scale(tmp_path):
    """The bundled onnxruntime pipeline of the PP-OCR classifier with one activation's Q/DQ scale planted 200x too
    coarse: N404 warns first about that node with the planted scale (read back from the protobuf), and its isolated
    SQNR is the one numpy computes from the optimized stage's tensor (onnxruntime) quantized with that scale."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    src = ORT_FLOAT.parent
    if not src.is_dir():
        pytest.skip("bundled onnxruntime samples not built (setup.sh builds them)")
    stages = tmp_path / "stages"
    stages.mkdir()
    for role in ("original", "optimized"):
        shutil.copy(src / f"ppocr_cls_{role}.onnx", stages)
    m = onnx.load(src / "ppocr_cls_qdq.onnx")
    inits = {i.name: i for i in m.graph.initializer}
    scale_init, zp_init = inits[f"{PLANTED}_scale"], inits[f"{PLANTED}_zero_point"]
    scale = float(numpy_helper.to_array(scale_init)) * 200
    scale_init.CopyFrom(numpy_helper.from_array(np.array(scale, np.float32), scale_init.name))
    zp = numpy_helper.to_array(zp_init)
    onnx.save(m, stages / "ppocr_cls_qdq.onnx")

    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(3)
    xs = [rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32) for _ in range(3)]
    for i, x in enumerate(xs):
        np.save(data / f"{i}.npy", x)
    out = tmp_path / "r.json"
    rc = main(["explain", str(stages), "--data", str(data), "--json", str(out), "--no-report"])
    assert rc in (0, 1)
    rep = json.loads(out.read_text())
    n404 = [f for f in rep["findings"] if f["code"] == "N404"]
    assert n404 and all(f["severity"] == "warning" for f in n404)
    (f,) = [f for f in n404 if f["stage"] == "optimized -> quantized"]
    worst = f["evidence"]["outliers"][0]
    assert f"{PLANTED}_QuantizeLinear" in worst["b_nodes"] and worst["scale"] == [pytest.approx(scale, rel=1e-6)]
    assert PLANTED in f["message"].split(";")[0] or worst["node"] in f["message"].split(";")[0]
    assert worst["sqnr_db"] <= worst["peers_median_sqnr_db"] - 6 and worst["peers"] >= 3

    # independently: the optimized stage's float tensor (onnxruntime, graph as written), Q/DQ in numpy
    opt = onnx.load(stages / "ppocr_cls_optimized.onnx")
    opt.graph.output.append(helper.make_tensor_value_info(PLANTED, onnx.TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(opt.SerializeToString(), so, providers=["CPUExecutionProvider"])
    a = np.concatenate([sess.run([PLANTED], {"x": x})[0].ravel() for x in xs]).astype(np.float64)
    info = np.iinfo(zp.dtype)
    q = np.clip(np.rint(a / np.float32(scale)) + int(zp), info.min, info.max)
    b = (q - int(zp)) * np.float32(scale)
    sqnr = 10 * np.log10(np.sum(a * a) / np.sum((a - b) ** 2))
    assert worst["sqnr_db"] == pytest.approx(sqnr, abs=0.05)


@pytest.mark.skipif("ppocr_cls_bayes-e" not in SETS, reason=SKIP)
def test_outlier_hzcalibration_on_a_real_horizon_set(tmp_path):
    """A real hb_mapper set run on its own calibration data: N404's outliers are exactly the lossy changes 6 dB or
    more below the median of their kind and within 10 dB of the outputs' SQNR, recomputed here from the report's measured regions, and each threshold is
    the HzCalibration node's ``thresholds`` attribute in hb_mapper's calibrated model (read with onnx)."""
    import statistics

    import onnx
    from onnx import helper

    set_dir = SETS["ppocr_cls_bayes-e"]
    out = tmp_path / "r.json"
    rc = main(["explain", str(set_dir / "model_output"), "--config", str(set_dir / "config.yaml"), "--json",
               str(out), "--no-report"])
    assert rc in (0, 1)
    rep = json.loads(out.read_text())
    (num,) = [n for n in rep["numeric"] if (n["a"], n["b"]) == ("optimized", "calibrated")]
    # a change all of whose readers saturate inside its clip range counts with the bound after them (N402's
    # evidence "landed"; the bound itself: tests/test_verdict_landed.py)
    (n402,) = [f for f in rep["findings"] if f["code"] == "N402" and f["stage"] == "optimized -> calibrated"]
    landed = {tuple(e["b_nodes"]): e["sqnr_db"] for e in n402["evidence"]["landed"]}
    assert ("conv2d_92.tmp_1_HzCalibration",) in landed  # Conv@50, read by HardSigmoid@8
    groups: dict[str, list] = {}
    for r in num["regions"]:
        if r["kind"] != "kept" and r["sqnr_db"] != "nan":  # "inf": a lossless peer, in the median too
            groups.setdefault(f"{r['kind']} {r['pattern']}", []).append(
                (tuple(r["b_nodes"]), float(landed.get(tuple(r["b_nodes"]), r["sqnr_db"]))))
    want = set()
    ceiling = min(float(o["sqnr_db"]) for o in num["outputs"]) + 10  # within 10 dB of the outputs' SQNR
    for peers in groups.values():
        if len(peers) >= 3:
            med = statistics.median(db for _b, db in peers)
            want |= {b for b, db in peers if db <= min(med - 6, ceiling) and db < 60}
    (f,) = [f for f in rep["findings"] if f["code"] == "N404" and f["stage"] == "optimized -> calibrated"]
    assert f["severity"] == "warning" and want
    assert {tuple(o["b_nodes"]) for o in f["evidence"]["outliers"]} == want
    cal = onnx.load(next((set_dir / "model_output").glob("*_calibrated_model.onnx")))
    attrs = {n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute} for n in cal.graph.node}
    for o in f["evidence"]["outliers"]:
        (hz,) = [b for b in o["b_nodes"] if b in attrs and "thresholds" in attrs[b]]
        assert o["threshold"] == pytest.approx(list(attrs[hz]["thresholds"]))
    first = f["evidence"]["outliers"][0]
    assert f["message"].split(": ", 1)[1].startswith(f"{first['node']} (")
