"""graphaudit's lowering of Horizon's float ops, proven against Horizon's own runtime on the real stage sets.

For every real set that set-up built with hb_mapper (``samples/build/hb/<model>_<march>/``) and for both its
``*_optimized_float_model.onnx`` and ``*_calibrated_model.onnx``:

- the file as hb_mapper wrote it runs in Horizon's runtime (``horizon_nn.executor.session.InferenceSession``, the
  HB ONNX Runtime fork of the public ``dg-nn-toolkit`` wheel, with the session options it builds by default);
- the same file lowered by :func:`graphaudit.numeric.lower.lower_model` runs in stock onnxruntime on the CPU with
  graph optimizations off (:func:`graphaudit.numeric.backends.session_options`);
- both get the same real calibration sample(s) of the set, converted from the raw calibration file (the layout
  and colour order ``config.yaml`` gives) as graphaudit converts pixels for a stage
  (:func:`graphaudit.toolchains.contracts.stage_contracts` / ``convert_sample``); the feed is also checked to be
  the raw file minus 128, which is what hb_mapper feeds its own stages (docs/INPUT_CONTRACTS.md section 3);
- every tensor that a node of the Horizon file produces is made a graph output of both models. The lowering
  must keep every such name (it may only add ``ga_lower/`` tensors), and every one of them is compared.

The bound, per tensor (max over all elements and samples):

- a tensor that an ``HzCalibration`` node produces or reads: ``max |diff| <= 1 LSB``, the LSB being that node's
  ``scales`` attribute (per channel along its ``axis`` when it has several; the node's ``dequantize_scale`` for
  the output of a node that has one, since that output lies on the grid of ``dequantize_scale``). When several
  nodes read a tensor, the strictest of their bounds holds. One LSB is the size of one rounding flip: the two
  runtimes do the float math of the ops around a fake quantization in a different order, so a value within
  float rounding of a rounding boundary may land on the neighbouring grid point; anything more is a semantic
  difference (a wrong scale, axis, range, rounding mode or op). A relative slack of ``1e-4`` LSB absorbs the
  float32 rounding of the dequantized grid point itself.
- a tensor of the optimized float model: cosine similarity ``>= 0.99999`` (the float-transition bound of
  ``tests/test_horizon_real.py``) and, where the set's calibrated model quantizes the same-named tensor, also
  ``max |diff| <= 1 LSB`` of that HzCalibration's scales;
- any other float tensor: cosine similarity ``>= 0.99999``; integer tensors (shapes, indices): equal.

The expected values come from Horizon's runtime only; nothing is mocked. The worst tensor per set and stage is
printed in the terminal summary (``tests/horizon_runtime/conftest.py``).

A second, small test runs single-node models of the two attribute combinations the real sets do not exercise
end to end (``HzCalibration`` with ``switch`` OFF and ``dequantize_scale``; ``HzPreprocess`` whose
``data_format`` says NHWC while its input is channels-first and square in H/C) in both runtimes, on the same bound.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("horizon_nn", reason="Horizon's runtime (horizon_nn) imports only in the toolchain's Python 3.10 "
                                         "environment (samples/build/hbenv.path)")

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from horizon_nn.executor.session import InferenceSession  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from graphaudit.config import load_config  # noqa: E402
from graphaudit.load import load_stage  # noqa: E402
from graphaudit.numeric.backends import session_options  # noqa: E402
from graphaudit.numeric.lower import NAME_PREFIX, lower_model  # noqa: E402
from graphaudit.toolchains.contracts import convert_sample, pipeline_normalization, stage_contracts  # noqa: E402

from ..horizon_check import built_sets  # noqa: E402
from .conftest import LOWERING_LINES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HB_SETS = ROOT / "samples" / "build" / "hb"

#: Bound for tensors without an HzCalibration scale (float transitions, tests/test_horizon_real.py).
COSINE_BOUND = 0.99999
#: Bound for tensors with an HzCalibration scale: one rounding flip.
LSB_BOUND = 1.0
#: Relative slack on the LSB bound for the float32 rounding of a dequantized grid point.
LSB_SLACK = 1e-4
#: Samples per set: two where the input is small, one for the large detection inputs (run time, memory).
SMALL_INPUT_ELEMENTS = 100_000

STAGES = ("optimized_float", "calibrated")


SETS = built_sets()
CASES = [(s, st) for s in SETS for st in STAGES] or [(None, None)]
IDS = [f"{s.name}-{st}" for s, st in CASES] if SETS else ["no-real-set"]


# ---- data --------------------------------------------------------------------------------------------

def _raw_samples(set_dir: Path, cfg, count: int) -> list[np.ndarray]:
    """The first ``count`` raw calibration files of the set, as hb_mapper reads them: dtype ``cal_data_type``,
    shape ``input_shape`` in ``input_layout_train``, colour order ``input_type_train`` (docs/INPUT_CONTRACTS.md section 3)."""
    ci = cfg.inputs[0]
    dtype = np.dtype(ci.cal_data_type or "uint8")
    files = sorted((p for p in (set_dir / ci.cal_data_dir).iterdir() if p.is_file()),
                   key=lambda p: (len(p.name), p.name))[:count]
    assert files, f"{set_dir}: no calibration files in {ci.cal_data_dir}"
    return [np.fromfile(f, dtype=dtype).reshape(ci.shape) for f in files]


def _as_rgb_pixels(raw: np.ndarray, cfg) -> np.ndarray:
    """Raw calibration bytes -> the RGB NHWC pixels graphaudit's image path decodes to (``convert_sample``'s
    ``"pixels"`` domain)."""
    ci = cfg.inputs[0]
    x = raw.transpose(0, 2, 3, 1) if (ci.layout_train or "NCHW").upper() == "NCHW" else raw
    return x[..., ::-1] if (ci.type_train or "").lower() == "bgr" else x


def _feeds(stage, cfg, raw: np.ndarray) -> dict[str, np.ndarray]:
    contracts = stage_contracts(stage, cfg)
    norm = pipeline_normalization([contracts])
    assert len(contracts) == 1, f"{stage.path}: {len(contracts)} inputs; the real sets have one"
    feeds = {name: convert_sample(_as_rgb_pixels(raw, cfg), "pixels", ic, norm.get(name))
             for name, ic in contracts.items()}
    for name, x in feeds.items():  # graphaudit's conversion == what hb_mapper feeds: raw - 128, as stored
        np.testing.assert_array_equal(x, raw.astype(np.float32) - 128.0, err_msg=f"{stage.path}: feed of {name!r}")
    return feeds


# ---- models --------------------------------------------------------------------------------------------

def _with_outputs(model: onnx.ModelProto, names: list[str]) -> bytes:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in have)
    return m.SerializeToString()


def _run_both(model: onnx.ModelProto, lowered: onnx.ModelProto, names: list[str], feeds_list: list[dict]):
    """(Horizon outputs of ``model``, onnxruntime outputs of ``lowered``) per sample, each a dict name -> array."""
    hb = InferenceSession(_with_outputs(model, names))
    so = ort.InferenceSession(_with_outputs(lowered, names), session_options(),
                              providers=["CPUExecutionProvider"])
    hb_names = [o.name for o in hb.get_outputs()]
    ort_names = [o.name for o in so.get_outputs()]
    assert set(hb_names) == set(ort_names)
    for feeds in feeds_list:
        yield dict(zip(hb_names, hb.run(hb_names, feeds))), dict(zip(ort_names, so.run(ort_names, feeds)))


def _grids(model: onnx.ModelProto) -> dict[str, list[tuple[np.ndarray, int | None, str]]]:
    """Tensor name -> [(LSB per channel, axis or None, HzCalibration node)] for every tensor an HzCalibration
    produces or reads (the ``scales`` attribute; ``dequantize_scale`` for the output of a node that has one)."""
    out: dict[str, list] = {}
    for n in model.graph.node:
        if n.domain != "horizon" or n.op_type != "HzCalibration":
            continue
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        qtype = a.get("qtype", b"int8")
        if isinstance(qtype, bytes):
            qtype = qtype.decode()
        if "scales" not in a or str(qtype).startswith("float"):
            continue
        s = np.asarray(a["scales"], np.float64)
        axis = int(a.get("axis", 1)) if s.size > 1 else None
        out.setdefault(n.input[0], []).append((s, axis, n.name))
        if "dequantize_scale" in a:
            out.setdefault(n.output[0], []).append((np.asarray([float(a["dequantize_scale"])]), None, n.name))
        else:
            out.setdefault(n.output[0], []).append((s, axis, n.name))
    return out


# ---- metrics -------------------------------------------------------------------------------------------

class _Stat:
    """Running worst case of one tensor over the samples."""

    def __init__(self):
        self.max_abs = 0.0
        self.lsb_ratio: float | None = None
        self.lsb_at = float("nan")
        self.dot = self.na = self.nb = 0.0
        self.integer_mismatch = False

    def add(self, a: np.ndarray, b: np.ndarray, grids: list) -> None:
        assert a.shape == b.shape, (a.shape, b.shape)
        if a.dtype.kind not in "fc" or b.dtype.kind not in "fc":
            self.integer_mismatch |= not np.array_equal(a, b)
            return
        x, y = a.astype(np.float64), b.astype(np.float64)
        d = np.abs(x - y)
        if d.size:
            self.max_abs = max(self.max_abs, float(d.max()))
        self.dot += float((x * y).sum())
        self.na += float((x * x).sum())
        self.nb += float((y * y).sum())
        for s, axis, _node in grids:
            if axis is None or s.size == 1:
                lsb = np.full(d.shape, s.min())
            else:
                shape = [1] * d.ndim
                shape[axis] = s.size
                lsb = np.broadcast_to(s.reshape(shape), d.shape)
            r = d / lsb
            k = int(np.argmax(r)) if r.size else 0
            worst = float(r.reshape(-1)[k]) if r.size else 0.0
            if self.lsb_ratio is None or worst > self.lsb_ratio:
                self.lsb_ratio, self.lsb_at = worst, float(lsb.reshape(-1)[k]) if r.size else float(s.min())

    @property
    def cosine(self) -> float:
        if self.na == 0.0 and self.nb == 0.0:
            return 1.0
        if self.na == 0.0 or self.nb == 0.0:
            return 0.0
        return self.dot / (np.sqrt(self.na) * np.sqrt(self.nb))


def _fails(st: _Stat, cosine_too: bool, lsb_bound: float = LSB_BOUND) -> list[str]:
    why = []
    if st.integer_mismatch:
        why.append("integer values differ")
    if st.lsb_ratio is not None and st.lsb_ratio > lsb_bound + LSB_SLACK * max(lsb_bound, 1.0):
        why.append(f"max|diff| {st.max_abs:.4g} = {st.lsb_ratio:.4g} LSB (LSB {st.lsb_at:.4g})")
    if (st.lsb_ratio is None or cosine_too) and st.cosine < COSINE_BOUND:
        why.append(f"cosine {st.cosine:.7f} < {COSINE_BOUND}")
    return why


def _compare(model: onnx.ModelProto, feeds_list: list[dict], grids: dict, cosine_too: bool):
    """Run both runtimes and return (stats per tensor, op type per tensor)."""
    produced = [o for n in model.graph.node for o in n.output if o]
    op_of = {o: n.op_type for n in model.graph.node for o in n.output if o}
    low = lower_model(model, "stage").model
    low_produced = {o for n in low.graph.node for o in n.output if o}
    lost = [t for t in produced if t not in low_produced]
    assert not lost, f"the lowering drops tensor names of the Horizon file: {lost[:5]}"
    extra = sorted(t for t in low_produced - set(produced) if not t.startswith(NAME_PREFIX))
    assert not extra, f"the lowering adds tensors outside {NAME_PREFIX!r}: {extra[:5]}"
    stats = {t: _Stat() for t in produced}
    for hb, lo in _run_both(model, low, produced, feeds_list):
        for t in produced:
            stats[t].add(hb[t], lo[t], grids.get(t, []))
    return stats, op_of


def _line(label: str, stats: dict, op_of: dict) -> str:
    scaled = [(t, s) for t, s in stats.items() if s.lsb_ratio is not None]
    parts = [f"{label}: {len(stats)} tensors ({len(scaled)} with an LSB)"]
    if scaled:
        t, s = max(scaled, key=lambda ts: ts[1].lsb_ratio)
        parts.append(f"worst LSB {t!r} ({op_of.get(t)}) max|diff| {s.max_abs:.3g} = {s.lsb_ratio:.3g} LSB "
                     f"(LSB {s.lsb_at:.3g}), cosine {s.cosine:.9f}")
    t, s = min(stats.items(), key=lambda ts: ts[1].cosine)
    parts.append(f"lowest cosine {t!r} ({op_of.get(t)}) max|diff| {s.max_abs:.3g}, cosine {s.cosine:.9f}")
    return "; ".join(parts)


# ---- tests ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("set_dir,stage_kind", CASES, ids=IDS)
def test_lowered_stage_matches_horizon_runtime(set_dir, stage_kind):
    """Every tensor of the lowered stage in stock onnxruntime is within the bound of the module docstring of the
    same tensor of the original stage in Horizon's runtime: ``max |diff| <= 1 LSB`` of the tensor's HzCalibration
    ``scales`` (optimized stage: of the calibrated model's), else cosine ``>= 0.99999``; integer tensors equal."""
    if set_dir is None:
        pytest.fail(f"Horizon's runtime imports here but {HB_SETS} holds no built stage set; set-up builds them "
                    "(samples/build_horizon_sets.py)")
    cfg = load_config(set_dir / "config.yaml")
    path = next((set_dir / "model_output").glob(f"*_{stage_kind}_model.onnx"))
    stage = load_stage(path, role="optimized" if stage_kind == "optimized_float" else "calibrated")
    model = onnx.load(str(path))
    count = 2 if int(np.prod(cfg.inputs[0].shape)) <= SMALL_INPUT_ELEMENTS else 1
    feeds_list = [_feeds(stage, cfg, raw) for raw in _raw_samples(set_dir, cfg, count)]
    if stage_kind == "calibrated":
        grids = _grids(model)
    else:  # the LSB the calibrated model gives the same-named tensor
        grids = _grids(onnx.load(str(next((set_dir / "model_output").glob("*_calibrated_model.onnx"))),
                                 load_external_data=False))
    stats, op_of = _compare(model, feeds_list, grids, cosine_too=stage_kind == "optimized_float")
    label = f"{set_dir.name} {stage_kind} ({count} sample{'s' if count > 1 else ''})"
    LOWERING_LINES.append(_line(label, stats, op_of))
    print(LOWERING_LINES[-1])
    bad = {t: _fails(s, stage_kind == "optimized_float") for t, s in stats.items()}
    bad = {t: w for t, w in bad.items() if w}
    assert not bad, f"{label}: {len(bad)} tensor(s) outside the bound: " + "; ".join(
        f"{t!r} ({op_of.get(t)}): {', '.join(w)}" for t, w in list(bad.items())[:10])


# ---- single-node models of attribute combinations the real sets do not run end to end ------------------------

def _node_model(node: onnx.NodeProto, x_shape: list[int], inits: list | None = None) -> onnx.ModelProto:
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(node.input[0], TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)], inits or [])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("horizon", 1)])
    m.ir_version = 7
    return m


