"""Normalization applied twice, in every form, on every real Horizon OE 1.x stage set (hb_mapper output built at
set-up): from each set's own correct calibration pixels the test builds the harness mistakes itself (formulas below,
independent of graphaudit), for the data a user feeds the stages (``*_128``: pixel - 128) and for the calibration
folder (pixels 0..255), and asserts that each gets an error finding naming the right form on the right input, ranked
first, and that the correct data get none.

The forms are written here from the contract (docs/INPUT_CONTRACTS.md sections 1-3): a stage input takes ``p - 128`` and its
HzPreprocess computes ``((x + 128) - mean) * scale``; calibration files hold ``p`` and the toolchain does the rest.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ruamel.yaml import YAML

sys.path.insert(0, str(Path(__file__).resolve().parent))
import horizon_check as hc  # noqa: E402

from graphaudit.config import load_config  # noqa: E402
from graphaudit.lint import lint_config  # noqa: E402
from graphaudit.pipeline import load_pipeline  # noqa: E402
from graphaudit.inputcheck import check_inputs  # noqa: E402

SETS = hc.built_sets()
SKIP = "no real Horizon stage set in samples/build/hb (set-up builds them with the toolchain environment)"
#: Calibration samples per set the test uses (the rule reads per-channel ranges; 4 images span 0..255).
SAMPLES = 4


def _config(set_dir: Path) -> dict:
    return YAML(typ="safe").load((set_dir / "config.yaml").read_text())


def _pixels(set_dir: Path) -> tuple[np.ndarray, dict]:
    """The set's first calibration samples as float64 pixels, [S, *input_shape] in the training layout and colour
    order (raw uint8 files, as hb_mapper reads them), and the config's input facts."""
    cfg = _config(set_dir)
    ip = cfg["input_parameters"]
    shape = [int(x) for x in str(ip["input_shape"]).split("x")]
    cal = set_dir / cfg["calibration_parameters"]["cal_data_dir"]
    files = sorted(p for p in cal.iterdir() if p.is_file())[:SAMPLES]
    px = np.stack([np.fromfile(f, np.uint8).reshape(shape).astype(np.float64) for f in files])
    layout = ip["input_layout_train"]
    axis = 2 if layout == "NCHW" else 4  # channel axis of [S, N, ...]
    chans = shape[1] if layout == "NCHW" else shape[3]

    def per_channel(key: str, neutral: float) -> np.ndarray:
        v = ip.get(key)
        vals = [float(x) for x in str(v).split()] if v is not None else [neutral]
        arr = np.array(vals * (chans if len(vals) == 1 else 1), np.float64)
        sh = [1] * px.ndim
        sh[axis] = chans
        return arr.reshape(sh)

    nt = ip["norm_type"]
    mean = per_channel("mean_value", 0.0) if nt in ("data_mean", "data_mean_and_scale") else None
    scale = per_channel("scale_value", 1.0) if nt in ("data_scale", "data_mean_and_scale") else None
    return px, {"input": ip["input_name"], "mean": mean, "scale": scale, "cal_dir": cal.name}


def _stage_variants(p: np.ndarray, mean, scale) -> dict[str, np.ndarray]:
    """What a harness feeds a stage input (contract: p - 128), by form key."""
    out = {"correct": p - 128.0, "unit_range": p / 255.0, "missing_offset": p}
    if mean is not None:
        out["mean_twice"] = p - 128.0 - mean
    if scale is not None:
        out["scale_twice"] = (p - 128.0) * scale
    if mean is not None and scale is not None:
        out["normalized_twice"] = (p - mean) * scale
    return out


def _cal_variants(p: np.ndarray, mean, scale) -> dict[str, np.ndarray]:
    """What a user writes into the calibration folder (contract: p), by form key."""
    out = {"correct": p, "unit_range": p / 255.0, "offset_added": p - 128.0}
    if mean is not None:
        out["mean_twice"] = p - mean
    if scale is not None:
        out["scale_twice"] = p * scale
    if mean is not None and scale is not None:
        out["normalized_twice"] = (p - mean) * scale
    return out


