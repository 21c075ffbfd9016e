"""`graphaudit bisect --runtime horizon` on a real hb_mapper set picks a transition it can bisect.

Under Horizon's runtime every stage runs, so the last transition is calibrated -> quantized; every change there
reads or writes the fixed-point stage's integers in NHWC layout (hb_mapper's NCHW -> NHWC Transpose, the
HzSQuantized* ops). Taking the layout Transpose out alone handed NCHW values to HzSQuantizedPreprocess, which
Horizon's runtime refused ("Check failed: (weight_shape[1]) == (data_shape[1] / desc.group)"). The default is the
transition before it, optimized -> calibrated, where quantization is simulated in float; asking for the fixed-point
one by ``--pair`` gives one line that names the transition to use instead, and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("horizon_nn", reason="Horizon's runtime (horizon_nn) imports only in the toolchain's Python 3.10 "
                                         "venv (samples/hbenv.sh); tests/test_toolchain_env.py runs this suite there")

from graphaudit.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SET = ROOT / "samples" / "build" / "hb" / "ppocr_cls_bayes-e" / "model_output"


def test_default_pair_under_horizon_runtime(tmp_path):
    if not SET.is_dir():
        pytest.fail(f"{SET} missing: run ./setup.sh")
    out = tmp_path / "b.json"
    rc = main(["bisect", str(SET), "--random", "2", "--runtime", "horizon", "--json", str(out), "--budget", "4"])
    rep = json.loads(out.read_text())
    assert rc == 0
    assert (rep["pair"], rep["a"], rep["b"]) == (1, "optimized", "calibrated")
    assert rep["runtime"] == "horizon"


def test_fixed_point_pair_says_why(capsys):
    rc = main(["bisect", str(SET), "--random", "2", "--runtime", "horizon", "--pair", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and "calibrated -> quantized: no change that can be reverted" in err[0]
    assert "--pair 1" in err[0]
