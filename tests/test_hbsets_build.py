"""The real Horizon OE 1.x set-up: samples/hbenv.sh (toolchain venv) and samples/build_horizon_sets.py (stage sets).

These check what set-up built (samples/build/hbenv.path, samples/build/hb/): every spec x march has a set, each
finished set has the four stage files and its recorded sha256s, and Horizon's own runtime (run in the toolchain venv)
runs every stage on one calibration sample. They skip, with the reason, where set-up had no Python 3.10.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
HB = SAMPLES / "build" / "hb"
PATH_FILE = SAMPLES / "build" / "hbenv.path"
STAGES = ("original_float", "optimized_float", "calibrated", "quantized")
#: sets the toolchain is known to convert (a failure of any other set only has to be recorded properly)
KNOWN_GOOD = {f"{k}_{m}" for k in ("ppocr_cls", "ppocr_det", "ddddocr_det", "mtcnn_onet") for m in ("bayes-e", "bernoulli2")}

sys.path.insert(0, str(SAMPLES))
import horizon_specs  # noqa: E402

VENV = Path(PATH_FILE.read_text().strip()) if PATH_FILE.is_file() else None
needs_toolchain = pytest.mark.skipif(VENV is None, reason="no samples/build/hbenv.path: set-up found no Python 3.10, "
                                                          "so the real Horizon toolchain is not installed")


def _index() -> dict:
    return json.loads((HB / "index.json").read_text())


def _expected_sets() -> list[str]:
    return sorted(f"{s['key']}_{m}" for s in horizon_specs.SPECS
                  for m in s.get("marches", horizon_specs.DEFAULTS["marches"]))


def _ok_sets() -> list[Path]:
    if not (HB / "index.json").is_file():
        return []
    return [HB / n for n, r in sorted(_index()["sets"].items()) if r["status"] == "ok"]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- hbenv.sh

def _copy_hbenv(tmp_path: Path) -> Path:
    d = tmp_path / "samples"
    d.mkdir()
    for f in ("hbenv.sh", "hbenv-requirements.txt"):
        shutil.copy2(SAMPLES / f, d / f)
    return d


def test_hbenv_without_python310_says_so_in_one_line(tmp_path):
    d = _copy_hbenv(tmp_path)
    (d / "build").mkdir()
    (d / "build" / "hbenv.path").write_text("/stale\n")  # a stale path must go: the tests then skip
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "cat", "sha256sum", "cut", "mkdir", "rm", "ls", "sort", "dirname", "env"):
        src = shutil.which(tool)
        if src:
            os.symlink(src, bindir / tool)
    env = {"PATH": str(bindir), "HOME": str(tmp_path / "home"), "PYENV_ROOT": str(tmp_path / "nopyenv")}
    p = subprocess.run(["bash", str(d / "hbenv.sh")], capture_output=True, text=True, env=env, timeout=60)
    if Path("/usr/bin/python3.10").exists():
        pytest.skip("/usr/bin/python3.10 exists here, so hbenv.sh would find it")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "setup: Python 3.10 not found: the real Horizon toolchain is not installed and its tests skip"], p.stdout
    assert not (d / "build" / "hbenv.path").exists()


def test_hbenv_opt_out(tmp_path):
    d = _copy_hbenv(tmp_path)
    env = {**os.environ, "GRAPHAUDIT_NO_HBENV": "1", "GRAPHAUDIT_CACHE": str(tmp_path / "cache")}
    p = subprocess.run(["bash", str(d / "hbenv.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 1 and "tests skip" in p.stdout, (p.stdout, p.stderr)
    assert not (tmp_path / "cache").exists()


@needs_toolchain
def test_hbenv_second_run_is_a_quick_no_op(tmp_path):
    info = dict(line.split("=", 1) for line in (VENV / "hbenv-info.txt").read_text().split())
    key = hashlib.sha256((SAMPLES / "hbenv-requirements.txt").read_bytes() + info["python"].encode()).hexdigest()[:12]
    if VENV.name != f"hbenv-{key}":
        pytest.skip(f"{VENV} was not built from this requirements file (key {key})")
    d = _copy_hbenv(tmp_path)
    env = {**os.environ, "GRAPHAUDIT_CACHE": str(VENV.parent), "PYTHON310": info["base_interpreter"]}
    p = subprocess.run(["bash", str(d / "hbenv.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"setup: Horizon OE 1.x toolchain venv: {VENV} (cached)"
    assert (d / "build" / "hbenv.path").read_text().strip() == str(VENV)


@needs_toolchain
def test_toolchain_venv_is_complete():
    for tool in ("python", "hb_mapper", "hbdk-config", "hbdk-cc"):
        assert (VENV / "bin" / tool).exists(), tool
    head = (VENV / "bin" / "hb_mapper").read_text().splitlines()[0]
    assert head == f"#!{VENV}/bin/python"  # renamed into place: its scripts name the final path
    freeze = (VENV / "hbenv-freeze.txt").read_text().lower()
    for pin in ("torch==1.12.1", "dg-nn-toolkit==1.0.0", "dgdk==1.0.0"):
        assert pin in freeze.replace("_", "-"), pin


# --------------------------------------------------------------------------- stage sets

@needs_toolchain
def test_every_spec_and_march_has_a_set():
    index = _index()
    assert sorted(index["sets"]) == _expected_sets()
    for name, r in index["sets"].items():
        b = json.loads((HB / name / "build.json").read_text())
        assert b["status"] == r["status"] and b["key"] == r["key"]
        if name in KNOWN_GOOD:
            assert b["status"] == "ok", (name, b.get("log_tail"))
        if b["status"] != "ok":  # recorded, with the reason
            assert b["rc"] != 0 or b["missing"] or b["timed_out"]
            assert b["log_tail"] or b["console_tail"]


@needs_toolchain
@pytest.mark.parametrize("set_dir", _ok_sets(), ids=lambda p: p.name)
def test_set_files(set_dir):
    b = json.loads((set_dir / "build.json").read_text())
    spec = b["spec"]
    prefix = spec["key"]
    for s in STAGES:
        assert (set_dir / "model_output" / f"{prefix}_{s}_model.onnx").is_file(), s
        assert b["stages"][s]["nodes"] > 0
    for f in (f"model_output/{prefix}.bin", f"model_output/{prefix}_quant_info.json", "hb_mapper_makertbin.log",
              "config.yaml", b["model_file"]["file"]):
        assert (set_dir / f).is_file(), f
    assert not list(set_dir.rglob("*.html"))
    # every file is what build.json recorded (no more, no fewer)
    present = {p.relative_to(set_dir).as_posix() for p in set_dir.rglob("*") if p.is_file()} - {"build.json"}
    assert present == set(b["files"])
    for rel, f in b["files"].items():
        assert _sha(set_dir / rel) == f["sha256"], rel
    # calibration data: raw uint8 at input_shape
    cal = sorted((set_dir / b["calibration"]["dir"]).iterdir())
    assert len(cal) == spec["samples"] == b["calibration"]["count"]
    assert all(p.stat().st_size == int(np.prod(spec["input_shape"])) for p in cal)
    # the config is what hb_mapper read
    cfg = (set_dir / "config.yaml").read_text().splitlines()
    for line in (f"  march: '{b['march']}'", f"  onnx_model: '{b['model_file']['file']}'",
                 f"  input_shape: '{'x'.join(map(str, spec['input_shape']))}'",
                 f"  cal_data_dir: './{b['calibration']['dir']}'", "  cal_data_type: 'uint8'"):
        assert line in cfg, line
    # the quantized stage takes int8, the float stages float32
    assert b["stages"]["quantized"]["inputs"][0]["dtype"] == "int8"
    assert b["stages"]["original_float"]["inputs"][0]["dtype"] == "float"
    assert b["runtime_check"]["ok"], b["runtime_check"]


@needs_toolchain
@pytest.mark.parametrize("set_dir", _ok_sets(), ids=lambda p: p.name)
def test_horizon_runtime_runs_every_stage(set_dir, tmp_path):
    """Horizon's InferenceSession (toolchain venv) on the first calibration sample, pixel - 128."""
    b = json.loads((set_dir / "build.json").read_text())
    result = tmp_path / "rt.json"
    arg = {"dir": str(set_dir), "shape": b["spec"]["input_shape"],
           "sample": str(set_dir / b["calibration"]["dir"] / b["calibration"]["files"][0]["file"]),
           "stages": {s: v["file"] for s, v in b["stages"].items()}, "result": str(result)}
    p = subprocess.run([str(VENV / "bin" / "python"), str(SAMPLES / "build_horizon_sets.py"), "--runtime-check",
                        json.dumps(arg)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rt = json.loads(result.read_text())
    assert rt["ok"] and list(rt["stages"]) == list(STAGES)
    assert rt["stages"]["quantized"]["input"]["type"] == "tensor(int8)"
    for s in ("optimized_float", "calibrated"):
        assert min(rt["stages"][s]["cosine_vs_original_float"]) > 0.9, s
    # the runtime repeats what the build recorded
    for s in STAGES:
        rec = b["runtime_check"]["stages"][s]
        assert rt["stages"][s]["outputs"] == rec["outputs"], s
        assert rt["stages"][s].get("cosine_vs_original_float") == pytest.approx(
            rec.get("cosine_vs_original_float"), abs=1e-6), s