def _equivalent(variants: dict[str, np.ndarray], key: str, p: np.ndarray) -> set[str]:
    """Forms whose data equal ``key``'s to within one pixel level (then either name is right): two forms d = a p + b
    are the same data when they differ by at most one level of the finer one, read off the arrays themselves."""
    out = {key}
    for k, v in variants.items():
        if k in (key, "correct"):
            continue
        ref = variants[key]
        # level size of each form: d per unit of p, from two pixels of different value
        flat_p, flat_r, flat_v = p.ravel(), ref.ravel(), v.ravel()
        i, j = int(np.argmin(flat_p)), int(np.argmax(flat_p))
        if flat_p[j] == flat_p[i]:
            continue
        level = min(abs(flat_r[j] - flat_r[i]), abs(flat_v[j] - flat_v[i])) / (flat_p[j] - flat_p[i])
        if np.max(np.abs(ref - v)) <= level * 1.0 + 1e-9:
            out.add(k)
    return out


_CACHE: dict[Path, tuple] = {}


def _set(set_dir: Path):
    if set_dir not in _CACHE:
        stages = load_pipeline([set_dir / "model_output"])
        _CACHE[set_dir] = (stages, load_config(set_dir / "config.yaml"), *_pixels(set_dir))
    return _CACHE[set_dir]


def _ids(paths):
    return [p.name for p in paths]


@pytest.mark.skipif(not SETS, reason=SKIP)
@pytest.mark.parametrize("set_dir", SETS, ids=_ids(SETS))
def test_stage_data_forms(set_dir, tmp_path):
    stages, cfg, p, facts = _set(set_dir)
    variants = _stage_variants(p, facts["mean"], facts["scale"])
    assert len(variants) >= 3  # no_preprocess: correct, [0, 1], raw pixels
    for key, data in variants.items():
        d = tmp_path / key
        d.mkdir()
        for k, x in enumerate(data):
            np.save(d / f"{k:02d}.npy", x.astype(np.float32))
        _stats, findings = check_inputs(stages, d, 0, config=cfg)
        errors = [f for f in findings if f.severity == "error"]
        if key == "correct":
            assert not errors, [f.message for f in errors]
            continue
        assert errors, f"{set_dir.name}: {key}: no error finding"
        first = errors[0]
        assert first.code in ("P203", "P205", "P206") and first.location.get("tensor") == facts["input"], \
            (key, first.code, first.message)
        ok = _equivalent(variants, key, p)
        got = {first.evidence.get("form"), *first.evidence.get("also", [])}
        assert ok & got, (set_dir.name, key, first.evidence.get("form"), first.evidence.get("also"), first.message)
        # the claim "the same data as" is true: every form named besides the chosen one gives the same data here
        named = {first.evidence["form"], *first.evidence.get("also", [])} & set(variants)
        assert named <= _equivalent(variants, first.evidence["form"], p) if first.evidence["form"] in variants \
            else True


@pytest.mark.skipif(not SETS, reason=SKIP)
@pytest.mark.parametrize("set_dir", SETS, ids=_ids(SETS))
def test_calibration_folder_forms(set_dir, tmp_path):
    stages, _cfg, p, facts = _set(set_dir)
    variants = _cal_variants(p, facts["mean"], facts["scale"])
    text = (set_dir / "config.yaml").read_text()
    for key, data in variants.items():
        d = tmp_path / key
        (d / "cal").mkdir(parents=True)
        for k, x in enumerate(data):
            x.astype(np.float32).tofile(d / "cal" / f"{k:02d}{Path(facts['cal_dir']).suffix or '.bin'}")
        cfg_text = text.replace(f"./{facts['cal_dir']}", "./cal").replace("cal_data_type: 'uint8'",
                                                                        "cal_data_type: 'float32'")
        (d / "config.yaml").write_text(cfg_text)
        for m in (set_dir).glob("*.onnx"):
            shutil.copy(m, d / m.name)
        findings = [f for f in lint_config(d / "config.yaml", stages=stages) if f.code == "C326"]
        # the same folder given as data (check-inputs / explain --data with --config): the P2xx rules judge it
        data_errors = [f for f in check_inputs(stages, d / "cal", 0, config=load_config(d / "config.yaml"))[1]
                       if f.severity == "error"]
        if key == "correct":
            assert not findings, [f.message for f in findings]
            assert not data_errors, [f.message for f in data_errors]
            continue
        assert findings, f"{set_dir.name}: calibration {key}: no C326"
        ok = _equivalent(variants, key, p)
        for f in (findings[0], data_errors[0] if data_errors else None):
            assert f is not None, f"{set_dir.name}: calibration folder {key} as data: no error finding"
            assert f.severity == "error"
            assert ok & {f.evidence.get("form"), *f.evidence.get("also", [])}, (key, f.message)


