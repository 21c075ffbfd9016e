"""ONNX inputs for the fuzzer: two small real stages (float and QDQ), byte-level damage, hostile-but-parseable graphs.

Every function takes a ``random.Random`` and returns the bytes of one file (or, for external data, a dict of
relative path -> bytes). Nothing here reads the repository's samples: the models are built with ``onnx.helper``.
"""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

#: The base stages' input: float32 [1,3,8,8] (x), output float32 [1,10] (y).
INPUT_SHAPE = (1, 3, 8, 8)
_OPSET = [h.make_opsetid("", 17)]


def _weights() -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    return [nh.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "conv_w"),
            nh.from_array(np.zeros(4, np.float32), "conv_b"),
            nh.from_array(rng.normal(0, 0.3, (10, 4)).astype(np.float32), "fc_w"),
            nh.from_array(np.zeros(10, np.float32), "fc_b")]


def float_model() -> onnx.ModelProto:
    """x -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> y (the 'original' stage)."""
    nodes = [h.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"], name="relu"),
             h.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             h.make_node("Flatten", ["p"], ["f"], name="flat"),
             h.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    g = h.make_graph(nodes, "fuzzbase", [h.make_tensor_value_info("x", T.FLOAT, list(INPUT_SHAPE))],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 10])], _weights())
    return h.make_model(g, opset_imports=_OPSET, producer_name="graphaudit-fuzz")


def qdq_model() -> onnx.ModelProto:
    """The float model with QuantizeLinear/DequantizeLinear (int8, scale 1/64) on x and on the Relu output."""
    m = float_model()
    g = m.graph
    consts = [nh.from_array(np.array(1 / 64, np.float32), "s"), nh.from_array(np.array(0, np.int8), "z")]
    g.initializer.extend(consts)
    new = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="x_q"),
           h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="x_dq")]
    for n in g.node:
        if n.name == "conv":
            n.input[0] = "xd"
        if n.name == "pool":
            n.input[0] = "rd"
    nodes = new + list(g.node)
    nodes.insert(4, h.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"], name="r_q"))
    nodes.insert(5, h.make_node("DequantizeLinear", ["rq", "s", "z"], ["rd"], name="r_dq"))
    del g.node[:]
    g.node.extend(nodes)
    return m


def good(rng: random.Random) -> bytes:
    """One of the two base stages, unchanged."""
    return (qdq_model() if rng.random() < 0.5 else float_model()).SerializeToString()


# -- byte-level damage -------------------------------------------------------------------------------------------------

def truncated(rng: random.Random) -> bytes:
    b = good(rng)
    return b[:rng.randrange(0, len(b))]


def bit_flipped(rng: random.Random) -> bytes:
    b = bytearray(good(rng))
    for _ in range(rng.choice([1, 2, 4, 16, 64])):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def spliced(rng: random.Random) -> bytes:
    """Random bytes inserted, a range zeroed, or a chunk duplicated."""
    b = bytearray(good(rng))
    i = rng.randrange(len(b))
    op = rng.randrange(3)
    if op == 0:
        b[i:i] = rng.randbytes(rng.randrange(1, 64))
    elif op == 1:
        b[i:i + rng.randrange(1, 200)] = bytes(min(200, len(b) - i))
    else:
        j = min(len(b), i + rng.randrange(1, 300))
        b[j:j] = b[i:j]
    return bytes(b)


def junk(rng: random.Random) -> bytes:
    return rng.choice([b"", rng.randbytes(rng.randrange(1, 4096)), b"\x89PNG\r\n\x1a\n" + rng.randbytes(40),
                       b"ir_version: 8\n", b"\x08" * 10, b"\x0a\xff\xff\xff\xff\x0f"])


# -- hostile but parseable ---------------------------------------------------------------------------------------------

_BAD_TEXT = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]


