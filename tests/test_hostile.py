"""Hostile but parseable stage files (issue 15): each class ends in a finding or in one line naming the file, exit 2,
never in a traceback or a hang. The models are built here with onnx.helper (the fuzz suite's own builders,
bench/fuzz/models.py) and, for names that are not UTF-8, patched in their serialized bytes."""

from __future__ import annotations

import json
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bench.fuzz import models as M
from graphaudit.cli import main
from graphaudit.data.random import MAX_SAMPLE_ELEMENTS
from graphaudit.numeric import runner

NON_UTF8_FIELDS = ["op_type", "domain", "attr", "input", "output", "init"]


class _Pick:
    """A random.Random stand-in that makes _non_utf8 patch ``field`` with ``bad``: choice() answers them in turn."""

    def __init__(self, field: str, bad: bytes = b"\xff"):
        self.answers = [field, bad]

    def choice(self, seq):
        return self.answers.pop(0) if self.answers else seq[0]

    def randrange(self, n):
        return 0


def _write_pair(tmp_path, bad: bytes):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(M.float_model().SerializeToString())
    b.write_bytes(bad)
    return a, b


def _one_line_exit_2(capsys, rc: int, name: str) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and name in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("field", NON_UTF8_FIELDS)
def test_names_that_are_not_utf8_become_n403_or_one_line(field, tmp_path, elsewhere, capsys):
    """A name that is not UTF-8 (op type, domain, attribute, graph input/output, initializer): the stage's structure
    is still reported; onnxruntime cannot use the stage (it raises UnicodeDecodeError reading it, checked here), so
    the numeric comparison reports it as N403; `lower` refuses the file in one line."""
    bad = M._non_utf8(_Pick(field), M.float_model())
    assert b"\xff" in bad
    a, b = _write_pair(tmp_path, bad)
    try:  # onnxruntime's own reaction, worked out here: an initializer's name is never decoded by it
        s = ort.InferenceSession(bad, providers=["CPUExecutionProvider"])
        [i.name for i in s.get_inputs()], [o.name for o in s.get_outputs()]
        refused = False
    except Exception as e:  # noqa: BLE001
        assert isinstance(e, UnicodeDecodeError) or "utf-8" in str(e)
        refused = True
    assert refused == (field != "init")
    out = elsewhere / "r.json"
    rc = main(["compare", str(a), str(b), "--random", "1", "--json", str(out)])
    assert rc in (0, 1), capsys.readouterr().err
    rep = json.loads(out.read_text())
    n403 = [f for f in rep["findings"] if f["code"] == "N403"]
    if refused:
        assert len(n403) == 1 and n403[0]["stage"] == "b" and str(b) in n403[0]["message"]
        assert "not UTF-8" in n403[0]["message"] or "utf-8" in n403[0]["message"]
    else:
        assert not n403 and len(rep["numeric"]) == 1
    rc = main(["lower", str(b), "-o", str(elsewhere / "low.onnx")])
    if refused:
        _one_line_exit_2(capsys, rc, str(b))
    else:  # onnx.checker and onnxruntime accept it: lowered as any other file
        assert rc == 0, capsys.readouterr().err


@pytest.mark.parametrize("dims", [[2 ** 31, 2 ** 31], [2 ** 62], [1, 3, 2 ** 40, 8]])
def test_impossible_input_dims_refuse_random_in_one_line(dims, tmp_path, capsys):
    """Graph input dims whose one sample has more than MAX_SAMPLE_ELEMENTS (2**26) elements: --random refuses in one
    line naming the input and its shape, before numpy is asked for the array."""
    m = M.float_model()
    shape = m.graph.input[0].type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        shape.dim.add().dim_value = d
    a, b = _write_pair(tmp_path, m.SerializeToString())
    a.write_bytes(m.SerializeToString())
    assert int(np.prod(dims, dtype=object)) > MAX_SAMPLE_ELEMENTS
    rc = main(["compare", str(a), str(b), "--random", "1"])
    err = _one_line_exit_2(capsys, rc, "--random")
    assert "'x'" in err and f"{int(np.prod(dims, dtype=object)):,}" in err


