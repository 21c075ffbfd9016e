"""graphaudit.digests: the digests of hashlib's algorithms, without importing hashlib (OpenSSL) on the main path."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from graphaudit.digests import blake2b, sha256

REPO = Path(__file__).resolve().parents[1]


def test_same_digests_as_hashlib():
    data = bytes(range(256)) * 1000 + b"graphaudit"
    assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert sha256().hexdigest() == hashlib.sha256(b"").hexdigest()
    for size in (12, 16, 64):
        h, ref = blake2b(digest_size=size), hashlib.blake2b(digest_size=size)
        for part in (b"FLOAT(1, 3)", data):
            h.update(part)
            ref.update(part)
        assert h.hexdigest() == ref.hexdigest()


def test_structure_and_numeric_steps_do_not_import_hashlib():
    """Importing hashlib loads OpenSSL's libcrypto (3.6 MB of RSS): the audit and the numeric comparison of a
    bundled pair (weight digests, signatures, the cached kernel's key) run without it."""
    build = REPO / "samples" / "build" / "ort" / "ppocr_cls"
    data = REPO / "samples" / "build" / "data" / "ppocr_cls" / "x"
    code = (
        "import sys\n"
        "from graphaudit.measure import NumericOptions, run_numeric\n"
        "from graphaudit.pipeline import audit\n"
        f"rep = audit([{str(build / 'ppocr_cls_optimized.onnx')!r}, {str(build / 'ppocr_cls_qdq.onnx')!r}])\n"
        "for st in rep.stages:\n"
        "    for t in st.tensors.values():\n"
        "        if t.is_param:\n"
        "            t.digest()\n"
        f"run_numeric(rep.stages, rep.lineage, rep.changes, data={str(data)!r}, opts=NumericOptions(max_samples=2,"
        " isolated=False, runtime='onnxruntime'))\n"
        "from graphaudit.numeric import fastsum\n"
        "print(fastsum.tried())\n"
        "print(sorted(m for m in ('hashlib', '_hashlib') if m in sys.modules))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    *_, tried, imported = p.stdout.strip().splitlines()
    assert tried == "True"  # the kernel's cache key (SHA-256) was worked out
    assert imported == "[]"
