"""The node_info snippet ``graphaudit bisect`` writes is accepted by hb_mapper's own config validation (MpConf) once
pasted into the real set's config, and names nodes of the optimized_float model (read here with ``onnx``), with
Horizon's runtime measuring stage a and every hybrid.
"""

from __future__ import annotations

import shutil

import onnx
import pytest

pytest.importorskip("horizon_tc_ui.config.mapper_conf_parser",
                    reason="hb_mapper's config parser imports only in the toolchain's Python 3.10 venv")

import yaml  # noqa: E402  (PyYAML: what hb_mapper reads with; the toolchain venv has it)

from graphaudit.bisection import bisect  # noqa: E402
from graphaudit.measure import NumericOptions  # noqa: E402

from ..horizon_check import built_sets  # noqa: E402
from .test_lint_vs_hb_mapper import mpconf  # noqa: E402

SETS = {p.name: p for p in built_sets()}
CASES = [n for n in ("mtcnn_onet_bayes-e",) if n in SETS]  # the smallest real bayes-e set: seconds


@pytest.mark.skipif(not CASES, reason="no real bayes-e set built")
@pytest.mark.parametrize("name", CASES)
def test_node_info_snippet_is_accepted_by_hb_mapper(name, tmp_path):
    src = SETS[name]
    rep = bisect(src / "model_output", 1, config=src / "config.yaml",
                 numeric=NumericOptions(max_samples=2, runtime="horizon"))
    assert rep.runtime == "horizon" and rep.fix and rep.fix["toolchain"] == "hb_mapper" and not rep.fix["lint"]
    entries = yaml.safe_load(rep.fix["text"])["model_parameters"]["node_info"]
    opt = onnx.load(next((src / "model_output").glob("*_optimized_float_model.onnx")), load_external_data=False)
    assert set(entries) <= {n.name for n in opt.graph.node}
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    cfg["model_parameters"]["node_info"] = entries
    work = tmp_path / name
    work.mkdir()
    for p in src.iterdir():
        if p.is_file() and p.suffix == ".onnx":
            (work / p.name).symlink_to(p.resolve())
        elif p.is_dir() and p.name.startswith("calibration"):
            shutil.copytree(p, work / p.name)
    (work / "config.yaml").write_text(yaml.safe_dump(cfg))
    ok, _keys, why = mpconf(work / "config.yaml")
    assert ok, why