def test_a_sample_just_under_the_cap_is_made(tmp_path, capsys):
    """The cap's other side: a [1, 2**26] float input (exactly MAX_SAMPLE_ELEMENTS) is run."""
    chain = M.identity_chain(1)
    chain.graph.input[0].type.tensor_type.shape.dim[1].dim_value = MAX_SAMPLE_ELEMENTS
    chain.graph.output[0].type.tensor_type.shape.dim[1].dim_value = MAX_SAMPLE_ELEMENTS
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(chain.SerializeToString())
    b.write_bytes(chain.SerializeToString())
    rc = main(["compare", str(a), str(b), "--random", "1", "--no-isolated"])
    assert rc in (0, 1), capsys.readouterr().err


@pytest.mark.parametrize("kind", ["ref_attr", "undefined"])
def test_attribute_reference_outside_a_function_is_read(kind, tmp_path, elsewhere, capsys):
    """An attribute with ref_attr_name outside a function (onnx.helper.get_attribute_value raises ValueError on it),
    or of type UNDEFINED: the structure is reported, onnxruntime's refusal becomes N403, `lower` is one line."""
    m = M.float_model()
    a = onnx.AttributeProto(name="alpha")
    if kind == "ref_attr":
        a.ref_attr_name, a.type = "outer", onnx.AttributeProto.FLOAT
    m.graph.node[1].attribute.append(a)
    if kind == "ref_attr":
        with pytest.raises(ValueError):
            onnx.helper.get_attribute_value(a)
    x, y = _write_pair(tmp_path, m.SerializeToString())
    out = elsewhere / "r.json"
    rc = main(["explain", str(x), str(y), "--random", "1", "--json", str(out), "--no-report"])
    assert rc in (0, 1), capsys.readouterr().err
    rep = json.loads(out.read_text())
    assert [f["stage"] for f in rep["findings"] if f["code"] == "N403"] == ["b"]
    rc = main(["lower", str(y), "-o", str(elsewhere / "low.onnx")])
    _one_line_exit_2(capsys, rc, str(y))


def test_loop_that_does_not_end_is_stopped(tmp_path, elsewhere, capsys, monkeypatch):
    """A Loop with trip count 2**62 and a condition that stays true: one sample is stopped after LOOP_RUN_SECONDS
    (set to 2 s here; 20 s by default) and the stage is N403 naming the Loop; the run ends."""
    monkeypatch.setattr(runner, "LOOP_RUN_SECONDS", 2.0)
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(M.loop_model(10).SerializeToString())
    b.write_bytes(M.loop_model(2 ** 62).SerializeToString())
    out = elsewhere / "r.json"
    t0 = time.monotonic()
    rc = main(["compare", str(a), str(b), "--random", "1", "--json", str(out)])
    took = time.monotonic() - t0
    assert rc in (0, 1), capsys.readouterr().err
    assert took < 30
    (n403,) = [f for f in json.loads(out.read_text())["findings"] if f["code"] == "N403"]
    assert n403["stage"] == "b" and "stopped after 2 s" in n403["message"] and "'loop'" in n403["message"]


