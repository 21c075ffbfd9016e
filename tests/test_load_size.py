"""Stage files larger than protobuf's 2 GiB are refused from their size, before being read."""

from __future__ import annotations

import shutil

import pytest

from graphaudit.errors import ModelLoadError
from graphaudit.load import MAX_MODEL_BYTES, load_stage

from .test_cli import assert_user_error, run


def test_limit_is_protobufs():
    """The limit worked out independently: protobuf's int32 message size, as onnx.checker states it."""
    import onnx.checker

    assert MAX_MODEL_BYTES == 2**31 - 1 == onnx.checker.MAXIMUM_PROTOBUF


def test_a_file_over_2_gib_is_refused_without_reading_it(tmp_path, samples):
    """Used to read the whole file first (4 GiB sparse: 39 s, 4.1 GB RSS) and then say "not an ONNX model or
    truncated". A sparse file: no disk used, and nothing is read."""
    d = tmp_path / "stages"
    shutil.copytree(samples / "ort" / "ppocr_cls", d)
    big = d / "ppocr_cls_qdq.onnx"
    with open(big, "r+b") as fh:
        fh.truncate(MAX_MODEL_BYTES + 1)
    with pytest.raises(ModelLoadError, match=r"ppocr_cls_qdq.onnx: 2,147,483,648 bytes, more than protobuf's limit "
                                             r"of 2,147,483,647 bytes \(2 GiB\)"):
        load_stage(big)
    p = run("explain", str(d), "--out", str(tmp_path / "rep"))
    assert_user_error(p, f"{big}: 2,147,483,648 bytes, more than protobuf's limit")
