"""BLAKE2b and SHA-256 without importing :mod:`hashlib`.

``import hashlib`` loads OpenSSL's libcrypto (3.6 MB of RSS in CPython 3.11 on Linux, measured) to offer its
algorithms, while graphaudit hashes with BLAKE2b (weight digests, structural signatures) and SHA-256 (stage files of
a sharded run, the cached kernel's key and check) only. Both are CPython's own modules, which hashlib itself returns
for BLAKE2b (``hashlib.blake2b is _blake2.blake2b``); SHA-256 from ``_sha2`` (3.12+) or ``_sha256`` (3.10-3.11)
gives the same digests as OpenSSL's. Where a build lacks them, hashlib's are used.
"""

from __future__ import annotations

__all__ = ["blake2b", "sha256"]

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a CPython built without its BLAKE2 module
    from hashlib import blake2b

try:
    from _sha2 import sha256
except ImportError:
    try:
        from _sha256 import sha256
    except ImportError:  # pragma: no cover - a CPython built without its SHA-256 module
        from hashlib import sha256
