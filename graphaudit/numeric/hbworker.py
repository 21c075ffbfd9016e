"""Run stage models in Horizon's own runtime and compare tensor pairs (a worker for the toolchain's Python).

This file is a standalone script: it imports only the standard library, numpy, onnx and Horizon's runtime
(``horizon_nn.executor.session.InferenceSession``, the HB ONNX Runtime fork that the public ``dg-nn-toolkit``
wheel ships), so it runs in the toolchain's own environment (Python 3.10, numpy 1.23, onnx 1.15) without
graphaudit installed there. graphaudit calls it with that environment's interpreter::

    python hbworker.py REQUEST.json RESULT.json

REQUEST holds ``{"a": STAGE, "b": STAGE, "pairs": [[a_tensor, b_tensor], ...]}`` with
``STAGE = {"model": path, "feeds": npz path, "switch_off": bool}``. Each npz holds one array per graph input,
samples stacked on a new leading axis (``[S, *input_shape]``, already in the dtype and layout the stage takes).
``switch_off`` turns fake quantization off: every HzCalibration's ``switch`` attribute becomes ``OFF`` (Horizon's
debugger gets its float reference of a calibrated model the same way; docs/HORIZON.md), and activation
QuantizeLinear/DequantizeLinear pairs become Identity.

RESULT is ``{"samples": S, "pairs": [{"a", "b", "cosine", "max_abs", "ref_max_abs", "elements", "perm", "error",
"degenerate"}]}`` (``degenerate``: one side is all zeros, so the cosine is undefined):
cosine similarity ``sum(a*b) / (|a| |b|)`` over all samples (float64 sums), max |a - b|, max |a|; when the shapes
differ by an NCHW<->NHWC permutation (the quantized stage computes in NHWC), a is transposed first and ``perm``
says how. Integer tensors (the fixed-point stage) are compared as their integer values by Pearson correlation,
which is invariant to the per-tensor scale and to the -128 offset of unsigned tensors; max_abs is then in the b
tensor's integer units.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import onnx

_PERMS = ((0, 2, 3, 1), (0, 3, 1, 2), (0, 2, 1))


def _prepare(path: str, wanted: set, switch_off: bool) -> bytes:
    """The model with every wanted tensor added as a graph output (and HzCalibration switched off if asked)."""
    m = onnx.load(path)
    have = {o.name for o in m.graph.output}
    produced = {o for n in m.graph.node for o in n.output if o}
    for name in sorted(wanted):
        if name in produced and name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
            have.add(name)
    if switch_off:
        _quantization_off(m)
    return m.SerializeToString()


def _quantization_off(m: onnx.ModelProto) -> None:
    """Switch fake quantization off in place, keeping the clamp of its range.

    Every HzCalibration gets ``switch = OFF``. Every QuantizeLinear on an activation (not a weight initializer)
    becomes ``Clip(x, (qmin - zp) * scale, (qmax - zp) * scale)`` and the DequantizeLinear nodes reading it
    Identity, with the same tensor names: no rounding, but the range stays, so an activation the quantizer
    absorbed into the range (onnxruntime drops Relu/Clip whose range the zero point covers) still clamps.
    Weights stored as integers stay quantized (their float values are not in the file).
    """
    from onnx import numpy_helper

    inits = {i.name: i for i in m.graph.initializer}
    retyped: set[str] = set()
    consumers: dict[str, list] = {}
    for n in m.graph.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)
    for k, n in enumerate(list(m.graph.node)):
        if n.op_type == "HzCalibration":
            for a in n.attribute:
                if a.name == "switch":
                    a.s = b"OFF"
        elif n.op_type == "QuantizeLinear" and n.input and n.input[0] not in inits and n.input[1] in inits:
            scale = float(numpy_helper.to_array(inits[n.input[1]]).ravel()[0])
            zpt = inits.get(n.input[2]) if len(n.input) > 2 and n.input[2] else None
            zp_arr = numpy_helper.to_array(zpt) if zpt is not None else np.zeros(1, np.uint8)
            info = np.iinfo(zp_arr.dtype)
            zp = float(zp_arr.ravel()[0])
            lo, hi = (info.min - zp) * scale, (info.max - zp) * scale
            names = [f"{n.output[0]}__qoff_lo", f"{n.output[0]}__qoff_hi"]
            for name, v in zip(names, (lo, hi)):
                m.graph.initializer.append(numpy_helper.from_array(np.array(v, np.float32), name))
            retyped.add(n.output[0])  # was integer, is float now: its declared type must go
            n.op_type, n.domain = "Clip", ""
            del n.input[1:]
            n.input.extend(names)
            del n.attribute[:]
            for d in consumers.get(n.output[0], []):
                if d.op_type == "DequantizeLinear":
                    d.op_type, d.domain = "Identity", ""
                    del d.input[1:]
                    del d.attribute[:]
    kept = [v for v in m.graph.value_info if v.name not in retyped]
    del m.graph.value_info[:]
    m.graph.value_info.extend(kept)


def _session(model: bytes, runtime: str):
    """An inference session in Horizon's runtime (default) or in stock onnxruntime with graph optimizations
    off (so fake quantization runs as the file says)."""
    if runtime == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    from horizon_nn.executor.session import InferenceSession

    return InferenceSession(model)


class _Stage:
    """One stage loaded in the runtime, with the tensors to capture added as outputs."""

    def __init__(self, spec: dict, wanted: set | None, runtime: str = "horizon"):
        m = onnx.load(spec["model"])
        if wanted is None:  # every produced tensor
            wanted = {o for n in m.graph.node for o in n.output if o} | {i.name for i in m.graph.input}
        self.wanted = wanted
        self.sess = _session(_prepare(spec["model"], wanted, bool(spec.get("switch_off"))), runtime)
        self.names = [o.name for o in self.sess.get_outputs()]
        self.feeds = np.load(spec["feeds"], allow_pickle=False)
        self.inputs = [i.name for i in self.sess.get_inputs()]
        self.count = min(self.feeds[k].shape[0] for k in self.inputs)

    def run(self, s: int) -> dict:
        feed = {k: self.feeds[k][s] for k in self.inputs}
        res = self.sess.run(self.names, feed)
        got = {n: r for n, r in zip(self.names, res) if n in self.wanted}
        got.update({k: v for k, v in feed.items() if k in self.wanted})
        return got


def _align_shape(x: np.ndarray, shape: tuple) -> tuple[np.ndarray | None, list | None]:
    if x.shape == shape:
        return x, None
    for p in _PERMS:
        if x.ndim == len(p) and tuple(x.shape[i] for i in p) == shape:
            return np.transpose(x, p), list(p)
    if x.size == int(np.prod(shape)):
        return x.reshape(shape), None
    return None, None


class _Acc:
    """Mergeable sums of one tensor pair over samples: cosine, and for integer tensors the Pearson correlation."""

    __slots__ = ("dot", "na", "nb", "sa", "sb", "max_abs", "ref_max_abs", "elements", "perm", "error", "integer")

    def __init__(self):
        self.dot = self.na = self.nb = self.sa = self.sb = self.max_abs = self.ref_max_abs = 0.0
        self.elements, self.perm, self.error, self.integer = 0, None, None, False

    def add(self, xa, xb) -> None:
        if self.error is not None:
            return
        a64, perm = _align_shape(np.asarray(xa, dtype=np.float64), tuple(np.shape(xb)))
        if a64 is None:
            self.error = f"shapes differ: {list(np.shape(xa))} vs {list(np.shape(xb))}"
            return
        b64 = np.asarray(xb, dtype=np.float64)
        self.perm = perm
        self.integer = self.integer or np.asarray(xb).dtype.kind in "iu"
        self.dot += float(np.sum(a64 * b64))
        self.na += float(np.sum(a64 * a64))
        self.nb += float(np.sum(b64 * b64))
        self.sa += float(np.sum(a64))
        self.sb += float(np.sum(b64))
        if b64.size:
            self.max_abs = max(self.max_abs, float(np.max(np.abs(a64 - b64))))
            self.ref_max_abs = max(self.ref_max_abs, float(np.max(np.abs(a64))))
        self.elements += int(b64.size)

    def add_dot(self, dot: float, sq_a: float, sq_b: float, sum_a: float, sum_b: float, size: int,
                integer: bool) -> None:
        """Only what the cosine/correlation needs, from one sample's sums of a tensor of a (``sq_a``, ``sum_a``),
        of b (``sq_b``, ``sum_b``), their dot product and element count (the best-match contest computes them for
        every same-shape tensor of a at once)."""
        self.integer = self.integer or integer
        self.dot += dot
        self.na += sq_a
        self.nb += sq_b
        self.sa += sum_a
        self.sb += sum_b
        self.elements += size

    def cosine(self) -> float | None:
        """Cosine over all samples; None when not comparable or when one side is all zeros (degenerate).

        When b holds integers (the fixed-point stage), the Pearson correlation instead: Horizon stores a
        non-negative tensor (a Relu output) as int8 with an offset of -128, so only a correlation that ignores
        scale and offset compares the integers with the float values they represent."""
        if self.error is not None:
            return None
        if self.integer and self.elements > 1:
            n = float(self.elements)
            va, vb = self.na - self.sa * self.sa / n, self.nb - self.sb * self.sb / n
            if va <= 0 or vb <= 0:
                return 1.0 if va <= 0 and vb <= 0 else None
            return (self.dot - self.sa * self.sb / n) / math.sqrt(va * vb)
        den = math.sqrt(self.na) * math.sqrt(self.nb)
        if den == 0:
            return 1.0 if self.na == self.nb else None
        return self.dot / den


def _best_match_sums(ra: dict, rb: dict, tbs: list[str], names: list[str], shape: tuple,
                     cand: dict[str, dict[str, "_Acc"]]) -> None:
    """Add one sample to the best-match contest of b's tensors ``tbs`` (all of ``shape``) against a's tensors
    ``names`` (that shape, or it under a layout permutation): one float64 matrix product for every dot product of
    the group instead of one ``np.dot`` per pair (the same sums; BLAS may order the additions differently, a
    relative change of the order of 1e-16)."""
    mat_a = np.stack([np.ascontiguousarray(_align_shape(np.asarray(ra[n]), shape)[0], dtype=np.float64).ravel()
                      for n in names])
    mat_b = np.stack([np.ascontiguousarray(rb[t], dtype=np.float64).ravel() for t in tbs])
    dots = mat_b @ mat_a.T
    sum_a, sum_b = mat_a.sum(axis=1), mat_b.sum(axis=1)
    sq_a, sq_b = np.einsum("ij,ij->i", mat_a, mat_a), np.einsum("ij,ij->i", mat_b, mat_b)
    size = mat_a.shape[1]
    for i, tb in enumerate(tbs):
        integer = np.asarray(rb[tb]).dtype.kind in "iu"
        row = cand.setdefault(tb, {})
        for j, name in enumerate(names):
            row.setdefault(name, _Acc()).add_dot(float(dots[i, j]), float(sq_a[j]), float(sq_b[i]),
                                                 float(sum_a[j]), float(sum_b[i]), size, integer)


def compare(req: dict) -> dict:
    """Run both stages sample by sample and reduce every requested pair (see the module docstring).

    With ``"best_match": true``, every b tensor of a pair is also compared with every tensor of a that has
    the same number of elements, and the best of them is reported (``best``, ``best_cosine``): a pair is
    right when no other tensor of a matches b's tensor better.
    """
    pairs = [tuple(p) for p in req["pairs"]]
    best = bool(req.get("best_match"))
    runtime = req.get("runtime", "horizon")
    sa = _Stage(req["a"], None if best else {p[0] for p in pairs}, runtime)
    sb = _Stage(req["b"], {p[1] for p in pairs}, runtime)
    n = min(sa.count, sb.count, int(req.get("samples", 1 << 30)))
    accs = [_Acc() for _ in pairs]
    cand: dict[str, dict[str, _Acc]] = {}

    def by_shape(values: dict, shape: tuple) -> list[str]:
        """Names of a's tensors whose shape is ``shape``, or becomes it under an NCHW<->NHWC permutation."""
        shapes = {shape} | {tuple(shape[i] for i in np.argsort(p)) for p in _PERMS if len(p) == len(shape)}
        return [k for k, v in values.items() if tuple(np.shape(v)) in shapes and np.size(v) > 1]
    for s in range(n):
        ra, rb = sa.run(s), sb.run(s)
        groups: dict[tuple, list[str]] = {}  # b tensors of the best-match contest by shape
        for acc, (ta, tb) in zip(accs, pairs):
            xa, xb = ra.get(ta), rb.get(tb)
            if xa is None or xb is None:
                acc.error = acc.error or f"tensor not produced: {ta if xa is None else tb}"
                continue
            acc.add(xa, xb)
            if best:
                group = groups.setdefault(tuple(np.shape(xb)), [])
                if tb not in group:
                    group.append(tb)
        for shape, tbs in groups.items():
            names = by_shape(ra, shape)
            if names:
                _best_match_sums(ra, rb, tbs, names, shape, cand)
        del ra, rb
    out = []
    for acc, (ta, tb) in zip(accs, pairs):
        r = {"a": ta, "b": tb, "cosine": acc.cosine(), "max_abs": acc.max_abs, "ref_max_abs": acc.ref_max_abs,
             "elements": acc.elements, "perm": acc.perm, "error": acc.error,
             "degenerate": acc.error is None and acc.cosine() is None}
        if best:
            scored = [(c.cosine(), name) for name, c in cand.get(tb, {}).items() if c.cosine() is not None]
            if scored:
                r["best_cosine"], r["best"] = max(scored)
        out.append(r)
    return {"samples": n, "pairs": out}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: hbworker.py REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        req = json.load(f)
    res = compare(req)
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(res, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
