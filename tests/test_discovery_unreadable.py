"""A stage-named entry of a stage directory that cannot be read is refused, not silently left out."""

from __future__ import annotations

import os
import shutil

import pytest

from graphaudit.errors import StageDiscoveryError
from graphaudit.toolchains.discovery import discover_stages

from .test_cli import assert_user_error, run


@pytest.fixture
def stage_dir(tmp_path, samples):
    d = tmp_path / "stages"
    shutil.copytree(samples / "ort" / "ppocr_cls", d)
    (d / "ppocr_cls_qdq.onnx").unlink()
    return d


def test_dangling_stage_symlink_is_an_error_not_a_stage_fewer(stage_dir, tmp_path):
    """Used to explain the two remaining stages, say "No findings" and exit 0."""
    (stage_dir / "ppocr_cls_qdq.onnx").symlink_to(tmp_path / "deleted_qdq.onnx")
    p = run("explain", str(stage_dir), "--no-report")
    assert_user_error(p, f"{stage_dir / 'ppocr_cls_qdq.onnx'}: is a dangling symbolic link (to "
                         f"{tmp_path / 'deleted_qdq.onnx'}); the quantized stage of {stage_dir} cannot be read")
    assert p.stdout == ""


def test_symlink_loop_and_fifo_named_as_stages(stage_dir):
    q = stage_dir / "ppocr_cls_qdq.onnx"
    q.symlink_to(q.name)
    with pytest.raises(StageDiscoveryError, match="ppocr_cls_qdq.onnx: is a symbolic link loop; the quantized stage"):
        discover_stages([stage_dir])
    q.unlink()
    os.mkfifo(q)
    with pytest.raises(StageDiscoveryError, match=r"ppocr_cls_qdq.onnx: is not a regular file \(a FIFO"):
        discover_stages([stage_dir])  # refused from its mode: opening the FIFO would block
    q.unlink()
    # what is not named as a stage stays outside discovery, broken or not; a directory is not a stage file
    (stage_dir / "notes.onnx").symlink_to(stage_dir / "gone.onnx")
    os.mkfifo(stage_dir / "pipe")
    assert [s.role for s in discover_stages([stage_dir])] == ["original", "optimized"]
