#!/usr/bin/env bash
# Build (once) the real Horizon OE 1.x toolchain venv and write its path into samples/build/hbenv.path.
#
#   samples/hbenv.sh            # called by setup.sh; also runnable alone
#
# The venv lives outside the repo, keyed on its inputs:
#   ${GRAPHAUDIT_CACHE:-$HOME/.cache/graphaudit}/hbenv-<first 12 hex of sha256(hbenv-requirements.txt + Python version)>
# It is built under a temporary name and renamed into place only when complete and verified, so an interrupted build
# is never taken as done. A second run checks the venv and rewrites hbenv.path (well under a second).
# Python 3.10 comes from $PYTHON310, `python3.10` on PATH, $(pyenv root)/versions/3.10.*/bin/python, /usr/bin/python3.10;
# without one this prints one line, removes hbenv.path and exits 0: the tests that need the toolchain then skip.
# GRAPHAUDIT_NO_HBENV=1 does the same on purpose. A failed install exits 1 with the tail of the pip log.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
req="$here/hbenv-requirements.txt"
path_file="$here/build/hbenv.path"
cache="${GRAPHAUDIT_CACHE:-$HOME/.cache/graphaudit}"

no_toolchain() {  # one line, no hbenv.path, exit 0
  rm -f "$path_file"
  echo "setup: $1: the real Horizon toolchain is not installed and its tests skip"
  exit 0
}
[ -n "${GRAPHAUDIT_NO_HBENV:-}" ] && no_toolchain "GRAPHAUDIT_NO_HBENV is set"

# is_py310 EXE: a working CPython 3.10 with venv and ensurepip (pyenv shims of another version fail here)
is_py310() {
  "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 10))' >/dev/null 2>&1
}

find_py310() {
  if [ -n "${PYTHON310:-}" ]; then
    if is_py310 "$PYTHON310"; then echo "$PYTHON310"; return 0; fi
    echo "setup: PYTHON310=$PYTHON310 is not a working Python 3.10 (with venv and ensurepip)" >&2
    return 2
  fi
  local c root
  if command -v python3.10 >/dev/null 2>&1 && is_py310 python3.10; then echo python3.10; return 0; fi
  if command -v pyenv >/dev/null 2>&1; then root="$(pyenv root 2>/dev/null || true)"; fi
  root="${root:-${PYENV_ROOT:-$HOME/.pyenv}}"
  # the newest 3.10.x first
  for c in $(ls -d "$root"/versions/3.10.*/bin/python 2>/dev/null | sort -V -r); do
    if is_py310 "$c"; then echo "$c"; return 0; fi
  done
  if is_py310 /usr/bin/python3.10; then echo /usr/bin/python3.10; return 0; fi
  return 1
}

rc=0
py="$(find_py310)" || rc=$?
[ "$rc" = 2 ] && exit 1
[ "$rc" != 0 ] && no_toolchain "Python 3.10 not found"
# the real interpreter behind a shim, and its full version
read -r py pyver < <("$py" -c 'import sys, platform; print(sys.executable, platform.python_version())')

key="$({ cat "$req"; printf '%s' "$pyver"; } | sha256sum | cut -c1-12)"
final="$cache/hbenv-$key"
mkdir -p "$cache" "$here/build"

write_path() {
  local tmp="$path_file.tmp-$$"
  printf '%s\n' "$final" >"$tmp"
  mv -f "$tmp" "$path_file"
}

# quick check of an existing venv: its interpreter runs and imports the toolchain, the CLI is there
# (horizon_tc_ui, hb_mapper's package, is only located: importing it takes 6 s)
venv_ok() {
  [ -x "$1/bin/hb_mapper" ] && [ -x "$1/bin/hbdk-config" ] && [ -f "$1/hbenv-freeze.txt" ] \
    && "$1/bin/python" -c 'import horizon_nn, hbdk, importlib.util as u; assert u.find_spec("horizon_tc_ui")' \
      >/dev/null 2>&1
}

