"""A sample holding NaN or infinite values is left out of the numeric comparison; the other samples are compared.

Before: one such sample ended the whole comparison of `compare` / `explain --data` (the report said "numeric
comparison skipped: FILE: input 'x' holds NaN or infinite values"). The expected figures here come from a second
run on a directory without the bad sample: leaving it out must give exactly the comparison of the samples left.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from graphaudit import audit
from graphaudit.cli import main
from graphaudit.measure import NumericOptions
from graphaudit.scaleout import ScaleOut

from .test_shards import assert_same

N = 6


@pytest.fixture
def cls6(samples, tmp_path):
    """The first 6 real PP-OCR cls samples copied to ``data/`` (sample 4 with one +inf and one NaN) and the same
    without sample 4 in ``ok/``: ``(stages, data, ok)``."""
    src = samples / "data" / "ppocr_cls" / "x"
    d, ok = tmp_path / "data", tmp_path / "ok"
    d.mkdir()
    ok.mkdir()
    for k in range(N):
        x = np.load(src / f"{k}.npy")
        if k == 4:
            x = x.copy()
            x.flat[3], x.flat[100] = np.inf, np.nan
        else:
            np.save(ok / f"{k}.npy", x)
        np.save(d / f"{k}.npy", x)
    return samples / "ort" / "ppocr_cls", d, ok


def _report(out):
    return json.loads((out / "report.json").read_text())


def test_a_nonfinite_sample_is_left_out_and_the_others_compared(cls6, tmp_path, capsys):
    stages, d, ok = cls6
    assert main(["explain", str(stages), "--data", str(d), "--no-isolated", "--out", str(tmp_path / "o1")]) == 1
    got = _report(tmp_path / "o1")
    assert got["run"]["numeric_skipped"] is None and got["run"]["samples_used"] == N - 1
    (p209,) = [f for f in got["findings"] if f["code"] == "P209"]
    assert p209["severity"] == "error" and p209["location"] == {"tensor": "x"}
    assert p209["evidence"]["nonfinite"] == 2 and p209["evidence"]["left_out_count"] == 1
    assert p209["evidence"]["left_out_samples"] == [str(d / "4.npy")]
    assert (f"left out the 1 sample(s) holding them ({d / '4.npy'}) and compared the stages on the other {N - 1}"
            in p209["message"]), p209["message"]
    # independently: the same run on a directory of the 5 finite samples alone
    assert main(["explain", str(stages), "--data", str(ok), "--no-isolated", "--out", str(tmp_path / "o2")]) in (0, 1)
    want = _report(tmp_path / "o2")
    assert got["numeric"] and got["numeric"] == want["numeric"] and got["stages"] == want["stages"]
    assert "NaN" not in json.dumps(want["findings"])
    assert "comparison skipped" not in capsys.readouterr().out


def test_workers_leave_out_the_same_sample(cls6):
    """Sample 4 is in the second worker's shard (3 + 3): the sharded report is the one-process report."""
    stages, d, _ok = cls6
    one = audit(stages, data=d, numeric=NumericOptions(isolated=False)).report.to_dict()
    two = audit(stages, data=d, numeric=NumericOptions(isolated=False, scale=ScaleOut(workers=2))).report.to_dict()
    assert one["run"]["samples_used"] == N - 1 and one["numeric"]
    assert_same(one, two)


@pytest.mark.parametrize("workers", [0, 2])
def test_every_sample_nonfinite_skips_the_numbers_and_the_report_goes_on(cls6, tmp_path, workers):
    stages, d, _ok = cls6
    for k in range(N):
        x = np.load(d / f"{k}.npy")
        x.flat[k] = np.nan
        np.save(d / f"{k}.npy", x)
    scale = ScaleOut(workers=workers) if workers else None
    rep = audit(stages, data=d, numeric=NumericOptions(isolated=False, scale=scale)).report.to_dict()
    assert rep["numeric"] is None and len(rep["stages"]) == 3 and len(rep["transitions"]) == 2
    assert rep["run"]["numeric_skipped"].startswith(
        f"all {N} samples hold NaN or infinite values (the first: {d / '0.npy'}, input 'x')"), rep["run"]
    (p209,) = [f for f in rep["findings"] if f["code"] == "P209"]
    assert p209["evidence"]["left_out_count"] == N and "had no sample left, so it did not run" in p209["message"]

