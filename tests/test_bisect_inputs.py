"""``graphaudit bisect`` on wrong and hostile input: one line ``graphaudit: error: ...`` and exit 2 (no traceback),
before the expensive work where the problem is visible up front; the user's files never overwritten; a hybrid
whose metric is not a number never counts as reaching the target.

Real parts only: the real hb_mapper ppocr_cls set and the onnxruntime QDQ ppocr_cls pipeline from samples/build,
copied to tmp_path where a test might write; the expected answers follow from the inputs (an exit code, an
unchanged file's bytes, a NaN the hook itself returns).
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import sys
from pathlib import Path

import pytest

from graphaudit.cli import main
from graphaudit.numeric.grouptest import group_test

sys.path.insert(0, str(Path(__file__).resolve().parent))
import horizon_check as hc  # noqa: E402

CLS = next((p for p in hc.built_sets() if p.name == "ppocr_cls_bayes-e"), None)
needs_cls = pytest.mark.skipif(CLS is None, reason="no real ppocr_cls_bayes-e set (set-up builds it)")
ORT_CLS = Path(__file__).resolve().parent.parent / "samples" / "build" / "ort" / "ppocr_cls"
needs_ort_cls = pytest.mark.skipif(not (ORT_CLS / "ppocr_cls_qdq.onnx").is_file(),
                                   reason="no onnxruntime QDQ ppocr_cls pipeline (set-up builds it)")


def _one_line_error(capsys, *words: str) -> str:
    """The one error line on stderr (note lines, ``graphaudit: note: ...``, are not errors and are left out)."""
    err = "\n".join(ln for ln in capsys.readouterr().err.strip().splitlines()
                    if not ln.startswith("graphaudit: note: "))
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "error:" in err and all(w in err for w in words), err
    return err


def test_budget_below_two_is_refused_by_the_parser(capsys):
    """--budget 1 used to reach group_test's ValueError (a traceback, exit 1) after the whole numeric pass."""
    with pytest.raises(SystemExit) as e:
        main(["bisect", "x", "--budget", "1"])
    assert e.value.code == 2
    _one_line_error(capsys, "--budget", "at least 2")


def test_group_test_nan_never_reaches_the_target():
    """A NaN share (a hybrid whose outputs or metric are NaN) compares False with everything: it used to pass
    ``r_all < target`` and the search reported the target reached with nan% recovered."""
    res = group_test(5, lambda sel: math.nan, target=0.8)
    assert not res.reached and len(res.steps) == 1 and math.isnan(res.recovered)


@needs_cls
def test_pair_on_the_fixed_point_stage_is_refused_up_front(capsys):
    """calibrated -> quantized in stock onnxruntime: one line naming --pair and the stage, before any run."""
    if importlib.util.find_spec("horizon_nn") is not None:
        pytest.skip("Horizon's runtime imports here: it runs the quantized stage")
    assert main(["bisect", str(CLS / "model_output"), "--pair", "2", "--no-config", "--random", "1"]) == 2
    _one_line_error(capsys, "--pair 2", "quantized", "fixed-point")


@needs_ort_cls
def test_runtime_horizon_without_horizon_nn_is_one_line(capsys):
    if importlib.util.find_spec("horizon_nn") is not None:
        pytest.skip("Horizon's runtime imports here")
    assert main(["bisect", str(ORT_CLS), "--runtime", "horizon", "--random", "1"]) == 2
    _one_line_error(capsys, "--runtime horizon", "horizon_nn")


@needs_cls
def test_json_never_overwrites_the_config_found_beside_the_stages(tmp_path, capsys):
    """The config is found by itself (no --config); --json naming it, or a file in its cal_data_dir, is refused
    and the config keeps its bytes."""
    shutil.copytree(CLS, tmp_path / "set", ignore=shutil.ignore_patterns("*.bin", "*.log"))
    cfg = tmp_path / "set" / "config.yaml"
    before = cfg.read_bytes()
    for out in (cfg, tmp_path / "set" / "calibration_data_bgr" / "r.json"):
        assert main(["bisect", str(tmp_path / "set" / "model_output"), "--json", str(out)]) == 2
        _one_line_error(capsys, str(out), "refusing")
    assert cfg.read_bytes() == before
    assert not (tmp_path / "set" / "calibration_data_bgr" / "r.json").exists()


@needs_ort_cls
def test_json_never_overwrites_the_eval_hook_file(tmp_path, capsys):
    hook = tmp_path / "hook.py"
    hook.write_text("def evaluate(run, samples):\n    return 1.0\n")
    before = hook.read_bytes()
    assert main(["bisect", str(ORT_CLS), "--random", "1", "--eval", f"{hook}:evaluate", "--json", str(hook)]) == 2
    _one_line_error(capsys, str(hook), "refusing")
    assert hook.read_bytes() == before


