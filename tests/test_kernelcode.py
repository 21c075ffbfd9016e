"""The compiled error sums kept between runs (graphaudit/numeric/kernelcode.py): an object compiled by a child process
into the cache, loaded without LLVM, equal to the kernel compiled in process.

- a fresh cache: the first process compiles the object in a child and uses it without importing llvmlite, the
  second reads the same file (not rewritten) without llvmlite too; both give the float64 figures worked out with
  ``math.fsum`` on a pair;
- a damaged cache file (one byte changed) fails its SHA-256, is compiled again, and the kernel still works;
- the object's figures are bit-identical to those of the kernel compiled in process (the same IR, CPU and passes);
- the loader refuses what it does not read: bytes that are no ELF object, a relocation of an unknown type;
- a failed compile leaves a marker and is not started again; a cache directory that cannot be made is skipped.

x86-64 Linux with llvmlite only (the objects are cached there only); elsewhere these tests skip.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graphaudit.numeric import fastsum, kernelcode

pytest.importorskip("llvmlite")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                                reason="compiled objects are cached on x86-64 Linux only")

REPO = Path(__file__).resolve().parents[1]

_CHILD = """
import json, math, sys
import numpy as np
from graphaudit.numeric import fastsum
ok = fastsum.enable(compile_here=False)
rng = np.random.default_rng(5)
a = rng.standard_normal(100_003, dtype=np.float32)
b = (a + rng.standard_normal(100_003, dtype=np.float32) * 1e-2).astype(np.float32)
print(json.dumps({"ok": ok, "llvmlite": any(m.startswith("llvmlite") for m in sys.modules),
                  "sums": list(fastsum.error_sums(a, b) or [])}))
"""


def _run(cache: Path) -> dict:
    env = {**os.environ, "GRAPHAUDIT_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    env.pop("GRAPHAUDIT_NUMPY_SUMS", None)
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _expected() -> list[float]:
    rng = np.random.default_rng(5)
    a = rng.standard_normal(100_003, dtype=np.float32)
    b = (a + rng.standard_normal(100_003, dtype=np.float32) * 1e-2).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    e = b64 - a64  # exact: float32 values differ by a float64-representable amount
    return [math.fsum(a64 * a64), math.fsum(b64 * b64), math.fsum(e * e), math.fsum(np.abs(e)), float(np.abs(e).max())]


def test_object_compiled_once_then_loaded_without_llvm(tmp_path):
    first = _run(tmp_path)
    files = list(tmp_path.glob("errorsums-*.o"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    second = _run(tmp_path)
    assert files[0].stat().st_mtime_ns == stamp  # read, not compiled again
    for got in (first, second):
        assert got["ok"] and not got["llvmlite"]
        assert got["sums"] == pytest.approx(_expected(), rel=1e-12, abs=0)
    assert first["sums"] == second["sums"]


def test_damaged_cache_file_is_compiled_again(tmp_path):
    _run(tmp_path)
    path = next(tmp_path.glob("errorsums-*.o"))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert kernelcode.load(path, ("error_sums", "error_sums_many")) is None
    got = _run(tmp_path)
    assert got["ok"] and not got["llvmlite"]
    assert got["sums"] == pytest.approx(_expected(), rel=1e-12, abs=0)
    assert kernelcode.load(path, ("error_sums", "error_sums_many")) is not None


def test_cached_object_equals_kernel_compiled_in_process(tmp_path):
    ir = fastsum._ir()
    path = tmp_path / "k.o"
    assert kernelcode.build_in_child(ir, path)
    addr = kernelcode.load(path, ("error_sums", "error_sums_many"))
    cached = fastsum._PROTO(addr["error_sums"])
    here = fastsum._compile()[0]
    rng = np.random.default_rng(1)
    for n in (1, 5, fastsum.BLOCK, 3 * fastsum.BLOCK + 17, 250_001):
        a = (rng.standard_normal(n) * 4).astype(np.float32)
        b = (a + rng.standard_normal(n).astype(np.float32) * np.float32(0.03)).astype(np.float32)
        x, y = np.empty(5), np.empty(5)
        cached(a.ctypes.data, b.ctypes.data, n, x.ctypes.data)
        here(a.ctypes.data, b.ctypes.data, n, y.ctypes.data)
        assert x.tobytes() == y.tobytes(), n


def test_loader_refuses_what_it_does_not_read(tmp_path):
    with pytest.raises(ValueError):
        kernelcode.link(b"\x7fELF" + bytes(60), ("error_sums",))
    path = tmp_path / "k.o"
    assert kernelcode.build_in_child(fastsum._ir(), path)
    obj = bytearray(path.read_bytes()[32:])
    secs = kernelcode._sections(bytes(obj))
    rela = next(s for s in secs if s[1] == 4)
    info_at = rela[4] + 8  # the first relocation's r_info: its type becomes 0x7F
    obj[info_at:info_at + 4] = (0x7F).to_bytes(4, "little")
    with pytest.raises(ValueError, match="relocation type 127"):
        kernelcode.link(bytes(obj), ("error_sums", "error_sums_many"))
    with pytest.raises(ValueError, match="does not define"):
        kernelcode.link(path.read_bytes()[32:], ("error_sums", "no_such_function"))


def test_failed_compile_is_not_retried(tmp_path):
    """A compile that failed once leaves a marker: later runs keep the numpy route without starting the child
    (no object appears)."""
    path = kernelcode.cache_file(fastsum._ir())
    if path is None:
        pytest.skip("no cache key on this machine")
    env_key = path.name
    (tmp_path / env_key).with_name(env_key + ".failed").write_text("llvmlite broke\n")
    got = _run(tmp_path)
    assert not got["ok"] and not got["llvmlite"] and got["sums"] == []
    assert not (tmp_path / env_key).exists()


def test_cache_directory_that_cannot_be_made_is_skipped(tmp_path):
    """A cache path below a regular file (the directory cannot be created): no child, no exception, no kernel."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    assert not kernelcode.build_in_child(fastsum._ir(), blocker / "cache" / "k.o")
    assert kernelcode.load(blocker / "cache" / "k.o", ("error_sums",)) is None
    assert blocker.read_text() == "not a directory\n"
