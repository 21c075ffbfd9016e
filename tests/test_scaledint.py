"""Fixed-point integers read block by block (ScaledIntegers) give the figures of their whole float64 decoding.

The expected figures come from ``ErrorStats.update`` on the real values worked out here by the formula of
docs/HORIZON.md section 7, ``real = (q + offset) * scale`` in float64 after moving NHWC to NCHW, not from the code
under test; every field must be equal to the bit (the same float64 values reach the same sums in the same order).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from graphaudit.numeric.fixedpoint import FixedPointCodec
from graphaudit.numeric.metrics import SMALL_TENSOR, ErrorStats
from graphaudit.numeric.reduction import Updates
from graphaudit.numeric.scaledint import ScaledIntegers

SCALE = 0.0234375 + 2.0 ** -30  # a step whose products are not exact in float32


@pytest.fixture(autouse=True)
def numpy_route(monkeypatch):
    """The numpy route of the sums, whatever an earlier test of this process enabled: the claim here is equality
    to the bit with the whole float64 decoding, which that route gives (the compiled kernel adds the same terms in
    another order: tests/test_fastsum.py)."""
    from graphaudit.numeric import fastsum

    monkeypatch.setattr(fastsum, "_kernel", None)
    monkeypatch.setattr(fastsum, "_scaled", {})
    monkeypatch.setattr(fastsum, "_tried", True)


def _pair(shape_nchw, dtype=np.int8, seed=0, nonfinite=False):
    rng = np.random.default_rng(seed)
    n, c, h, w = shape_nchw
    info = np.iinfo(dtype)
    q = rng.integers(info.min, info.max + 1, size=(n, h, w, c)).astype(dtype)  # NHWC, as the fixed-point stage
    ref = (rng.standard_normal(shape_nchw) * 2).astype(np.float32)
    if nonfinite:
        ref.reshape(-1)[[5, 40_000, 70_001]] = [np.nan, np.inf, -np.inf]
    return q, ref


def _real(q, offset, scale):
    """The formula: NHWC -> NCHW, then (q + offset) * scale in float64 (C order: sums run in the tensor's order)."""
    return np.ascontiguousarray((np.transpose(q, (0, 3, 1, 2)).astype(np.float64) + offset) * np.float64(scale))


def _fields(st: ErrorStats) -> str:
    """Every field, NaN equal to NaN (repr), floats to the bit (repr of a float round-trips)."""
    return repr(dataclasses.astuple(st))


@pytest.mark.parametrize("dtype,offset", [(np.int8, 0), (np.int8, 128), (np.int16, 0)])
@pytest.mark.parametrize("nonfinite", [False, True])
def test_blocks_give_the_figures_of_the_whole_decoding(dtype, offset, nonfinite):
    # 3 x 37 x 29 x 31 = 99,789 elements: three 32,768-element blocks and a partial one
    q, ref = _pair((1, 3 * 37, 29, 31), dtype, nonfinite=nonfinite)
    want, got = ErrorStats(), ErrorStats()
    want.update(ref, _real(q, offset, SCALE), SCALE)
    lazy = FixedPointCodec(scale=(SCALE,), axis=1, a_value="x", offset=offset, dtype="INT8").lazy(q, ref.shape)
    assert isinstance(lazy, ScaledIntegers)
    assert lazy.nbytes == 8 * q.size  # the float64 bytes it stands for: what the reduction schedules by
    got.update(ref, lazy, SCALE)
    assert _fields(got) == _fields(want)
    assert (want.nonfinite_a > 0) == nonfinite


def test_the_whole_array_is_the_formula():
    q, ref = _pair((1, 8, 5, 7), np.int8)
    lazy = FixedPointCodec(scale=(SCALE,), axis=1, a_value="x", offset=128).lazy(q, ref.shape)
    np.testing.assert_array_equal(lazy.array(), _real(q, 128, SCALE))
    assert lazy.shape == ref.shape


def test_updates_queue_block_decoding_for_large_and_whole_arrays_for_small_pairs():
    """Through the reduction's queue: large pairs in blocks, small ones decoded whole for the grouped update; the
    figures equal those of the same queue given the formula's arrays."""
    big_q, big_ref = _pair((1, 64, 40, 40), seed=1)  # 102,400 elements
    small_q, small_ref = _pair((1, 4, 8, 8), seed=2)  # 256 elements
    assert small_q.size <= SMALL_TENSOR < big_q.size
    codec = FixedPointCodec(scale=(SCALE,), axis=1, a_value="x", offset=0)
    want = [ErrorStats(), ErrorStats()]
    got = [ErrorStats(), ErrorStats()]
    u = Updates()
    u.add(want[0], big_ref, _real(big_q, 0, SCALE), ((SCALE,), 1))
    u.add(want[1], small_ref, _real(small_q, 0, SCALE), ((SCALE,), 1))
    u.apply()
    u = Updates()
    u.add(got[0], big_ref, codec.lazy(big_q, big_ref.shape), ((SCALE,), 1))
    u.add(got[1], small_ref, codec.lazy(small_q, small_ref.shape), ((SCALE,), 1))
    assert isinstance(u.items[0][2], ScaledIntegers) and isinstance(u.items[1][2], np.ndarray)
    u.apply()
    assert [_fields(s) for s in got] == [_fields(s) for s in want]


def test_per_channel_scales_are_decoded_whole():
    q, ref = _pair((1, 3, 4, 5), np.int8)
    scales = (0.5, 0.25, 0.125)
    codec = FixedPointCodec(scale=scales, axis=1, a_value="x")
    out = codec.lazy(q, ref.shape)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, _real(q, 0, 1.0) * np.array(scales).reshape(1, 3, 1, 1))


