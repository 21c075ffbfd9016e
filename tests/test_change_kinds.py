"""Hand-built stage pairs with known answers, one per change kind and pattern."""

from __future__ import annotations

from collections import Counter

import pytest

from graphaudit.classify import classify, coverage
from graphaudit.errors import StagesUnrelatedError
from graphaudit.lineage import align

H = '<ir_version: 8, opset_import: ["" : 13]>'
HZ = '<ir_version: 8, opset_import: ["" : 13, "horizon" : 1]>'


def changes(a, b):
    al = align(a, b, check_related=False)
    ch = classify(al)
    return al, ch, coverage(al, ch)


def by_kind(ch):
    return Counter((c.kind, c.pattern) for c in ch)


CONV_BN = H + """
g (float[1,2,4,4] x) => (float[1,2,4,4] y)
<float[2,2,1,1] w = {1.0, 0.5, -1.0, 2.0}, float[2] s = {1.0, 2.0}, float[2] b = {0.1, 0.2},
 float[2] m = {0.0, 1.0}, float[2] v = {1.0, 4.0}> {
  c = Conv <kernel_shape=[1,1]> (x, w)
  n = BatchNormalization (c, s, b, m, v)
  y = Relu (n)
}"""

CONV_FOLDED = H + """
g (float[1,2,4,4] x) => (float[1,2,4,4] y)
<float[2,2,1,1] wf = {1.0, 0.5, -2.0, 4.0}, float[2] bf = {0.1, -0.8}> {
  n = Conv <kernel_shape=[1,1]> (x, wf, bf)
  y = Relu (n)
}"""


def test_kept_identical(stage_from_text):
    a = stage_from_text(CONV_BN, "a")
    b = stage_from_text(CONV_BN, "b")
    _, ch, cov = changes(a, b)
    assert by_kind(ch) == {("kept", "Conv"): 1, ("kept", "BatchNormalization"): 1, ("kept", "Relu"): 1}
    assert cov.a_ratio == cov.b_ratio == 1.0


def test_fused_conv_batchnorm_with_renamed_weights(stage_from_text):
    a = stage_from_text(CONV_BN, "a")
    b = stage_from_text(CONV_FOLDED, "b")
    al, ch, cov = changes(a, b)
    fused = [c for c in ch if c.kind == "fused"]
    assert len(fused) == 1
    assert fused[0].pattern == "Conv+BatchNormalization -> Conv"
    assert {a.nodes[n].op_type for n in fused[0].a_nodes} == {"Conv", "BatchNormalization"}
    assert fused[0].confidence == 1.0
    assert al.tensor_map["n"].a == "n"  # fused Conv output carries the BN value
    assert ("kept", "Relu") in by_kind(ch)
    assert cov.a_ratio == 1.0


def test_fused_conv_batchnorm_unnamed_structure(stage_from_text):
    """Same fold, but every tensor in b renamed: the aligner must get there by structure."""
    a = stage_from_text(CONV_BN, "a")
    b = stage_from_text(CONV_FOLDED.replace(" n ", " t7 ").replace("(n)", "(t7)").replace(" n =", " t7 ="), "b")
    al, ch, _ = changes(a, b)
    assert ("fused", "Conv+BatchNormalization -> Conv") in by_kind(ch)
    assert al.tensor_map["t7"].a == "n"


def test_modified_attribute_and_weights(stage_from_text):
    a = stage_from_text(H + """
    g (float[1,4] x) => (float[1,4] y) <float[1,4] k = {1.0, 2.0, 3.0, 4.0}> {
      t = Mul (x, k)
      y = LeakyRelu <alpha=0.1> (t) }""", "a")
    b = stage_from_text(H + """
    g (float[1,4] x) => (float[1,4] y) <float[1,4] k = {1.0, 2.0, 3.0, 5.0}> {
      t = Mul (x, k)
      y = LeakyRelu <alpha=0.2> (t) }""", "b")
    _, ch, _ = changes(a, b)
    mod = {c.pattern: c.evidence for c in ch if c.kind == "modified"}
    assert set(mod) == {"Mul modified", "LeakyRelu modified"}
    assert "weight values differ" in mod["Mul modified"]
    assert "alpha" in mod["LeakyRelu modified"]


def test_default_attribute_made_explicit_is_not_a_change(stage_from_text):
    a = stage_from_text(H + "g (float[1,4] x) => (float[1,4] y) { y = LeakyRelu (x) }", "a")
    b = stage_from_text(H + "g (float[1,4] x) => (float[1,4] y) { y = LeakyRelu <alpha=0.01> (x) }", "b")
    _, ch, _ = changes(a, b)
    assert by_kind(ch) == {("kept", "LeakyRelu"): 1}