def test_loop_that_ends_is_run(tmp_path, elsewhere, capsys):
    """The other side: a Loop of 10 iterations (x + 10, worked out by hand) runs and is compared."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    for p in (a, b):
        p.write_bytes(M.loop_model(10).SerializeToString())
    out = elsewhere / "r.json"
    rc = main(["compare", str(a), str(b), "--random", "1", "--json", str(out)])
    assert rc in (0, 1), capsys.readouterr().err
    rep = json.loads(out.read_text())
    assert not [f for f in rep["findings"] if f["code"] == "N403"]
    sess = ort.InferenceSession(a.read_bytes(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": np.array([0.5], np.float32)})
    assert y.tolist() == [10.5]


def test_lower_of_a_loop_that_does_not_end_is_one_line(tmp_path, elsewhere, capsys, monkeypatch):
    """`lower` runs the lowered model once as a check: a Loop of 2**62 iterations is stopped after LOOP_RUN_SECONDS
    (2 s here) and the file refused in one line; nothing is written (found by the fuzz run, case 1-606)."""
    from graphaudit.numeric import backends

    monkeypatch.setattr(backends, "LOOP_RUN_SECONDS", 2.0)
    src, out = tmp_path / "loop.onnx", elsewhere / "low.onnx"
    src.write_bytes(M.loop_model(2 ** 62).SerializeToString())
    t0 = time.monotonic()
    rc = main(["lower", str(src), "-o", str(out)])
    assert time.monotonic() - t0 < 30
    err = _one_line_exit_2(capsys, rc, str(src))
    assert "stopped after 2 s" in err and not out.exists()


def test_npz_member_larger_than_a_sample_is_one_line(tmp_path, capsys):
    """A .npz whose member inflates to 2**25 + 8 float32 elements (about 128 MiB from a few hundred KiB on disk):
    refused in one line naming the file instead of taking several GB for its statistics (fuzz case 1-440)."""
    import io
    import zipfile

    from graphaudit.data.stats import MAX_STATS_ELEMENTS

    shape = (1, 8, 2 ** 22 + 1)
    assert int(np.prod(shape)) > MAX_STATS_ELEMENTS
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    data = tmp_path / "big.npz"
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as z, z.open("x.npy", "w", force_zip64=True) as fh:
        fh.write(buf.getvalue())
        for _ in range(int(np.prod(shape)) * 4 // (1 << 20)):
            fh.write(bytes(1 << 20))
        fh.write(bytes(int(np.prod(shape)) * 4 % (1 << 20)))
    a, b = _write_pair(tmp_path, M.qdq_model().SerializeToString())
    rc = main(["compare", str(a), str(b), "--data", str(data)])
    err = _one_line_exit_2(capsys, rc, str(data))
    assert f"{int(np.prod(shape)):,} elements" in err


def _with_calibration(**attrs) -> onnx.ModelProto:
    """The base float stage with one HzCalibration (int8, scale 0.05) on the Relu output, plus ``attrs``."""
    m = M.float_model()
    relu = next(n for n in m.graph.node if n.op_type == "Relu")
    relu.output[0] = "r0"
    cal = onnx.helper.make_node("HzCalibration", ["r0"], ["r"], name="cal_r", domain="horizon", qtype="int8",
                                scales=[0.05], constant=1, **attrs)
    m.graph.node.insert(list(m.graph.node).index(relu) + 1, cal)
    m.opset_import.append(onnx.helper.make_opsetid("horizon", 1))
    return m


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("attrs, said", [(dict(zero_point="abc"), "attribute 'zero_point' is 'abc'"),
                                         (dict(constant="yes"), "attribute 'constant' is 'yes'")])
def test_malformed_horizon_attribute_is_n403_in_compare_and_one_line_in_lower(attrs, said, workers, tmp_path, elsewhere,
                                                                               capsys):
    """A Horizon attribute the lowering cannot read (a string where integers are read) makes that stage N403
    naming node and attribute while the stages around it are compared (before: ValueError traceback, exit 1, in
    compare with or without --workers); `lower` refuses the file in one line, exit 2."""
    paths = [tmp_path / f"{k}.onnx" for k in "abc"]
    paths[0].write_bytes(M.float_model().SerializeToString())
    calib = _with_calibration()
    cal = calib.graph.node[2]
    kept = [a for a in cal.attribute if a.name not in attrs]
    del cal.attribute[:]
    cal.attribute.extend(kept + [onnx.helper.make_attribute(k, v) for k, v in attrs.items()])
    paths[1].write_bytes(calib.SerializeToString())
    paths[2].write_bytes(_with_calibration().SerializeToString())
    out = elsewhere / "r.json"
    rc = main(["compare", *map(str, paths), "--random", "1", "--workers", workers, "--json", str(out)])
    assert rc in (0, 1), capsys.readouterr().err
    rep = json.loads(out.read_text())
    (n403,) = [f for f in rep["findings"] if f["code"] == "N403"]
    assert n403["stage"] == "b" and "HzCalibration x1 ('cal_r')" in n403["message"] and said in n403["message"]
    assert [(r["a"], r["b"]) for r in rep["numeric"]] == [("a", "c")]
    capsys.readouterr()
    rc = main(["lower", str(paths[1]), "-o", str(elsewhere / "low.onnx")])
    err = _one_line_exit_2(capsys, rc, str(paths[1]))
    assert said in err


def _external_weights(path, problem: str) -> None:
    """Save the base float stage at ``path`` with its weights in w.bin next to it, then damage them: ``missing``
    (w.bin removed), ``symlink`` (w.bin a symbolic link to a good copy), ``truncated`` (cut to 100 bytes),
    ``outside`` (location ../w.bin, a good copy one directory up)."""
    d = path.parent
    onnx.save(M.float_model(), path, save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
              size_threshold=0)
    w = d / "w.bin"
    if problem == "missing":
        w.unlink()
    elif problem == "symlink":
        w.rename(d.parent / "w_target.bin")
        w.symlink_to(d.parent / "w_target.bin")
    elif problem == "truncated":
        with open(w, "r+b") as fh:
            fh.truncate(100)
    elif problem == "outside":
        w.rename(d.parent / "w.bin")
        m = onnx.load(path, load_external_data=False)
        for t in m.graph.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = "../w.bin"
        path.write_bytes(m.SerializeToString())


@pytest.mark.parametrize("problem, workers", [("missing", "1"), ("symlink", "1"), ("truncated", "1"),
                                              ("outside", "1"), ("missing", "2")])
def test_unreadable_external_weights_of_one_stage_are_n403(problem, workers, tmp_path, capsys):
    """One stage whose external weights cannot be read (file missing, a symbolic link, cut short, outside the
    model's directory; onnx.load refuses each) is N403 naming the file and onnx's reason, and the stages around it
    are compared (before: GraphAuditError, exit 2, no report), as for a stage onnxruntime refuses."""
    d = tmp_path / "stages"
    d.mkdir()
    paths = [d / f"{k}.onnx" for k in "abc"]
    paths[0].write_bytes(M.float_model().SerializeToString())
    _external_weights(paths[1], problem)
    paths[2].write_bytes(M.float_model().SerializeToString())
    with pytest.raises(Exception):  # noqa: B017 - onnx's own reaction, whatever its type
        onnx.load(paths[1])
    out = tmp_path / "r.json"
    rc = main(["compare", *map(str, paths), "--random", "1", "--workers", workers, "--json", str(out)])
    assert rc in (0, 1), capsys.readouterr().err
    rep = json.loads(out.read_text())
    (n403,) = [f for f in rep["findings"] if f["code"] == "N403"]
    assert n403["stage"] == "b" and f"{paths[1]}: cannot load weights for execution" in n403["message"]
    assert [(r["a"], r["b"]) for r in rep["numeric"]] == [("a", "c")]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_stage_with_an_input_the_data_stage_lacks_is_n403(workers, tmp_path, elsewhere, capsys):
    """A later stage with one more graph input than the data stage ('extra', added to x; a valid model): the
    samples have no values for it, so that stage is N403 naming the input and the stages around it are compared
    (before: GraphAuditError, exit 2, no report)."""
    helper = onnx.helper
    paths = [tmp_path / f"{k}.onnx" for k in "abc"]
    paths[0].write_bytes(M.float_model().SerializeToString())
    m = M.float_model()
    m.graph.input.append(helper.make_tensor_value_info("extra", onnx.TensorProto.FLOAT, [1]))
    m.graph.node[0].input[0] = "x_plus"
    m.graph.node.insert(0, helper.make_node("Add", ["x", "extra"], ["x_plus"], name="add_extra"))
    onnx.checker.check_model(m)
    paths[1].write_bytes(m.SerializeToString())
    paths[2].write_bytes(M.float_model().SerializeToString())
    out = elsewhere / "r.json"
    rc = main(["compare", *map(str, paths), "--random", "1", "--workers", workers, "--json", str(out)])
    assert rc in (0, 1), capsys.readouterr().err
    rep = json.loads(out.read_text())
    (n403,) = [f for f in rep["findings"] if f["code"] == "N403"]
    assert n403["stage"] == "b" and f"{paths[1]}: the data have no values for input 'extra'" in n403["message"]
    assert [(r["a"], r["b"]) for r in rep["numeric"]] == [("a", "c")]
