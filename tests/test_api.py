"""The library's public names: what the package root exports, and the Examples in their docstrings run."""

from __future__ import annotations

import doctest

import pytest

import graphaudit

#: The names a library user needs (issue "One home for the main job"), each with a runnable Examples section.
DOCUMENTED = ["audit", "AuditReport", "lint_config", "lower", "write_reports"]


def test_root_exports_exist():
    assert set(DOCUMENTED) <= set(graphaudit.__all__)
    for name in graphaudit.__all__:
        assert getattr(graphaudit, name) is not None, name


@pytest.mark.parametrize("name", DOCUMENTED)
def test_docstring_examples_run(name, samples, monkeypatch, tmp_path):
    obj = getattr(graphaudit, name)
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(obj, name, globs={}) if t.examples]
    assert tests and "Examples" in obj.__doc__, f"{name} has no Examples section"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in tests:
        runner.run(t)
    res = runner.summarize(verbose=False)
    assert res.failed == 0 and res.attempted >= 2, res