def test_element_wise_lsb_reads_the_values_whole():
    """A scale the sums cannot take (per channel) sends the pair to the element-wise LSB path, which reads b whole."""
    q, ref = _pair((1, 3, 40, 300), np.int8, seed=3)
    per_channel = np.array([SCALE, 2 * SCALE, 4 * SCALE])
    want, got = ErrorStats(), ErrorStats()
    want.update(ref, _real(q, 0, SCALE), per_channel, 1)
    got.update(ref, ScaledIntegers(np.transpose(q, (0, 3, 1, 2)), 0, SCALE), per_channel, 1)
    assert _fields(got) == _fields(want)
    assert got.lsb_count == q.size


def test_only_integers_are_taken():
    with pytest.raises(TypeError, match="integers"):
        ScaledIntegers(np.zeros(3, np.float32), 0, 1.0)


@pytest.mark.parametrize("dtype,offset", [(np.int8, 0), (np.int8, 128), (np.int16, 0)])
def test_encode_in_blocks_is_the_formula(dtype, offset):
    """The integers of a's real values: round half to even of x / scale in float64, minus the offset, saturated
    (docs/HORIZON.md section 7), over several blocks, transposed to b's NHWC; values beyond the grid saturate."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((1, 7, 101, 61)) * 3).astype(np.float32)  # 43,127 elements: two blocks
    x.reshape(-1)[[0, 1]] = [1e6, -1e6]  # saturated both ways
    info = np.iinfo(dtype)
    want = np.clip(np.rint(x.astype(np.float64) / SCALE) - offset, info.min, info.max).astype(dtype)
    codec = FixedPointCodec(scale=(SCALE,), axis=1, a_value="x", offset=offset,
                            dtype="INT16" if dtype == np.int16 else "INT8")
    got = codec.encode(x, (1, 101, 61, 7), dtype)
    np.testing.assert_array_equal(got, np.transpose(want, (0, 2, 3, 1)))
    assert got.dtype == dtype
    assert want.reshape(-1)[0] == info.max and want.reshape(-1)[1] == info.min


def test_encode_per_channel_is_the_formula():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 3, 4, 5)).astype(np.float32)
    scales = (0.5, 0.25, 0.125)
    want = np.clip(np.rint(x.astype(np.float64) / np.array(scales).reshape(1, 3, 1, 1)), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(FixedPointCodec(scale=scales, axis=1, a_value="x").encode(x, None, np.int8), want)


@pytest.mark.parametrize("shape", [(), (1,), (1, 1, 4, 5)])
def test_encode_per_channel_scales_no_axis_holds_broadcast_as_the_formula(shape):
    """Per-channel scales that no axis of x holds (x 0-d, or of size 1 on the scales' axis): the formula
    ``clip(rint(x / scale) - offset)`` broadcasts x against the scales, as the encoding before the in-place one did
    (4cb2260), instead of raising ValueError out of the comparison (non-broadcastable output operand)."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    scales = (0.5, 0.25, 0.125)
    s = np.array(scales).reshape([3] + [1] * (len(shape) - 2)) if len(shape) > 1 else np.array(scales)
    want = np.clip(np.rint(np.float64(x) / s) - 128, -128, 127).astype(np.int8)
    got = FixedPointCodec(scale=scales, axis=1, a_value="x", offset=128).encode(x, None, np.int8)
    assert got.shape == np.broadcast_shapes(np.shape(x), s.shape)
    np.testing.assert_array_equal(got, want)