@pytest.mark.skipif(not SETS, reason=SKIP)
@pytest.mark.parametrize("set_dir", SETS, ids=_ids(SETS))
def test_explain_ranks_the_form_first(set_dir, tmp_path):
    """`graphaudit explain <set>/model_output --data <normalized twice> --config <its config>`: the first finding of
    the report is the input finding naming the form and the input; the run ends with a report (exit 0 or 1)."""
    _stages, _cfg, p, facts = _set(set_dir)
    variants = _stage_variants(p, facts["mean"], facts["scale"])
    key = next(k for k in ("normalized_twice", "mean_twice", "scale_twice", "unit_range") if k in variants)
    d = tmp_path / "data"
    d.mkdir()
    for k, x in enumerate(variants[key][:2]):
        np.save(d / f"{k:02d}.npy", x.astype(np.float32))
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "graphaudit", "explain", str(set_dir / "model_output"), "--data", str(d),
                        "--config", str(set_dir / "config.yaml"), "--no-isolated", "--no-report", "--json", str(out)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    rep = json.loads(out.read_text())
    first = rep["findings"][0]
    assert first["code"] in ("P203", "P206") and first["location"].get("tensor") == facts["input"], first
    assert key in {first["evidence"]["form"], *first["evidence"].get("also", [])}, first["message"]
    # what it costs: the float model the set converted (the original stage without its HzPreprocess), run here in
    # stock onnxruntime on the normalization of the wrong data and of the right data, output by output
    eff = first["evidence"]["effect"]
    assert eff["samples"] == 2 and eff["stage"] == "original", eff
    want = _independent_effect(set_dir, variants[key][:2], variants["correct"][:2], facts)
    got = [o["cosine"] for o in eff["outputs"].values()]
    np.testing.assert_allclose(got, want, atol=1e-3)
    assert "Its cost on original" in first["message"]


def _independent_effect(set_dir: Path, wrong: np.ndarray, right: np.ndarray, facts: dict) -> list[float]:
    """Cosine per output of the set's source float model fed ((x + 128) - mean) * scale of the wrong data against
    the right data (the HzPreprocess formula, docs/INPUT_CONTRACTS.md section 2), over all samples."""
    import onnxruntime as ort

    cfg = _config(set_dir)
    src = set_dir / cfg["model_parameters"]["onnx_model"]
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    mean = facts["mean"][0] if facts["mean"] is not None else 0.0
    scale = facts["scale"][0] if facts["scale"] is not None else 1.0
    sums = None
    for w, r in zip(wrong, right):
        outs = [sess.run(None, {facts["input"]: (((x + 128.0) - mean) * scale).astype(np.float32)}) for x in (w, r)]
        per = [(float(a.ravel() @ b.ravel()), float(a.ravel() @ a.ravel()), float(b.ravel() @ b.ravel()))
               for a, b in zip(*[[o.astype(np.float64) for o in out] for out in outs])]
        sums = per if sums is None else [tuple(x + y for x, y in zip(s, q)) for s, q in zip(sums, per)]
    return [d / np.sqrt(a * b) for d, a, b in sums]