def test_attributes_set_alike_need_no_schema(stage_from_text):
    """The ONNX schema (onnx's operator registry, 7 MB of RSS once built) is read only for a node pair where one sets
    an attribute the other omits; a value that differs is still found without it, and an omitted default still
    reads as the default."""
    from graphaudit.classify import _schema_defaults

    a = stage_from_text(H + "g (float[1,4] x) => (float[1,4] y) { t = LeakyRelu <alpha=0.1> (x)\n y = Relu (t) }", "a")
    b = stage_from_text(H + "g (float[1,4] x) => (float[1,4] y) { t = LeakyRelu <alpha=0.2> (x)\n y = Relu (t) }", "b")
    _schema_defaults.cache_clear()
    _, ch, _ = changes(a, b)
    assert by_kind(ch) == {("modified", "LeakyRelu modified"): 1, ("kept", "Relu"): 1}
    assert _schema_defaults.cache_info().misses == 0
    c = stage_from_text(H + "g (float[1,4] x) => (float[1,4] y) { t = LeakyRelu (x)\n y = Relu (t) }", "c")
    d = stage_from_text(H + "g (float[1,4] x) => (float[1,4] y) { t = LeakyRelu <alpha=0.02> (x)\n y = Relu (t) }", "d")
    _, ch, _ = changes(c, d)
    assert by_kind(ch) == {("modified", "LeakyRelu modified"): 1, ("kept", "Relu"): 1}
    assert _schema_defaults.cache_info().misses == 1


def test_matmul_add_to_gemm(stage_from_text):
    a = stage_from_text(H + """
    g (float[1,3] x) => (float[1,2] y) <float[3,2] w = {1.0,2.0,3.0,4.0,5.0,6.0}, float[2] c = {0.5, 0.5}> {
      m = MatMul (x, w)
      y = Add (m, c) }""", "a")
    b = stage_from_text(H + """
    g (float[1,3] x) => (float[1,2] y) <float[3,2] w = {1.0,2.0,3.0,4.0,5.0,6.0}, float[2] c = {0.5, 0.5}> {
      y = Gemm (x, w, c) }""", "b")
    _, ch, cov = changes(a, b)
    assert by_kind(ch) == {("fused", "MatMul+Add -> Gemm"): 1}
    assert cov.a_ratio == cov.b_ratio == 1.0


def test_gemm_to_conv_replaced(stage_from_text):
    a = stage_from_text(H + """
    g (float[1,4,1,1] x) => (float[1,2] y) <float[2,4] w = {1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0}, int64[2] s = {1, 4}> {
      f = Reshape (x, s)
      y = Gemm <transB=1> (f, w) }""", "a")
    b = stage_from_text(H + """
    g (float[1,4,1,1] x) => (float[1,2] y) <float[2,4,1,1] w4 = {1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0}, int64[2] s2 = {1, 2}> {
      c = Conv (x, w4)
      y = Reshape (c, s2) }""", "b")
    _, ch, _ = changes(a, b)
    kinds = by_kind(ch)
    assert ("replaced", "Reshape+Gemm -> Conv+Reshape") in kinds


def test_hardswish_decomposed_into_hardsigmoid_mul(stage_from_text):
    a = stage_from_text('<ir_version: 8, opset_import: ["" : 14]>\n'
                        "g (float[1,4] x) => (float[1,4] y) { h = HardSwish (x)\n y = Relu (h) }", "a")
    b = stage_from_text(
        '<ir_version: 8, opset_import: ["" : 14]>\n'
        "g (float[1,4] x) => (float[1,4] y) { s = HardSigmoid <alpha=0.1666667, beta=0.5> (x)\n"
        " h = Mul (x, s)\n y = Relu (h) }", "b")
    _, ch, cov = changes(a, b)
    assert ("replaced", "HardSwish -> HardSigmoid+Mul") in by_kind(ch)
    assert cov.b_ratio == 1.0


def test_sigmoid_mul_to_hzswish(stage_from_text):
    a = stage_from_text(H + """
    g (float[1,4] x) => (float[1,4] y) { s = Sigmoid (x)
      m = Mul (x, s)
      y = Relu (m) }""", "a")
    b = stage_from_text(HZ + """
    g (float[1,4] x) => (float[1,4] y) { m = horizon.HzSwish (x)
      y = Relu (m) }""", "b")
    _, ch, _ = changes(a, b)
    assert ("fused", "Sigmoid+Mul -> HzSwish") in by_kind(ch)