@needs_ort_cls
def test_hook_nan_on_every_hybrid_is_not_a_result(tmp_path, capsys):
    """The hook gives 1.0 on stage a, 0.5 on b and NaN on every hybrid: exit 1 (target not reached), the report
    says the share cannot be measured, no fix is proposed for every node; a sys.exit in the hook is the hook's
    error (one line, exit 2), not graphaudit's exit status."""
    hook = tmp_path / "nanhook.py"
    hook.write_text("CALLS = []\n\n\ndef evaluate(run, samples):\n    CALLS.append(1)\n"
                    "    return {1: 1.0, 2: 0.5}.get(len(CALLS), float('nan'))\n\n\n"
                    "def leave(run, samples):\n    raise SystemExit(3)\n")
    base = ["bisect", str(ORT_CLS), "--random", "1", "--max-samples", "1", "--input-shape", "x=1x3x48x192",
            "--budget", "2"]
    assert main([*base, "--eval", f"{hook}:evaluate"]) == 1
    out = capsys.readouterr().out
    assert "not a number" in out and "nodes_to_exclude" not in out
    assert main([*base, "--eval", f"{hook}:leave"]) == 2
    _one_line_error(capsys, "SystemExit")


@needs_ort_cls
def test_a_source_that_is_not_the_float_model_does_not_crash_the_isolated_measure(tmp_path, capsys):
    """--source given the QDQ model (a user's mix-up): the isolated measurement feeds a's tensors into b regions
    they do not fit (24 channels into an 8-channel Conv); onnxruntime's Fail used to escape as a traceback (exit 1).
    Such a region is skipped like one that cannot load, and the bisection still runs: exit 0 or 1, JSON written."""
    js = tmp_path / "b.json"
    src = tmp_path / "model.onnx"  # a copy: the stage file itself as --source is refused (given twice)
    src.write_bytes((ORT_CLS / "ppocr_cls_qdq.onnx").read_bytes())
    rc = main(["bisect", str(ORT_CLS), "--source", str(src), "--random", "1",
               "--max-samples", "1", "--input-shape", "x=1x3x48x192", "--budget", "2", "--json", str(js)])
    assert rc in (0, 1) and js.is_file()
    assert "Traceback" not in capsys.readouterr().err


@needs_ort_cls
@pytest.mark.parametrize("workers", [None, "2"])
def test_a_nan_sample_is_left_out_as_the_comparison_leaves_it_out(tmp_path, capsys, workers):
    """8 sample files, the fourth holding an infinite value: bisect runs on the other 7 (it stopped with one line),
    names the file among the data left out, and measures exactly what it measures on a folder of those 7 files
    alone (the same samples: the same output SQNR of b and the same units chosen); sharded the same."""
    import json

    import numpy as np

    src = sorted((ORT_CLS.parent.parent / "data" / "ppocr_cls" / "x").glob("*.npy"))[:8]
    bad_dir, clean_dir = tmp_path / "bad", tmp_path / "clean"
    bad_dir.mkdir()
    clean_dir.mkdir()
    for i, f in enumerate(src):
        (bad_dir / f.name).write_bytes(f.read_bytes())
        if i != 3:
            (clean_dir / f.name).write_bytes(f.read_bytes())
    a = np.load(bad_dir / src[3].name)
    a[..., 0, 0] = np.inf
    np.save(bad_dir / src[3].name, a)
    reports = []
    for d in (bad_dir, clean_dir):
        out = tmp_path / f"{d.name}.json"
        code = main(["bisect", str(ORT_CLS), "--data", str(d), "--max-samples", "8", "--budget", "4", "--json",
                     str(out), *(("--workers", workers) if workers else ())])
        assert code in (0, 1), capsys.readouterr().err
        reports.append(json.loads(out.read_text()))
    bad, clean = reports
    assert bad["samples"] == clean["samples"] == 7
    assert bad["data_unreadable"] == [f"{bad_dir / src[3].name}: input 'x' holds NaN or infinite values (left out, "
                                      "as the numeric comparison leaves it out)"] and clean["data_unreadable"] == []
    assert bad["metric_b"] == pytest.approx(clean["metric_b"], rel=1e-9) and bad["chosen"] == clean["chosen"]
    assert "1 data file(s) could not be read or fed and were left out" in " ".join(capsys.readouterr().out.split())
