"""Reading the integer tensors of Horizon's 1.x fixed-point stage (``*_quantized_model.onnx``) as reals.

The quantized stage stores each tensor ``X_quantized`` on the integer grid of the calibrated stage's HzCalibration
on ``X`` (docs/HORIZON.md section 7, measured in Horizon's runtime on the real stage sets); an ``HzRequantize``
output moves it to another grid, given by the op's attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..stage import StageGraph
from ..toolchains.ops import DEQUANTIZE_OPS, FIXED_POINT_STORAGE
from .layout import as_layout_of
from .metrics import scale_axis
from .scaledint import ScaledIntegers

__all__ = ["FixedPointCodec", "fixed_point_codec", "requantized_codec", "dequantized_reference"]


@dataclass(frozen=True)
class FixedPointCodec:
    """How an integer tensor of Horizon's fixed-point stage maps to the real values of the calibrated stage.

    ``real = (q + offset) * scale`` (per tensor, or per channel along ``axis`` of the calibrated layout), where
    ``scale`` is the ``scales`` attribute of the calibrated stage's HzCalibration on the same tensor (its scalar
    ``dequantize_scale`` when it also rescales channels), ``q`` the stored integer, computed in NHWC for rank-4
    tensors, and ``offset`` 128 for an HzCalibration of qtype uint8 (stored as int8 with -128), else 0 (int8,
    int16). Checked on the real stage sets in Horizon's runtime: every tensor ``X_quantized`` equals
    ``HzCalibration(X) / scale - offset`` of the calibrated stage to within the rounding of the fixed-point
    arithmetic (docs/HORIZON.md section 7). ``a_value`` names that HzCalibration's
    output in the calibrated stage: the fake-quantized value both stages propagate, which is what b is compared
    with.
    """

    scale: tuple
    axis: int
    a_value: str
    offset: int = 0  # 128 for qtype uint8: stored as int8 round(x / scale) - 128
    dtype: str = "INT8"
    #: The calibrated stage puts ``a_value`` on this same grid one node later (an HzRequantize before a Concat whose
    #: output HzCalibration has this scale: :func:`requantized_codec`); a change measured alone is compared with
    #: ``a_value`` put on it (:meth:`on_grid`), else it counts the Concat's clip and rounding as its own.
    reference_on_grid: bool = False

    def decode(self, q: np.ndarray, a_shape: tuple) -> np.ndarray:
        """Real values of ``q`` (float64) in ``a_shape``'s layout (NHWC -> NCHW, or another permutation of the axes,
        where that is the difference: :func:`graphaudit.numeric.layout.as_layout_of`)."""
        v = as_layout_of(np.asarray(q), a_shape).astype(np.float64) + self.offset
        return v * _broadcast(self.scale, self._axis(v.shape), v.ndim)

    def lazy(self, q: np.ndarray, a_shape: tuple) -> "np.ndarray | ScaledIntegers":
        """The values of :meth:`decode`, as a :class:`~graphaudit.numeric.scaledint.ScaledIntegers` that the metrics
        read block by block (no float64 copy of the tensor) when the codec has one scale; else :meth:`decode`'s
        array (per-channel scales)."""
        if len(self.scale) != 1:
            return self.decode(q, a_shape)
        return ScaledIntegers(as_layout_of(np.asarray(q), a_shape), self.offset, self.scale[0])

    def on_grid(self, x: np.ndarray) -> np.ndarray:
        """Real values ``x`` (a's layout) rounded and saturated to this grid: ``decode(encode(x))`` (float64)."""
        q = self.encode(x, None, np.int16 if self.dtype == "INT16" else np.int8)
        return self.decode(q, np.shape(x))

    def _axis(self, shape: tuple) -> int:
        """The scale axis for a tensor of ``shape`` (:func:`graphaudit.numeric.metrics.scale_axis`)."""
        n = len(self.scale)
        ax = scale_axis(tuple(shape), n, self.axis) if n > 1 else self.axis
        return self.axis if ax is None else ax

    def encode(self, x: np.ndarray, b_shape: tuple | None, dtype: np.dtype) -> np.ndarray:
        """The integers the fixed-point stage would hold for real values ``x`` (in a's layout): round half
        to even of ``x / scale``, saturated to ``dtype``, transposed to NHWC when ``b_shape`` says so. Worked in
        float64 (``x`` converted exactly), a block at a time for one scale (no float64 copy of the tensor: a
        detector's 4 M-element activations made 34 MB temporaries, each in fresh memory), in place otherwise."""
        info = np.iinfo(dtype)
        if len(self.scale) == 1:
            q = _encode_blocks(np.asarray(x), float(self.scale[0]), self.offset, info, dtype)
        else:
            v = np.array(x, np.float64)  # a copy, worked in place
            s = _broadcast(self.scale, self._axis(v.shape), v.ndim)
            if np.broadcast_shapes(v.shape, s.shape) == v.shape:
                np.divide(v, s, out=v)
            else:  # scales that no axis of x holds (x 0-d, or of size 1 on the axis): broadcast, as the formula does
                v = v / s
            np.rint(v, out=v)
            v -= self.offset
            q = np.clip(v, info.min, info.max, out=v).astype(dtype)
        if b_shape is not None and q.ndim == 4 and tuple(q.shape) != tuple(b_shape) \
                and tuple(q.shape[i] for i in (0, 2, 3, 1)) == tuple(b_shape):
            q = np.transpose(q, (0, 2, 3, 1))
        return q


_BLOCK = 1 << 15  # float64 elements per block of _encode_blocks: 256 kB, in L2


def _encode_blocks(x: np.ndarray, scale: float, offset: int, info: np.iinfo, dtype) -> np.ndarray:
    """``clip(rint(x / scale) - offset, info.min, info.max)`` as ``dtype``, each step in float64 as
    :meth:`FixedPointCodec.encode` states it, over blocks of :data:`_BLOCK` elements through one reused buffer."""
    flat = x.reshape(-1)
    out = np.empty(x.shape, dtype)
    dst = out.reshape(-1)
    buf = np.empty(min(flat.size, _BLOCK))
    for start in range(0, flat.size, _BLOCK):
        b = buf[:min(_BLOCK, flat.size - start)]
        np.copyto(b, flat[start:start + _BLOCK], casting="unsafe")
        b /= scale
        np.rint(b, out=b)
        b -= offset
        np.clip(b, info.min, info.max, out=b)
        np.copyto(dst[start:start + _BLOCK], b, casting="unsafe")
    return out


def _broadcast(scale: tuple, axis: int, ndim: int) -> np.ndarray:
    arr = np.asarray(scale, np.float64)
    if arr.size == 1 or ndim == 0:
        return arr.reshape(()) if arr.size == 1 else arr
    shape = [1] * ndim
    shape[axis % ndim] = arr.size
    return arr.reshape(shape)


def fixed_point_codec(a: StageGraph, a_tensor: str, b: StageGraph | None = None,
                      b_tensor: str | None = None) -> FixedPointCodec | None:
    """The codec of the fixed-point copy of calibrated tensor ``a_tensor``: from the HzCalibration that reads it
    (or produced it), when that HzCalibration is an int8/int16 activation quantizer with ``scales``.

    Given the fixed-point stage ``b`` and the tensor ``b_tensor`` that holds that copy, an ``HzRequantize`` output is
    read on its own grid, not on its input's (:func:`requantized_codec`); None when that grid cannot be derived.
    """
    codec = _calibration_codec(a, a_tensor)
    if codec is None or b is None or b_tensor is None:
        return codec
    bt = b.tensors.get(b_tensor)
    n = b.nodes.get(bt.producer) if bt is not None and bt.producer else None
    if n is None or n.op_type != "HzRequantize":
        return codec
    out = requantized_codec(codec, n.attributes)
    if out is not None and _concat_grid(a, out, b, b_tensor):
        out = replace(out, reference_on_grid=True)
    return out


def dequantized_reference(a: StageGraph, a_tensor: str, b: StageGraph, b_tensor: str) -> str:
    """The calibrated tensor a float ``b_tensor`` of the fixed-point stage is compared with: the output of the
    HzCalibration on ``a_tensor`` (its codec's ``a_value``) when an HzDequantize wrote ``b_tensor`` with that
    HzCalibration's scale (``q * scale`` on its grid: ddddocr det bernoulli2's Sigmoid outputs), else ``a_tensor``. Against the
    unquantized ``a_tensor`` such an output, measured alone, would count the calibrated stage's own int8 rounding
    (Sigmoid_305: 12.1 dB)."""
    bt = b.tensors.get(b_tensor)
    n = b.nodes.get(bt.producer) if bt is not None and bt.producer else None
    codec = _calibration_codec(a, a_tensor) if n is not None and n.op_type in DEQUANTIZE_OPS else None
    sc = b.tensors.get(n.inputs[1]) if codec is not None and len(n.inputs) > 1 else None
    v = sc.value() if sc is not None else None
    if v is None or codec.offset or np.size(v) not in (1, len(codec.scale)) \
            or not np.allclose(np.ravel(v), codec.scale, rtol=1e-6, atol=0):
        return a_tensor  # not on that grid (an int32 accumulator's own scale, a uint8 offset): a's tensor
    return codec.a_value


def requantized_codec(codec: FixedPointCodec, attrs: dict) -> FixedPointCodec | None:
    """The codec of an ``HzRequantize`` output whose input is read with ``codec``.

    The op computes ``q_out = round(q_in * output_scale / 2**output_right_shift)`` (per channel along its ``axis``;
    ``bits`` 8 or 16 the output's width), so the output's scale is ``s_in * 2**output_right_shift / output_scale``
    (one value when every channel's is the same). On the real ddddocr det bayes-e set (hb_mapper 1.24.3) that is the
    scale of the HzCalibration after the Concat the requantization feeds (``824_HzCalibration``: int16 threshold
    1.718829 / 32767 = 5.24561e-05 against 3.05180e-05 * 2**15 / 19064 = 5.24557e-05), and decoded so, Horizon's
    runtime output of ``822_calibrated_Requantize`` has the magnitude of the calibrated stage's tensor (norm ratio
    0.99888, as its input's 0.99887); read on the input's grid it was 0.581 (SQNR 7.5 dB, cosine 0.9965).

    Returns None (not compared) when the attributes are missing or malformed, or the input is stored with an offset
    (uint8 as int8 - 128), whose requantization has not been seen.
    """
    m, sh = attrs.get("output_scale"), attrs.get("output_right_shift")
    m = [m] if isinstance(m, (int, float)) else m
    sh = [sh] if isinstance(sh, (int, float)) else sh
    bits = attrs.get("bits", 8)
    if codec.offset or not (isinstance(m, list) and isinstance(sh, list) and m and sh) \
            or bits not in (8, 16) or len(sh) not in (1, len(m)):
        return None
    mult, shift = np.asarray(m, np.float64), np.asarray(sh, np.float64)
    s_in = np.asarray(codec.scale, np.float64)
    if np.any(mult <= 0) or (s_in.size > 1 and mult.size > 1 and s_in.size != mult.size):
        return None
    s_out = s_in * np.exp2(shift) / mult
    if s_out.size > 1 and np.all(s_out == s_out.flat[0]):
        s_out = s_out[:1]
    return FixedPointCodec(tuple(float(x) for x in s_out), codec.axis, codec.a_value, offset=0,
                           dtype="INT16" if bits == 16 else "INT8")


#: Relative difference allowed between an HzRequantize output's scale and the Concat's HzCalibration scale: its
#: multiplier has 15-16 bits (seen: M = 16553-32656), so the ratio is rounded by 2**-15 relative at most (seen
#: 1.4e-5).
REQUANTIZE_SCALE_RTOL = 2.0 ** -14


def _concat_grid(a: StageGraph, codec: FixedPointCodec, b: StageGraph, b_tensor: str) -> bool:
    """Whether every reader of ``b_tensor`` (an HzRequantize output) is a Concat whose namesake in ``a`` reads
    ``codec.a_value`` and is followed by an HzCalibration on ``codec``'s grid (same width, scale within
    :data:`REQUANTIZE_SCALE_RTOL`): the calibrated stage clips and rounds those values to that grid there."""
    readers = [b.nodes[c] for c, _k in b.tensors[b_tensor].consumers]
    t = a.tensors.get(codec.a_value)
    if not readers or t is None:
        return False
    in_a = {a.nodes[c].name: a.nodes[c] for c, _k in t.consumers if a.nodes[c].op_type == "Concat"}
    for r in readers:
        n = in_a.get(r.name) if r.op_type == "Concat" and r.name else None
        after = _calibration_codec(a, n.outputs[0]) if n is not None and n.outputs else None
        if after is None or after.dtype != codec.dtype or after.offset or len(after.scale) != len(codec.scale) \
                or not np.allclose(after.scale, codec.scale, rtol=REQUANTIZE_SCALE_RTOL, atol=0):
            return False
    return True


def _calibration_codec(a: StageGraph, a_tensor: str) -> FixedPointCodec | None:
    """The codec of ``a_tensor``'s HzCalibration (:func:`fixed_point_codec` without a fixed-point producer)."""
    t = a.tensors.get(a_tensor)
    if t is None:
        return None
    cands = [a.nodes[c] for c, _slot in t.consumers]
    if t.producer is not None:
        cands.append(a.nodes[t.producer])
    for n in cands:
        if n.op_type != "HzCalibration" or not n.outputs:
            continue
        scales = n.attributes.get("scales")
        qtype = str(n.attributes.get("qtype", "int8")).lower()
        kind = FIXED_POINT_STORAGE.get(qtype)
        if isinstance(scales, list) and scales and kind is not None:
            axis = n.attributes.get("axis", 1)
            dq = n.attributes.get("dequantize_scale")
            if isinstance(dq, (int, float)) and n.attributes.get("channel_scales") is not None:
                scales = [float(dq)]  # switch ON: clip(round(x / s_c)) * dequantize_scale (HMCT equalization)
            return FixedPointCodec(tuple(float(x) for x in scales), axis if isinstance(axis, int) else 1,
                                   n.outputs[0], offset=kind[1], dtype=kind[0])
    return None