def _equalized_attrs() -> dict:
    """Attributes as HMCT's activation equalization writes them (channel_scales = dequantize_scale / scales)."""
    s = np.array([0.1, 0.02, 0.5, 0.07], np.float32)
    dq = float(s.max())
    return dict(qtype="int8", scales=s.tolist(), thresholds=(s * 127).tolist(), axis=1, quant_attrs=69905,
                constant=1, channel_scales=(dq / s).astype(np.float32).tolist(), dequantize_scale=dq)


#: As hb_mapper writes every activation node (``constant`` 1: Horizon's kernel fake-quantizes only then).
_FEATURE = dict(quant_attrs=69905, constant=1)

NODE_CASES = {
    "calibration-dequantize_scale-on": (dict(_equalized_attrs(), switch="ON"), [1, 4, 5, 6]),
    "calibration-dequantize_scale-off": (dict(_equalized_attrs(), switch="OFF"), [1, 4, 5, 6]),
    "calibration-off": (dict(_FEATURE, qtype="int8", scales=[0.1], thresholds=[12.7], switch="OFF"), [1, 4, 5, 6]),
    "calibration-int8-ties": (dict(_FEATURE, qtype="int8", scales=[0.25], thresholds=[31.75], switch="ON"),
                              [1, 1, 4, 12]),
    "calibration-uint8-ties": (dict(_FEATURE, qtype="uint8", scales=[0.25], thresholds=[63.75], switch="ON"),
                               [1, 1, 4, 12]),
    "calibration-int16-ties": (dict(_FEATURE, qtype="int16", scales=[0.5], thresholds=[16383.5], switch="ON"),
                               [1, 1, 4, 12]),
    "preprocess-nhwc-attr-nchw-input": (None, [1, 3, 5, 3]),
}


