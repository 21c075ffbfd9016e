"""Isolated regions run together in one batched session give, region by region, the figures of that region run on
its own: each region extracted here with onnx's own Extractor, fed the reference stage's values from a plain
onnxruntime session, and measured with the SQNR/cosine formulas in numpy."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from graphaudit.numeric.batch import RegionBatch
from graphaudit.numeric.compare import CompareOptions, _Comparison, _plan
from graphaudit.numeric.regions import region_io
from graphaudit.pipeline import audit


def _session(model: onnx.ModelProto, outputs=()) -> ort.InferenceSession:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=o) for o in dict.fromkeys(outputs) if o not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def test_batched_regions_equal_each_region_alone(samples):
    d = samples / "ort" / "ppocr_cls"
    paths = [d / "ppocr_cls_optimized.onnx", d / "ppocr_cls_qdq.onnx"]
    xs = [np.load(samples / "data" / "ppocr_cls" / "x" / f"{k}.npy") for k in (0, 7)]
    au = audit(paths)
    al, changes = au.lineage.alignments[0], au.changes[0]
    comparison = _Comparison(au.stages, au.lineage.alignments, _plan(au.stages, au.lineage.alignments, au.changes,
                                                                      True), CompareOptions())
    for k, x in enumerate(xs):
        comparison.reduce(comparison.run({"x": x}, k))
    batches = comparison.regions.batches[0]
    res = comparison.finish()[0]
    assert batches and all(isinstance(b, RegionBatch) for b in batches)
    assert sum(len(b.members) for b in batches) >= 50  # the regions did run batched
    assert len(res.regions) >= 50

    ma, mb = onnx.load(paths[0]), onnx.load(paths[1])
    weights_a = {i.name: numpy_helper.to_array(i) for i in ma.graph.initializer}
    picks = res.regions[:: max(1, len(res.regions) // 12)]
    boundary = {c.b_nodes and tuple(c.b_nodes): region_io(al, c) for c in changes}
    a_names = {a for r in picks for a, _b in r.outputs} | {
        a for r in picks for _b, a in boundary[tuple(r.change.b_nodes)][0]}
    sa = _session(ma, [n for n in a_names if n not in weights_a])
    a_vals = [dict(zip([o.name for o in sa.get_outputs()], sa.run(None, {"x": x}))) for x in xs]
    # onnx's Extractor needs a type for every boundary tensor: taken from b's own values where shape inference
    # left none
    names_b = list(dict.fromkeys(b for r in picks for b in [x for x, _a in boundary[tuple(r.change.b_nodes)][0]]
                                 + [b for _a, b in r.outputs]))
    sb = _session(mb, names_b)
    typed = {vi.name for vi in list(mb.graph.value_info) + list(mb.graph.input) + list(mb.graph.output)}
    for name, v in zip([o.name for o in sb.get_outputs()], sb.run(None, {"x": xs[0]})):
        if name in names_b and name not in typed:
            mb.graph.value_info.append(onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    extractor = onnx.utils.Extractor(mb)
    checked = 0
    for r in picks:
        ins, outs = boundary[tuple(r.change.b_nodes)]
        assert outs == r.outputs
        sub = extractor.extract_model([b for b, _a in ins], [b for _a, b in outs])
        sess = _session(sub)
        refs, gots = [], []
        for va in a_vals:
            got = sess.run([b for _a, b in outs], {b: va[a] for b, a in ins})
            for (a_out, _b), g in zip(outs, got):
                refs.append((weights_a[a_out] if a_out in weights_a else va[a_out]).astype(np.float64).ravel())
                gots.append(g.astype(np.float64).ravel())
        A, B = np.concatenate(refs), np.concatenate(gots)
        E = B - A
        assert r.stats.samples == len(xs) * len(outs) and r.stats.count == A.size
        assert r.stats.cosine == pytest.approx(A @ B / np.linalg.norm(A) / np.linalg.norm(B), rel=1e-9)
        if E @ E:
            assert r.stats.sqnr_db == pytest.approx(10 * np.log10((A @ A) / (E @ E)), rel=1e-9)
        assert r.stats.max_abs == pytest.approx(float(np.abs(E).max()), rel=1e-6)
        checked += 1
    assert checked >= 10
