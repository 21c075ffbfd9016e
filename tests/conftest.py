"""Shared test helpers: tiny models from onnx.parser text, the bundled sample pipelines."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import onnx.parser
import pytest

from graphaudit.load import load_stage
from graphaudit.samples import samples_dir

REPO = Path(__file__).resolve().parents[1]

#: The public Horizon configs and logs: tests/corpus/horizon/{configs,logs}/ (git-ignored: the files are not
#: shipped; tests/corpus/horizon/SOURCES.md lists each one with its public origin and licence). $GRAPHAUDIT_CORPUS
#: names another directory that holds horizon/.
CORPUS = Path(os.environ.get("GRAPHAUDIT_CORPUS", REPO / "tests" / "corpus")) / "horizon"
CORPUS_SOURCES = REPO / "tests" / "corpus" / "horizon" / "SOURCES.md"


def corpus_names(kind: str) -> list[str]:
    """The file names SOURCES.md lists for ``kind`` ("configs" or "logs"), in its order."""
    section = CORPUS_SOURCES.read_text(encoding="utf-8").split(f"(`{kind}/`)", 1)[1].split("\n## ", 1)[0]
    return [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]


def corpus_file(kind: str, name: str) -> Path:
    """CORPUS/kind/name; skips the test, naming the file, when it is not there."""
    path = CORPUS / kind / name
    if not path.is_file():
        pytest.skip(f"public corpus file {kind}/{name} is not in {CORPUS} "
                    "(origin and licence: tests/corpus/horizon/SOURCES.md)")
    return path


def corpus_files(kind: str) -> list[Path]:
    """Every corpus file SOURCES.md lists for ``kind``; skips the test, naming the missing files, unless all are there."""
    missing = [n for n in corpus_names(kind) if not (CORPUS / kind / n).is_file()]
    if missing:
        pytest.skip(f"{len(missing)} public corpus file(s) not in {CORPUS / kind}: {', '.join(missing[:3])}"
                    f"{' ...' if len(missing) > 3 else ''} (origins and licences: tests/corpus/horizon/SOURCES.md)")
    return [CORPUS / kind / n for n in corpus_names(kind)]


def save_text(tmp_path: Path, name: str, text: str) -> Path:
    """Parse an onnx.parser model text, check it, save it as tmp_path/name."""
    model = onnx.parser.parse_model(text)
    p = tmp_path / name
    onnx.save(model, p)
    return p


@pytest.fixture
def stage_from_text(tmp_path):
    """Build a StageGraph from onnx.parser text: ``stage_from_text(text, name='a', role='custom')``."""

    def make(text: str, name: str = "a", role: str = "custom"):
        return load_stage(save_text(tmp_path, f"{name}.onnx", text), role=role, name=name)

    return make


@pytest.fixture
def elsewhere(tmp_path) -> Path:
    """A directory beside tmp_path, not in it: where a test writes outputs of stage files it made in tmp_path
    (graphaudit refuses outputs in the directory of a stage file given, as inside a stage directory given)."""
    d = tmp_path.parent / f"{tmp_path.name}_out"
    d.mkdir(exist_ok=True)
    return d


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path, monkeypatch):
    """Every test runs in its own temporary working directory: `explain` writes ./graphaudit_report/ by default,
    and nothing may land in the checkout. COLUMNS and LINES are unset, as in a serial run from CI: pytest-xdist's
    workers set COLUMNS=80, and the console then folds long names and paths that tests look for (a test that wants
    a width sets COLUMNS itself)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture(scope="session")
def samples() -> Path:
    """The bundled sample directory; fails (never skips) when set-up did not build it."""
    d = samples_dir()
    if not (d / "build_info.json").is_file():
        pytest.fail(f"bundled samples missing in {d}: run `python samples/build_samples.py` (done by .ci/run)")
    return d


def lint_under_memory_limit(path: Path, limit: int = 1 << 30):
    """Run `graphaudit lint PATH` in a child process whose address space is capped at ``limit`` bytes."""
    import subprocess
    import sys

    code = (f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); "
            "from graphaudit.cli import main; sys.exit(main(['lint', sys.argv[1]]))")
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)



#: Lines the numeric alignment checks want shown after the run (pairs checked per transition, worst cosine).
PAIR_CHECK_LINES: list[str] = []
#: False-alarm figures of the value-domain rule on correct data (tests/test_value_domain_real.py).
VALUE_DOMAIN_LINES: list[str] = []
#: The terminal summary of the suite that runs in the toolchain's own Python (tests/test_toolchain_env.py).
TOOLCHAIN_ENV_LINES: list[str] = []


_SUMMARY_LISTS = {"pairs": PAIR_CHECK_LINES, "value_domain": VALUE_DOMAIN_LINES, "toolchain_env": TOOLCHAIN_ENV_LINES}


def pytest_sessionfinish(session):
    """Under pytest-xdist, a worker hands the figures it collected to the controller (``workeroutput``)."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["graphaudit_summary"] = {k: list(v) for k, v in _SUMMARY_LISTS.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: the figures a finished worker collected join the ones printed at the end."""
    for key, lines in getattr(node, "workeroutput", {}).get("graphaudit_summary", {}).items():
        _SUMMARY_LISTS[key].extend(lines)


def pytest_terminal_summary(terminalreporter):
    """Print the figures the tests collected (pair checks, value-domain false alarms, the toolchain-venv suite)."""
    for title, lines in (("aligned pairs checked by their numbers", PAIR_CHECK_LINES),
                         ("input value-domain rule on correct data", VALUE_DOMAIN_LINES),
                         ("tests/horizon_runtime, run in the Horizon toolchain's Python 3.10", TOOLCHAIN_ENV_LINES)):
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)


def copy_with_nan(src: Path, dst: Path, bad: int, at: int, n: int = 4) -> Path:
    """Copy samples ``src/0.npy .. src/{n-1}.npy`` into a new directory ``dst``, sample ``bad`` with a NaN at flat
    index ``at``; returns ``dst``."""
    import numpy as np

    dst.mkdir()
    for k in range(n):
        a = np.load(src / f"{k}.npy")
        if k == bad:
            a = a.copy()
            a.flat[at] = np.nan
        np.save(dst / f"{k}.npy", a)
    return dst