@pytest.mark.parametrize("case", sorted(NODE_CASES))
def test_single_node_matches_horizon_runtime(case):
    """Single-node models in both runtimes: the rescaling HzCalibration (``dequantize_scale``) with switch ON
    and OFF, plain switch OFF, rounding ties of uint8/int16 (half to even), and HzPreprocess with ``data_format``
    NHWC on an NCHW input (Horizon's kernel scales axis 1). Both runtimes get the identical input of one op, so no
    rounding flip is possible: the bound is 0 LSB (plus the float32 slack), else cosine ``>= 0.99999``."""
    attrs, shape = NODE_CASES[case]
    rng = np.random.default_rng(7)
    if attrs is None:
        w = np.array([0.5, 0.25, 2.0], np.float32).reshape(3, 1, 1, 1)
        b = np.array([1.0, -2.0, 0.5], np.float32)
        node = helper.make_node("HzPreprocess", ["x", "w", "b"], ["y"], domain="horizon", name="HZ_PREPROCESS_FOR_x",
                                channel_group=3, data_format="NHWC", input_type="RGB_128")
        model = _node_model(node, shape, [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
        x = rng.integers(-128, 128, shape).astype(np.float32)
    else:
        node = helper.make_node("HzCalibration", ["x"], ["y"], domain="horizon", name="x_HzCalibration", **attrs)
        model = _node_model(node, shape)
        s = np.asarray(attrs["scales"], np.float32)
        x = (rng.normal(0, 60, shape) * (s.reshape(1, -1, 1, 1) if s.size > 1 else s[0])).astype(np.float32)
        if "ties" in case:  # exact halves of the grid: the rounding mode decides
            x = ((np.arange(x.size).reshape(shape) - x.size // 2 + 0.5) * s[0]).astype(np.float32)
    stats, op_of = _compare(model, [{"x": x}], _grids(model), cosine_too=False)
    LOWERING_LINES.append(_line(f"single node {case}", stats, op_of))
    bad = {t: w for t, s in stats.items() if (w := _fails(s, False, lsb_bound=0.0))}
    assert not bad, f"{case}: {bad}"


@pytest.mark.parametrize("attrs,remark", [
    (dict(qtype="int8", scales=[0.1], thresholds=[12.7], switch="ON", quant_attrs=69905, constant=0), "constant 0"),
    (dict(qtype="int8", scales=[0.1], thresholds=[12.7], switch="ON", quant_attrs=69905), "constant 0 or absent"),
    (dict(qtype="int8", thresholds=[12.7], switch="ON", quant_attrs=69905, constant=1), "no scales"),
], ids=["constant-0", "constant-absent", "thresholds-only"])
def test_pass_through_nodes_are_noted(attrs, remark):
    """Where the lowering's reading differs from Horizon's runtime, the lowering says so: Horizon's kernel passes an
    HzCalibration through unquantized when ``constant`` is 0/absent or there are no ``scales`` (hb_mapper never
    writes such a node: all real sets have ``constant`` 1 and ``scales``), while graphaudit fake-quantizes it as
    docs/HORIZON.md section 3 reads it. Checked here: Horizon's output equals its input, and the notes name the case."""
    shape = [1, 4, 5, 6]
    node = helper.make_node("HzCalibration", ["x"], ["y"], domain="horizon", name="x_HzCalibration", **attrs)
    model = _node_model(node, shape)
    x = np.random.default_rng(3).normal(0, 3, shape).astype(np.float32)
    y = InferenceSession(model.SerializeToString()).run(["y"], {"x": x})[0]
    np.testing.assert_array_equal(y, x)
    notes = lower_model(model, "node").notes
    assert any(remark in n and "passes such a node through" in n for n in notes), notes
