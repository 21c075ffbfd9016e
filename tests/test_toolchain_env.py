"""graphaudit inside the Horizon toolchain's own environment: installed there, and the suite that needs Horizon's
runtime (tests/horizon_runtime/) run there.

set-up (``setup.sh``) installs graphaudit's dependencies into the toolchain's Python 3.10 venv with every one of the
toolchain's ``name==version`` pins as a pip constraint, and graphaudit itself into ``samples/build/hbvenv`` (this
checkout's venv over the shared one) (numpy 1.23.0, onnx 1.15.0, onnxruntime 1.16.2, protobuf 3.20.3, ...).
These tests check the pins held and run ``tests/horizon_runtime`` in that interpreter with this checkout on
``PYTHONPATH`` (so the code under test is the checkout's, whatever copy is installed). They skip with one line
where set-up built no toolchain environment (no Python 3.10, or ``GRAPHAUDIT_NO_HBENV=1``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import TOOLCHAIN_ENV_LINES
from .horizon_check import toolchain_python

ROOT = Path(__file__).resolve().parents[1]
PY = toolchain_python()
needs_env = pytest.mark.skipif(PY is None, reason="no Horizon toolchain environment (samples/hbenv.sh needs "
                                                  "Python 3.10; GRAPHAUDIT_NO_HBENV=1 skips it)")

#: The toolchain's pins that graphaudit must run with (dg-nn-toolkit 1.0.0's environment, as set-up froze it).
TOOLCHAIN_PINS = {"numpy": "1.23.0", "onnx": "1.15.0", "onnxruntime": "1.16.2", "protobuf": "3.20.3"}


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}


@needs_env
def test_installed_beside_the_toolchain_pins():
    code = ("import importlib.metadata as m, json; print(json.dumps({k: m.version(k) for k in "
            f"{sorted(TOOLCHAIN_PINS)!r} + ['graphaudit']}}))")
    out = subprocess.run([str(PY), "-c", code], capture_output=True, text=True, check=True, cwd="/",
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    import json

    versions = json.loads(out.stdout)
    for name, want in TOOLCHAIN_PINS.items():
        assert versions[name] == want, f"{name} {versions[name]} in the toolchain env, its pin is {want}"
    assert versions["graphaudit"]
    cli = subprocess.run([str(PY.parent / "graphaudit"), "--version"], capture_output=True, text=True, cwd="/")
    assert cli.returncode == 0 and cli.stdout.startswith("graphaudit ")


@needs_env
def test_toolchain_graphaudit_is_this_checkout():
    """The README's ``samples/build/hbvenv/bin/graphaudit`` runs this checkout's code, not a copy frozen when set-up
    last ran (a copy installed into the cached venv kept running fixed bugs after a ``git pull``), nor another
    checkout's (an editable install in the shared toolchain venv pointed at the clone that ran set-up last, and
    broke when that clone was deleted)."""
    code = "import graphaudit.numeric.hybrid as h; print(h.__file__)"
    out = subprocess.run([str(PY), "-c", code], capture_output=True, text=True, check=True, cwd="/",
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert Path(out.stdout.strip()).resolve() == (ROOT / "graphaudit" / "numeric" / "hybrid.py").resolve()
    shared = Path((ROOT / "samples" / "build" / "hbenv.path").read_text().strip()) / "bin" / "python"
    if os.environ.get("GRAPHAUDIT_HBENV") is None and shared.is_file():  # the cache shared by checkouts holds none
        probe = subprocess.run([str(shared), "-c", "import importlib.util as u; print(u.find_spec('graphaudit'))"],
                               capture_output=True, text=True, check=True, cwd="/",
                               env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert probe.stdout.strip() == "None", probe.stdout


@needs_env
def test_horizon_runtime_suite(tmp_path):
    """tests/horizon_runtime in the toolchain's Python: lowering vs Horizon's runtime, explain --runtime horizon
    and the toolchain table. Its failures are this test's failure, with the tail of its output."""
    proc = subprocess.run([str(PY), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
                           str(ROOT / "tests" / "horizon_runtime")], capture_output=True, text=True, cwd=tmp_path,
                          env=_env())
    lines = proc.stdout.splitlines()
    start = next((i for i, ln in enumerate(lines) if "graphaudit lowering vs Horizon" in ln), None)
    TOOLCHAIN_ENV_LINES.extend(lines[start:] if start is not None else lines[-3:])
    assert proc.returncode == 0, "\n".join(lines[-60:]) + proc.stderr[-2000:]
    assert " passed" in lines[-1] and "skipped" not in lines[-1], lines[-1]