def _non_utf8(rng: random.Random, m: onnx.ModelProto) -> bytes:
    """One string field of ``m`` (op type, domain, attribute, node, graph input/output/initializer name...) made
    invalid UTF-8 of the same length, by patching the serialized bytes (onnx refuses to set such a str)."""
    g = m.graph
    mark = "QZQZQZQZ"
    where = rng.choice(["op_type", "domain", "attr", "input", "output", "init", "node", "graph", "producer",
                        "value", "doc", "meta"])
    if where == "op_type":
        g.node[rng.randrange(len(g.node))].op_type = mark
    elif where == "domain":
        g.node[0].domain = mark
        m.opset_import.append(h.make_opsetid(mark, 1))
    elif where == "attr":
        g.node[0].attribute.append(h.make_attribute(mark, 1))
    elif where == "input":
        g.input[0].name = mark
        for n in g.node:
            n.input[:] = [mark if x == "x" else x for x in n.input]
    elif where == "output":
        g.output[0].name = mark
        for n in g.node:
            n.output[:] = [mark if x == "y" else x for x in n.output]
    elif where == "init":
        old = g.initializer[0].name
        g.initializer[0].name = mark
        for n in g.node:
            n.input[:] = [mark if x == old else x for x in n.input]
    elif where == "node":
        g.node[0].name = mark
    elif where == "graph":
        g.name = mark
    elif where == "producer":
        m.producer_name = mark
    elif where == "value":
        g.node[0].attribute.append(h.make_attribute("note", mark))
    elif where == "doc":
        g.doc_string = mark
    else:
        m.metadata_props.append(onnx.StringStringEntryProto(key=mark, value="v"))
    bad = rng.choice(_BAD_TEXT)
    repl = (bad * 8)[:8] if len(bad) == 1 else (bad + b"ZZZZZZZZ")[:8]
    return m.SerializeToString().replace(mark.encode(), repl)


def _dims(rng: random.Random, m: onnx.ModelProto) -> None:
    dims = rng.choice([[2 ** 31, 2 ** 31], [2 ** 62], [1, 3, 2 ** 40, 8], [-5, 3, 8, 8], [0, 3, 8, 8],
                       [1, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1], [1, 3, 4096, 4096], [10 ** 18]])
    shape = m.graph.input[0].type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        shape.dim.add().dim_value = d


def _attr(rng: random.Random, m: onnx.ModelProto) -> None:
    a = onnx.AttributeProto()
    a.name = rng.choice(["pads", "alpha", "axis", "x"])
    kind = rng.randrange(3)
    if kind == 0:
        a.ref_attr_name = "outer"
        a.type = onnx.AttributeProto.FLOAT
    elif kind == 1:
        a.type = onnx.AttributeProto.UNDEFINED
    else:  # a type whose value field is left empty, or an int attribute where a float is read
        a.type = rng.choice([onnx.AttributeProto.GRAPH, onnx.AttributeProto.TENSOR, onnx.AttributeProto.SPARSE_TENSOR])
        a.i = 3
    n = m.graph.node[rng.randrange(len(m.graph.node))]
    n.attribute.append(a)


def _graph_damage(rng: random.Random, m: onnx.ModelProto) -> None:
    g = m.graph
    kind = rng.randrange(12)
    n = g.node[rng.randrange(len(g.node))]
    if kind == 0:
        n.input.append(n.output[0])  # a cycle
    elif kind == 1:
        g.node.append(onnx.NodeProto(op_type="Relu", input=["x"], output=[n.output[0]]))  # produced twice
    elif kind == 2:
        n.input[0] = "nowhere"
    elif kind == 3:
        g.input[0].type.tensor_type.elem_type = rng.choice([0, 8, 999, 16, 24])
    elif kind == 4:
        g.initializer[0].raw_data = rng.randbytes(rng.randrange(0, 64))
        del g.initializer[0].float_data[:]
    elif kind == 5:
        del g.initializer[0].dims[:]
        g.initializer[0].dims.extend([2 ** 40, 2 ** 20])
    elif kind == 6:
        m.opset_import[0].version = rng.choice([0, 1, 10000, -3])
    elif kind == 7:
        m.ir_version = rng.choice([0, 1, 2 ** 62, -1])
    elif kind == 8:
        n.op_type = rng.choice(["", "NoSuchOp", "Loop", "If", "HzCalibration", "QLinearConv"])
    elif kind == 9:
        n.name = rng.choice(["\x1b[2J\x1b]0;pwn\x07", "\u202eevil", "a" * 100000, "../../etc/passwd", "\n\n"])
    elif kind == 10:
        n.input.extend(["x"] * 2000)
    else:
        del g.node[rng.randrange(len(g.node))]