def test_removed_identity_and_dropout(stage_from_text):
    a = stage_from_text(H + """
    g (float[1,4] x) => (float[1,4] y) { i = Identity (x)
      r = Relu (i)
      d = Dropout (r)
      y = Sigmoid (d) }""", "a")
    b = stage_from_text(H + """
    g (float[1,4] x) => (float[1,4] y) { r = Relu (x)
      y = Sigmoid (r) }""", "b")
    _, ch, cov = changes(a, b)
    assert by_kind(ch) == {("removed", "Identity removed"): 1, ("removed", "Dropout removed"): 1,
                           ("kept", "Relu"): 1, ("kept", "Sigmoid"): 1}
    assert cov.a_ratio == 1.0


def test_removed_constant_folding(stage_from_text):
    a = stage_from_text(H + """
    g (float[1,2,3] x) => (float[1,6] y) {
      sh = Shape (x)
      b = Slice (sh, st, en)
      c = Concat <axis=0> (b, k)
      y = Reshape (x, c) }""".replace("{\n", "<int64[1] st = {0}, int64[1] en = {1}, int64[1] k = {6}> {\n", 1), "a")
    b = stage_from_text(H + """
    g (float[1,2,3] x) => (float[1,6] y) <int64[2] shape = {1, 6}> {
      y = Reshape (x, shape) }""", "b")
    _, ch, cov = changes(a, b)
    kinds = by_kind(ch)
    assert kinds[("kept", "Reshape")] == 1
    assert kinds[("removed", "constant folding (Shape+Slice+Concat -> initializer)")] == 1
    assert cov.a_ratio == 1.0


def test_inserted_qdq_pair_and_weight_dequantize(stage_from_text):
    a = stage_from_text(H + """
    g (float[1,2] x) => (float[1,2] y) <float[2,2] w = {1.0, 2.0, 3.0, 4.0}> {
      y = MatMul (x, w) }""", "a")
    b = stage_from_text(H + """
    g (float[1,2] x) => (float[1,2] y)
    <int8[2,2] wq = {10, 20, 30, 40}, float ws = {0.1}, int8 wz = {0}, float s = {0.05}, int8 z = {0}> {
      q = QuantizeLinear (x, s, z)
      xd = DequantizeLinear (q, s, z)
      w = DequantizeLinear (wq, ws, wz)
      y = MatMul (xd, w) }""", "b")
    al, ch, cov = changes(a, b)
    assert by_kind(ch) == {("kept", "MatMul"): 1, ("inserted", "QuantizeLinear/DequantizeLinear pair"): 1,
                           ("inserted", "DequantizeLinear (quantized weight)"): 1}
    assert al.tensor_map["xd"].a == "x" and al.tensor_map["xd"].kind == "quantized"
    assert al.tensor_map["wq"].a == "w"
    assert cov.b_ratio == 1.0


def test_inserted_horizon_nodes(stage_from_text):
    a = stage_from_text(H + """
    g (float[1,3,2,2] x) => (float[1,3,2,2] y) <float[3,1,1,1] w = {1.0, 2.0, 3.0}> {
      y = Conv <group=3> (x, w) }""", "a")
    b = stage_from_text(HZ + """
    g (float[1,3,2,2] x) => (float[1,3,2,2] y)
    <float[3,1,1,1] w = {1.0, 2.0, 3.0}, float[3] pw = {0.017, 0.0175, 0.0174}, float[3] pb = {0.07, 0.2, 0.42}> {
      p = horizon.HzPreprocess <input_type="RGB_128"> (x, pw, pb)
      pc = horizon.HzCalibration <thresholds=[2.5], scales=[0.0197], qtype="int8"> (p)
      wc = horizon.HzCalibration <thresholds=[1.0, 2.0, 3.0], scales=[0.0079, 0.0157, 0.0236], qtype="int8", axis=0> (w)
      y = Conv <group=3> (pc, wc) }""", "b")
    al, ch, cov = changes(a, b)
    assert by_kind(ch) == {("kept", "Conv"): 1, ("inserted", "HzPreprocess"): 1,
                           ("inserted", "HzCalibration(activation)"): 1, ("inserted", "HzCalibration(weight)"): 1}
    assert al.tensor_map["pc"].a == "x"
    assert cov.b_ratio == 1.0


