"""A stage file written in place after graphaudit loaded it: a sharded run must not hash the new bytes as the run's
own (the workers would compare another model under the loaded stage's alignment: a breaker run overwrote the QDQ
stage of PP-OCRv4 det with its optimized stage 1.5 s into ``compare --workers 2`` and got exit 0, 1 aligned tensor
compared, SQNR inf)."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from graphaudit.errors import GraphAuditError
from graphaudit.pipeline import load_pipeline
from graphaudit.shards import PipelineSpec


@pytest.fixture
def copied(samples, tmp_path):
    d = tmp_path / "cls"
    shutil.copytree(samples / "ort" / "ppocr_cls", d)
    return d


def test_the_spec_hashes_the_loaded_files(copied):
    stages = load_pipeline([copied])
    spec = PipelineSpec.of(stages)
    for (path, _role, _name, sha), st in zip(spec.stages, stages):
        assert path == st.path and sha == hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_a_file_written_in_place_after_loading_stops_the_run(copied):
    stages = load_pipeline([copied])
    qdq = copied / "ppocr_cls_qdq.onnx"
    other = (copied / "ppocr_cls_optimized.onnx").read_bytes()
    with open(qdq, "r+b") as f:  # same inode: written in place, as cp onto an existing file does
        f.write(other)
        f.truncate()
    with pytest.raises(GraphAuditError, match=r"ppocr_cls_qdq\.onnx: the file changed after it was loaded"):
        PipelineSpec.of(stages)