# hb_mapper_version VENV: `hb_mapper --version` with the venv's bin first on PATH, run in a scratch dir
hb_mapper_version() {
  local d out
  d="$(mktemp -d)"
  out="$(cd "$d" && PATH="$1/bin:$PATH" "$1/bin/hb_mapper" --version 2>&1)" || { rm -rf "$d"; echo "$out" >&2; return 1; }
  rm -rf "$d"
  echo "$out" | sed -n 's/.*version \([0-9][0-9.]*\).*/\1/p' | head -1
}

# one builder per key at a time (two set-ups at once wait for each other)
exec 9>"$cache/hbenv-$key.lock"
flock 9

if [ -d "$final" ]; then
  if venv_ok "$final"; then
    write_path
    echo "setup: Horizon OE 1.x toolchain venv: $final (cached)"
    exit 0
  fi
  echo "setup: toolchain venv $final does not work; rebuilding it"
  rm -rf "$final"
fi

# leftovers of interrupted builds of this key (we hold the lock, so nobody else is building it)
rm -rf "$cache/.hbenv-$key.partial-"*
tmp="$cache/.hbenv-$key.partial-$$"
log="$cache/hbenv-$key.log"
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
echo "setup: building the Horizon OE 1.x toolchain venv with Python $pyver ($py), about 3 min and 2.7 GB; log: $log"
pip_fail() {
  echo "setup: error: installing the Horizon toolchain failed ($1); last lines of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
}
: >"$log"
"$py" -m venv "$tmp" >>"$log" 2>&1 || pip_fail "python -m venv"
pip=("$tmp/bin/python" -m pip install --disable-pip-version-check --no-input --progress-bar off)
torch_req="$(grep -E '^[[:space:]]*torch[[:space:]]*==' "$req" | head -1 | tr -d '[:space:]')"
if [ -n "$torch_req" ]; then
  "${pip[@]}" "$torch_req" >>"$log" 2>&1 || pip_fail "pip install $torch_req"
fi
"${pip[@]}" -r "$req" >>"$log" 2>&1 || pip_fail "pip install -r $(basename "$req")"

# verify in place (its scripts still name the temporary path)
"$tmp/bin/python" -c 'import horizon_nn, hbdk, horizon_tc_ui' >>"$log" 2>&1 || pip_fail "import horizon_nn failed"
ver="$(hb_mapper_version "$tmp" 2>>"$log")" || pip_fail "hb_mapper --version failed"
[ -n "$ver" ] || pip_fail "hb_mapper --version printed no version"
"$tmp/bin/python" -m pip freeze --all --disable-pip-version-check >"$tmp/hbenv-freeze.txt" 2>>"$log"
{
  echo "python=$pyver"
  echo "base_interpreter=$py"
  echo "requirements_sha256=$(sha256sum "$req" | cut -c1-64)"
  echo "hb_mapper=$ver"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "build_seconds=$(( $(date +%s) - t0 ))"
} >"$tmp/hbenv-info.txt"

# a venv's scripts carry its absolute path: point them at the final name, then rename into place
for f in "$tmp"/bin/*; do
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  if head -c 2 "$f" | grep -q '^#!'; then sed -i "1s|^#!$tmp/|#!$final/|" "$f"; fi
done
sed -i "s|$tmp|$final|g" "$tmp"/bin/activate "$tmp"/bin/activate.csh "$tmp"/bin/activate.fish 2>/dev/null || true
if grep -rlI --exclude='*.pyc' -F "$tmp" "$tmp" >>"$log" 2>&1; then
  echo "setup: warning: files in the toolchain venv still name its temporary path (listed in $log)" >&2
fi
mv "$tmp" "$final"
trap - EXIT
if ! venv_ok "$final" || ! hb_mapper_version "$final" >/dev/null 2>>"$log"; then
  mv "$final" "$final.broken-$$"
  pip_fail "the venv does not work after renaming it into place; kept as $final.broken-$$"
fi
write_path
echo "setup: Horizon OE 1.x toolchain venv built in $(( $(date +%s) - t0 )) s: $final (hb_mapper $ver, $(du -sh "$final" | cut -f1))"
