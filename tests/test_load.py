"""Stage loading: external data, Constant weights, unnamed nodes, old-IR inputs, subgraphs, custom domains."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from graphaudit.errors import ModelLoadError
from graphaudit.load import load_stage


def _conv_model(with_name=True):
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4, 1, 1) * 0.1, "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv" if with_name else "")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_external_data_is_not_read_at_load(tmp_path):
    m = _conv_model()
    onnx.save(m, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    (tmp_path / "m.data").rename(tmp_path / "moved.data")  # bytes unavailable: structure must still load
    st = load_stage(tmp_path / "m.onnx")
    w = st.tensors["w"]
    assert w.kind == "initializer" and w.shape == (4, 4, 1, 1) and w.dtype == "FLOAT" and w.nbytes == 64
    assert w.digest() is None  # lazily computed, and the file is gone
    (tmp_path / "moved.data").rename(tmp_path / "m.data")
    assert w.digest() is not None
    np.testing.assert_array_equal(w.value(), np.arange(16, dtype=np.float32).reshape(4, 4, 1, 1) * 0.1)


def test_constant_node_weights_count_as_weights(stage_from_text):
    st = stage_from_text('<ir_version: 8, opset_import: ["" : 13]>\n'
                         "g (float[1,2] x) => (float[1,2] y) {\n"
                         "  k = Constant <value = float[2] {1.5, 2.5}> ()\n"
                         "  y = Add (x, k) }")
    k = st.tensors["k"]
    assert k.kind == "constant" and k.is_param and k.shape == (2,)
    np.testing.assert_array_equal(k.value(), np.array([1.5, 2.5], np.float32))


def test_unnamed_nodes_get_deterministic_unique_ids(tmp_path):
    m = _conv_model(with_name=False)
    m.graph.node.extend([helper.make_node("Relu", ["y"], ["z"]), helper.make_node("Relu", ["z"], ["z2"])])
    m.graph.output[0].name = "z2"
    onnx.save(m, tmp_path / "u.onnx")
    ids1 = list(load_stage(tmp_path / "u.onnx").nodes)
    ids2 = list(load_stage(tmp_path / "u.onnx").nodes)
    assert ids1 == ids2 == ["Conv:y", "Relu:z", "Relu:z2"]


def test_initializers_listed_as_inputs(stage_from_text):
    st = stage_from_text('<ir_version: 3, opset_import: ["" : 9]>\n'
                         "g (float[1,2] x, float[1,2] w) => (float[1,2] y) <float[1,2] w = {1.0, 2.0}> { y = Add (x, w) }")
    assert st.inputs == ["x"]
    assert st.tensors["w"].also_graph_input and st.tensors["w"].kind == "initializer"


def test_subgraphs_are_walked(tmp_path):
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                               [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, [2])])
    if_node = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)
    g = helper.make_graph([if_node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
                                           helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "if.onnx")
    st = load_stage(tmp_path / "if.onnx")
    assert set(st.nodes) == {"branch", "branch/then_branch/then_relu", "branch/else_branch/Neg:e"}
    assert st.nodes["branch/then_branch/then_relu"].parent == "branch"
    assert ("branch/then_branch/then_relu", 0) in st.tensors["x"].consumers
    assert st.op_histogram() == {"If": 1, "Relu": 1, "Neg": 1}


def test_custom_domains(stage_from_text):
    st = stage_from_text('<ir_version: 8, opset_import: ["" : 13, "horizon" : 1, "com.microsoft" : 1, "acme.npu" : 2]>\n'
                         "g (float[1,4] x) => (float[1,4] y) {\n"
                         "  a = horizon.HzCalibration <thresholds=[1.0]> (x)\n"
                         "  b = com.microsoft.Gelu (a)\n"
                         "  y = acme.npu.FancyOp (b) }")
    assert st.opsets == {"": 13, "horizon": 1, "com.microsoft": 1, "acme.npu": 2}
    assert st.used_domains() == {"horizon": 1, "com.microsoft": 1, "acme.npu": 1}
    assert [n.qualified_op for n in st.nodes.values()] == ["horizon::HzCalibration", "com.microsoft::Gelu",
                                                            "acme.npu::FancyOp"]


@pytest.mark.parametrize("content,msg", [
    (b"", "empty file"),
    (b"this is not a model at all\n" * 3, "not an ONNX model"),
])
def test_bad_files(tmp_path, content, msg):
    p = tmp_path / "bad.onnx"
    p.write_bytes(content)
    with pytest.raises(ModelLoadError, match=msg):
        load_stage(p)


def test_truncated_file(tmp_path):
    onnx.save(_conv_model(), tmp_path / "m.onnx")
    data = (tmp_path / "m.onnx").read_bytes()
    (tmp_path / "t.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="t.onnx"):
        load_stage(tmp_path / "t.onnx")


def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match="no such file"):
        load_stage(tmp_path / "nope.onnx")


def _external(tmp_path, location, length=None):
    m = _conv_model()
    w = m.graph.initializer[0]
    w.ClearField("float_data")
    w.ClearField("raw_data")
    w.data_location = onnx.TensorProto.EXTERNAL
    entries = {"location": location} | ({"length": str(length)} if length is not None else {})
    for k, v in entries.items():
        w.external_data.add(key=k, value=v)
    onnx.save(m, tmp_path / "m.onnx")
    return load_stage(tmp_path / "m.onnx").tensors["w"]


def test_external_data_reads_only_what_dims_imply(tmp_path):
    (tmp_path / "big.bin").write_bytes(b"\0" * 64 + b"\1" * 10_000)
    w = _external(tmp_path, "big.bin")  # no length: read 64 bytes (4x4x1x1 float32), not the whole file
    np.testing.assert_array_equal(w.value(), np.zeros((4, 4, 1, 1), np.float32))
    assert _external(tmp_path, "big.bin", length=10_064).digest() is None  # length disagrees with dims x dtype


def test_external_data_never_opens_special_files(tmp_path):
    import os

    os.mkfifo(tmp_path / "fifo")
    assert _external(tmp_path, "fifo").digest() is None  # would block forever if opened
    assert _external(tmp_path, "../outside.bin").digest() is None


@pytest.mark.parametrize("body,msg", [
    ("a = Relu (b)\n b = Relu (a)\n y = Relu (x)", "cycle"),
    ("y = Add (x, nope)", "no node, input or initializer defines"),
    ("y = Relu (x)\n y = Sigmoid (x)", "produced twice"),
])
def test_inconsistent_graphs_are_rejected(stage_from_text, body, msg):
    with pytest.raises(ModelLoadError, match=msg):
        stage_from_text('<ir_version: 8, opset_import: ["" : 13]>\n'
                        f"g (float[1,4] x) => (float[1,4] y) {{ {body} }}")


def test_names_that_are_not_utf8(tmp_path):
    m = _conv_model()
    m.graph.node[0].name = "conv"
    data = m.SerializeToString().replace(b"conv", b"c\xffnv")
    (tmp_path / "u.onnx").write_bytes(data)
    st = load_stage(tmp_path / "u.onnx")
    assert list(st.nodes) == ["c\ufffdnv"]


def test_the_networkx_graph_is_built_on_first_access(stage_from_text):
    """One graph node per ONNX node and one edge per (producer, consumer, tensor) (from the text: Relu r is read by
    Add, twice, and by Mul; Add s by Mul), built only when ``graph`` is read; a file not in topological order that
    has no cycle loads."""
    st = stage_from_text('<ir_version: 8, opset_import: ["" : 13]>\n'
                         "g (float[1,4] x) => (float[1,4] y) {\n"
                         "  y = Mul (r, s)\n  s = Add (r, r)\n  r = Relu (x) }")
    assert st._graph is None
    g = st.graph
    assert sorted(g.nodes) == sorted(st.nodes) and len(st.nodes) == 3
    assert sorted((st.nodes[u].op_type, st.nodes[v].op_type, k) for u, v, k in g.edges(keys=True)) == [
        ("Add", "Mul", "s"), ("Relu", "Add", "r"), ("Relu", "Mul", "r")]
    assert g.nodes[next(iter(st.nodes))]["info"] is next(iter(st.nodes.values()))
    assert st.graph is g


def test_weight_bytes_are_not_copied_at_load(tmp_path):
    """A weight's bytes are read from the protobuf only when its digest is asked for (the reader is lazy), and the
    digest is what BLAKE2b-128 over dtype, shape and raw bytes gives."""
    import hashlib

    onnx.save(_conv_model(), tmp_path / "m.onnx")
    st = load_stage(tmp_path / "m.onnx")
    w = st.tensors["w"]
    assert w._digest is None and w.nbytes == 64
    raw = (np.arange(16, dtype=np.float32).reshape(4, 4, 1, 1) * 0.1).tobytes()
    h = hashlib.blake2b(digest_size=16)
    h.update(b"FLOAT(4, 4, 1, 1)")
    h.update(raw)
    assert w.digest() == h.hexdigest()


def _with_duplicate(src, out, first: bool):
    """The real stage ``src`` with a second, all-zero initializer under the name of its first Conv's weight, listed
    before (``first``) or after the real one; returns that name."""
    m = onnx.load(src)
    w = next(n for n in m.graph.node if n.op_type == "Conv").input[1]
    real = next(t for t in m.graph.initializer if t.name == w)
    zero = numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(real)), w)
    if first:
        m.graph.initializer.insert(0, zero)
    else:
        m.graph.initializer.append(zero)
    onnx.save(m, out)
    return w


@pytest.mark.parametrize("zero_first", [True, False])
def test_duplicate_initializer_names_are_recorded_and_the_first_is_kept(samples, tmp_path, elsewhere, capsys, zero_first):
    """A real stage with one weight listed twice (the real one and zeros). onnxruntime decides which it computes
    with: its outputs equal those of the file with the weight zeroed when the zeros come first, and those of the
    untouched file when they come last (1.32.0: the first, although its warning says 'the latest encountered').
    graphaudit's loader keeps the same one (its digest), records the name, and explain reports S113 naming the
    file and the name; the run goes on (exit 0: a warning)."""
    import onnxruntime as ort

    from graphaudit.cli import main

    src = samples / "ort" / "ppocr_cls" / "ppocr_cls_optimized.onnx"
    dup = tmp_path / "dup.onnx"
    w = _with_duplicate(src, dup, zero_first)
    zeroed = onnx.load(src)
    for t in zeroed.graph.initializer:
        if t.name == w:
            t.CopyFrom(numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(t)), w))
    onnx.save(zeroed, tmp_path / "zeroed.onnx")
    with pytest.raises(onnx.checker.ValidationError, match="not unique"):
        onnx.checker.check_model(onnx.load(dup))

    so = ort.SessionOptions()
    so.log_severity_level = 3  # its duplicate warning
    x = np.random.default_rng(0).random((1, 3, 48, 192), dtype=np.float32)

    def outputs(p):
        s = ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"])
        return s.run(None, {s.get_inputs()[0].name: x})[0]

    ran_with = tmp_path / "zeroed.onnx" if zero_first else src
    assert np.array_equal(outputs(dup), outputs(ran_with))
    assert not np.array_equal(outputs(src), outputs(tmp_path / "zeroed.onnx"))  # the two weights do differ

    st = load_stage(dup)
    assert st.duplicate_initializers == {w: 2}
    assert st.tensors[w].digest() == load_stage(ran_with).tensors[w].digest()
    assert load_stage(src).duplicate_initializers == {}
    assert main(["explain", str(dup), "--out", str(elsewhere / "out"), "-v"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"S113 [dup] {dup}: 1 initializer name(s) listed more than once: '{w}' x2." in out


def test_duplicate_names_in_a_subgraph_are_named_with_their_node(tmp_path):
    """An If branch listing 'c' twice: recorded under the branch's prefix (If node 'if', attribute then_branch)."""
    then = helper.make_graph([helper.make_node("Identity", ["c"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [1])],
                             [numpy_helper.from_array(np.array([1.0], np.float32), "c"),
                              numpy_helper.from_array(np.array([2.0], np.float32), "c")])
    other = helper.make_graph([helper.make_node("Identity", ["d"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, [1])],
                              [numpy_helper.from_array(np.array([3.0], np.float32), "d")])
    node = helper.make_node("If", ["b"], ["y"], name="if", then_branch=then, else_branch=other)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("b", onnx.TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    st = load_stage(tmp_path / "m.onnx")
    assert st.duplicate_initializers == {"if/then_branch/c": 2}
def test_tensor_order_and_weight_names(tmp_path):
    """The tensor table is in the order the graph's inputs and nodes give (not the initializer list's): the graph
    input, then each node's inputs and outputs in node order, then what no node reads or writes, by name;
    ``weight_names`` lists the initializers and Constant outputs in that order. A weight stored as ``float_data``
    (not ``raw_data``) is read back by its lazy reader. Expected lists worked out by hand from the model below."""
    inits = [helper.make_tensor("b2", onnx.TensorProto.FLOAT, [2], [0.5, 1.5]),  # float_data, listed first
             numpy_helper.from_array(np.array([9.0, 9.0], np.float32), "unused_w"),
             numpy_helper.from_array(np.array([2.0, 3.0], np.float32), "w1")]
    nodes = [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array([1.0, 1.0], np.float32))),
             helper.make_node("Mul", ["x", "w1"], ["m"]),
             helper.make_node("Add", ["m", "k"], ["a"]),
             helper.make_node("Add", ["a", "b2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2])], inits,
                          value_info=[helper.make_tensor_value_info("zz_info", onnx.TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    st = load_stage(tmp_path / "m.onnx")
    assert list(st.tensors) == ["x", "k", "w1", "m", "a", "b2", "y", "unused_w", "zz_info"]
    assert st.weight_names() == ["k", "w1", "b2", "unused_w"]
    assert st.weight_names() is st.weight_names()  # listed once
    np.testing.assert_array_equal(st.tensors["b2"].value(), np.array([0.5, 1.5], np.float32))
    np.testing.assert_array_equal(st.tensors["w1"].value(), np.array([2.0, 3.0], np.float32))
    # a node's input names are the table's own key objects
    add = next(n for n in st.nodes.values() if n.inputs == ("a", "b2"))
    assert all(x is next(k for k in st.tensors if k == x) for x in add.inputs)