def _nested_ifs(depth: int) -> onnx.ModelProto:
    """``depth`` If nodes nested in each other's then-branch."""
    inner = h.make_graph([h.make_node("Identity", ["x"], ["o0"])], "b0", [],
                         [h.make_tensor_value_info("o0", T.FLOAT, None)])
    leaf = inner
    for k in range(1, depth):  # only the then-branch nests (both would double the size at every level)
        inner = h.make_graph([h.make_node("If", ["c"], [f"o{k}"], then_branch=inner, else_branch=leaf)], f"b{k}",
                             [], [h.make_tensor_value_info(f"o{k}", T.FLOAT, None)])
    g = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=leaf)], "nested",
                     [h.make_tensor_value_info("x", T.FLOAT, [1]), h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1])])
    return h.make_model(g, opset_imports=_OPSET)


def loop_model(trip: int) -> onnx.ModelProto:
    """x [1] -> Loop(trip count ``trip``, condition always true, body v + 1) -> y."""
    body = h.make_graph([h.make_node("Identity", ["cond"], ["cond_out"]), h.make_node("Add", ["v", "one"], ["v_out"])],
                        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
                                 h.make_tensor_value_info("v", T.FLOAT, [1])],
                        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, [1])],
                        [h.make_tensor("one", T.FLOAT, [1], [1.0])])
    g = h.make_graph([h.make_node("Loop", ["M", "c", "x"], ["y"], name="loop", body=body)], "loop",
                     [h.make_tensor_value_info("x", T.FLOAT, [1])], [h.make_tensor_value_info("y", T.FLOAT, [1])],
                     [h.make_tensor("M", T.INT64, [], [trip]), h.make_tensor("c", T.BOOL, [], [True])])
    return h.make_model(g, opset_imports=_OPSET)


def identity_chain(n: int) -> onnx.ModelProto:
    """x [1,4] -> ``n`` Identity nodes -> the last tensor."""
    nodes = [h.make_node("Identity", ["x" if i == 0 else f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(n)]
    g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info(f"t{n}", T.FLOAT, [1, 4])])
    return h.make_model(g, opset_imports=_OPSET)


def hostile(rng: random.Random) -> bytes:
    """A graph that parses as protobuf but breaks an assumption: names that are not UTF-8, impossible dims,
    attribute references outside a function, undefined attribute types, cycles, double producers, bad dtypes,
    opsets, IR versions, terminal escapes in names, deep nesting, a Loop that does not end, long chains."""
    m = qdq_model() if rng.random() < 0.5 else float_model()
    kind = rng.choice(["utf8", "utf8", "dims", "dims", "attr", "damage", "damage", "damage", "nested", "loop", "chain"])
    if kind == "utf8":
        return _non_utf8(rng, m)
    if kind == "dims":
        _dims(rng, m)
    elif kind == "attr":
        _attr(rng, m)
    elif kind == "damage":
        for _ in range(rng.randrange(1, 4)):
            _graph_damage(rng, m)
    elif kind == "nested":
        m = _nested_ifs(rng.choice([3, 12, 22]))  # protobuf parses about 100 message levels
    elif kind == "loop":
        m = loop_model(rng.choice([2 ** 62, 2 ** 40, 10]))
    else:
        m = identity_chain(rng.choice([500, 2000, 5000]))
    return m.SerializeToString()


def external(rng: random.Random) -> dict[str, bytes]:
    """A model whose conv weight lives in external data: a missing file, a file outside the model's directory
    (``../outside.bin``, an absolute path, a symlink is not made), a directory, offsets and lengths out of range.
    Returns {relative path: bytes}; ``../outside.bin`` is written by the runner next to the input directory."""
    m = float_model()
    w = m.graph.initializer[0]
    data = nh.to_array(w).tobytes()
    w.ClearField("float_data")
    w.ClearField("raw_data")
    w.data_location = T.EXTERNAL
    loc, offset, length = rng.choice([
        ("weights.bin", 0, len(data)), ("missing.bin", 0, len(data)), ("../outside.bin", 0, len(data)),
        ("/etc/hostname", 0, len(data)), ("sub", 0, len(data)), ("weights.bin", 2 ** 62, len(data)),
        ("weights.bin", -4, len(data)), ("weights.bin", 0, 2 ** 40), ("weights.bin", 0, -1),
        ("weights.bin", "x", "y"), ("", 0, 0), ("weights.bin\x00.txt", 0, len(data))])
    for k, v in (("location", loc), ("offset", str(offset)), ("length", str(length))):
        w.external_data.append(onnx.StringStringEntryProto(key=k, value=v))
    files = {"model.onnx": m.SerializeToString(), "weights.bin": data[:rng.choice([len(data), len(data) // 2])],
             "sub/readme.txt": b"a directory named as a weight file"}
    return files