def test_inserted_cast_and_layout_transpose(stage_from_text):
    a = stage_from_text(H + """
    g (float[1,3,2,2] x) => (float[1,3,2,2] y) { y = Relu (x) }""", "a")
    b = stage_from_text(H + """
    g (float[1,3,2,2] x) => (float[1,3,2,2] y) {
      t = Transpose <perm=[0,2,3,1]> (x)
      c = Cast <to=10> (t)
      c2 = Cast <to=1> (c)
      t2 = Transpose <perm=[0,3,1,2]> (c2)
      y = Relu (t2) }""", "b")
    al, ch, _ = changes(a, b)
    assert by_kind(ch) == {("kept", "Relu"): 1, ("inserted", "layout Transpose"): 2, ("inserted", "Cast"): 2}
    assert all(c.tensors == ["x"] for c in ch if c.kind == "inserted")
    assert al.tensor_map["t2"].a == "x"


def test_absorbed_relu_is_not_paired_by_name(stage_from_text):
    """docs/CASES.md case 7: in the QDQ graph `relu_out` is the Conv output (pre-activation)."""
    a = stage_from_text(H + """
    g (float[1,1,2,2] x) => (float[1,1,2,2] y) <float[1,1,1,1] w = {-1.0}> {
      conv_out = Conv (x, w)
      relu_out = Relu (conv_out)
      y = Sigmoid (relu_out) }""", "a")
    b = stage_from_text(H + """
    g (float[1,1,2,2] x) => (float[1,1,2,2] y) <float[1,1,1,1] w = {-1.0}, float s = {0.01}, int8 z = {-128}> {
      relu_out = Conv (x, w)
      q = QuantizeLinear (relu_out, s, z)
      relu_out_dq = DequantizeLinear (q, s, z)
      y = Sigmoid (relu_out_dq) }""", "b")
    al, ch, cov = changes(a, b)
    assert al.tensor_map["relu_out"].a == "conv_out"
    assert al.b_for("relu_out") == "relu_out_dq"
    assert al.tensor_map["relu_out_dq"].kind == "absorbed"
    kinds = by_kind(ch)
    assert kinds[("fused", "Relu absorbed into quantization")] == 1
    assert kinds[("kept", "Conv")] == 1 and kinds[("kept", "Sigmoid")] == 1
    assert cov.a_ratio == cov.b_ratio == 1.0


def test_unmatched_region_has_reason(stage_from_text):
    ops_a = ["Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Log", "Sqrt"]
    ops_b = ["Softsign", "Softplus", "Erf", "Sin", "Cos", "Floor", "Ceil"]

    def chain(ops, p):
        body = f"{p}0 = Relu (x)\n"
        for i, op in enumerate(ops):
            body += f"{p}{i + 1} = {op} ({p}{i})\n"
        return H + f"\ng (float[1,4] x) => (float[1,4] y) {{ {body} y = Relu ({p}{len(ops)}) }}"

    a = stage_from_text(chain(ops_a, "a"), "a")
    b = stage_from_text(chain(ops_b, "b"), "b")
    _, ch, cov = changes(a, b)
    un = [c for c in ch if c.kind == "unmatched"]
    assert len(un) == 1 and "could not align 7 nodes" in un[0].evidence
    assert cov.a_accounted == 2 and cov.a_total == 9


def test_unrelated_stages_raise(stage_from_text):
    a = stage_from_text(H + "g (float[1,4] x) => (float[1,4] y) { t = Sigmoid (x)\n y = Tanh (t) }", "a")
    b = stage_from_text(H + "g (float[1,4] x) => (float[1,4] y) { t = Abs (x)\n y = Neg (t) }", "b")
    with pytest.raises(StagesUnrelatedError, match="share no structure"):
        align(a, b)


def test_subgraph_nodes_follow_their_parent(tmp_path):
    import onnx
    from onnx import helper

    from graphaudit.load import load_stage

    def model(path, extra_identity):
        then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                                   [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [2])])
        else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                   [helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, [2])])
        nodes = [helper.make_node("If", ["c"], ["y0"], name="branch", then_branch=then_g, else_branch=else_g)]
        nodes += [helper.make_node("Identity", ["y0"], ["y1"]), helper.make_node("Relu", ["y1"], ["y"])] if extra_identity \
            else [helper.make_node("Relu", ["y0"], ["y"])]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
                                           helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
        return load_stage(path)

    a = model(tmp_path / "a.onnx", True)
    b = model(tmp_path / "b.onnx", False)
    _, ch, cov = changes(a, b)
    assert by_kind(ch) == {("kept", "If"): 1, ("kept", "Relu"): 1, ("removed", "Identity removed"): 1}
    assert (cov.a_total, cov.a_accounted, cov.b_total, cov.b_accounted) == (5, 5, 4, 4)