def _judge_alone(x: np.ndarray, axis: int, dom) -> object:
    from graphaudit.toolchains.valuedomain import judge_domain

    v = np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)
    return judge_domain(list(v.min(axis=1)), list(v.max(axis=1)), dom)


def test_no_false_alarm_on_correct_samples():
    """The false-alarm rate of the rule, measured on correct data one sample at a time (harder than the whole set,
    which the rule judges): every calibration sample of every real set, as the stage takes it (p - 128) and as the
    calibration folder holds it (p), with its config's mean/scale; and every image the bundled samples ship, as
    pixels - 128 with PP-OCR's and ImageNet's normalizations. The figures are printed at the end of the run."""
    from PIL import Image

    from graphaudit.toolchains.valuedomain import PixelDomain

    from .conftest import VALUE_DOMAIN_LINES

    judged, alarms = 0, []
    for s in SETS:
        cfg = _config(s)
        ip = cfg["input_parameters"]
        shape = [int(x) for x in str(ip["input_shape"]).split("x")]
        axis = 1 if ip["input_layout_train"] == "NCHW" else 3
        _p, facts = _pixels(s)
        mean = tuple(np.ravel(facts["mean"])) if facts["mean"] is not None else (0.0,)
        scale = tuple(np.ravel(facts["scale"])) if facts["scale"] is not None else (1.0,)
        cal = s / cfg["calibration_parameters"]["cal_data_dir"]
        for f in sorted(cal.iterdir()):
            px = np.fromfile(f, np.uint8).reshape(shape).astype(np.float64)
            for off in (-128.0, 0.0):
                judged += 1
                if _judge_alone(px + off, axis, PixelDomain(off, mean, scale, "")) is not None:
                    alarms.append(f"{s.name}/{f.name} offset {off}")
    images = sorted((Path(__file__).resolve().parent.parent / "samples" / "build" / "data").glob("*/images/*.png"))
    norms = {"PP-OCR": ((127.5,) * 3, (1 / 127.5,) * 3), "ImageNet": ((123.675, 116.28, 103.53),
                                                                     (1 / 58.395, 1 / 57.12, 1 / 57.375))}
    for path in images:
        px = np.asarray(Image.open(path).convert("RGB"), np.float64)[None]
        for label, (mean, scale) in norms.items():
            judged += 1
            if _judge_alone(px - 128.0, 3, PixelDomain(-128.0, mean, scale, "")) is not None:
                alarms.append(f"{path.parent.parent.name}/{path.name} {label}")
    line = (f"false alarms on correct data, one sample at a time: {len(alarms)} of {judged} judgements "
            f"({len(SETS)} real sets' calibration samples as stage data and as calibration files, "
            f"{len(images)} bundled images under 2 normalizations)")
    VALUE_DOMAIN_LINES.append(line)
    assert judged >= 30 and not alarms, alarms


@pytest.mark.skipif(not SETS, reason=SKIP)
@pytest.mark.parametrize("set_dir", SETS, ids=_ids(SETS))
def test_explain_with_its_own_data_and_config(set_dir, tmp_path):
    """The README's command on every real set, NHWC included: `graphaudit explain <set>/model_output --data <its
    calibration folder> --config <its config>` ends with a report (exit 0 or 1), no input finding on its correct
    data, and numbers for the stages stock onnxruntime runs (the fixed-point stage is named as not run)."""
    cfg = _config(set_dir)
    data = set_dir / cfg["calibration_parameters"]["cal_data_dir"]
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "graphaudit", "explain", str(set_dir / "model_output"), "--data",
                        str(data), "--config", str(set_dir / "config.yaml"), "--max-samples", "2", "--no-isolated",
                        "--no-report", "--json", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    rep = json.loads(out.read_text())
    assert not [f for f in rep["findings"] if f["code"].startswith("P") and f["severity"] == "error"]
    assert len(rep["numeric"]) >= 2 and rep["run"]["data"] == str(data)
