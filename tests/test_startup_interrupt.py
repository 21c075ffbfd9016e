"""Ctrl-C while the command's modules import (onnx, numpy, ruamel: seconds, before main() can catch it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from .conftest import REPO

#: A real SIGINT, sent to the process by itself the moment it starts importing onnx (the first heavy import of the
#: command), whichever entry point imports it: deterministic where a timed kill from outside is a race.
HOOK = """
import os, signal, sys
class Hook:
    def find_spec(self, name, path=None, target=None):
        if name == "onnx":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Hook())
sys.argv = ["graphaudit", "rules"]
"""


@pytest.mark.parametrize("entry", [
    "import runpy; runpy.run_module('graphaudit', run_name='__main__', alter_sys=True)",  # python -m graphaudit
    "from graphaudit.cli import run; sys.exit(run())",  # the console script [project.scripts]
])
def test_interrupt_during_startup_is_the_one_line_and_exit_130(entry):
    """Used to print a KeyboardInterrupt traceback and die of SIGINT."""
    p = subprocess.run([sys.executable, "-c", HOOK + entry], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(REPO)),
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
    assert (p.returncode, p.stderr, p.stdout) == (130, "graphaudit: interrupted\n", "")


def test_importing_the_library_or_the_cli_leaves_sigint_alone():
    """Only the command's start is covered: a program that imports graphaudit keeps Python's KeyboardInterrupt."""
    code = ("import signal, graphaudit, graphaudit.cli; graphaudit.audit; "
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.stdout == "True\n", p.stderr
