"""Machine code of the compiled error sums kept between runs, so that a run uses the kernel without loading LLVM.

:mod:`graphaudit.numeric.fastsum` compiles its LLVM IR with llvmlite. Loading LLVM costs each process about 110 MB
of peak RSS (41 MB to import llvmlite, 69 MB more to compile; PP-OCR cls's numeric step peaks at 135 MB without it)
and 0.15 s of CPU, which a small model's run does not repay. So the IR is compiled once per machine, in a child
process (``python kernelcode.py OUT`` with the IR on stdin: this file imports nothing of graphaudit), into an ELF
relocatable object kept in the user's cache directory; every later run reads the object (4 kB), lays its sections
out in memory, applies its relocations and calls the functions through ctypes: no LLVM in the process.

The key of a cached object is the SHA-256 of the IR, the llvmlite version, and the CPU as ``/proc/cpuinfo`` names it
(vendor, family, model, flags): the object is compiled for the host CPU (``get_host_cpu_name``), so another CPU,
another llvmlite or another kernel gets another file. The file holds the SHA-256 of the object before it, checked
on load. Only x86-64 Linux objects are loaded (the relocations an object compiled position-independent holds there:
``R_X86_64_PC32``, ``PLT32``, ``64``); elsewhere :func:`load` returns None and the caller compiles in process.

Cache directory: ``$GRAPHAUDIT_CACHE``, else ``$XDG_CACHE_HOME/graphaudit``, else ``~/.cache/graphaudit``.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

try:  # not hashlib, which loads OpenSSL (3.6 MB of RSS; graphaudit/digests.py, not imported: this file runs alone)
    from _sha2 import sha256
except ImportError:
    try:
        from _sha256 import sha256
    except ImportError:  # pragma: no cover - a CPython built without its SHA-256 module
        from hashlib import sha256

__all__ = ["cache_dir", "cache_file", "build_object", "build_in_child", "failed_marker", "load", "link"]

#: Layout of the cached file and the loader; part of the key.
FORMAT = 1

_SHF_ALLOC = 0x2
_SHT_PROGBITS, _SHT_SYMTAB, _SHT_RELA, _SHT_NOBITS = 1, 2, 4, 8
_R_X86_64_64, _R_X86_64_PC32, _R_X86_64_PLT32 = 1, 2, 4
_STT_FUNC = 2
_PAGE = mmap.PAGESIZE


def cache_dir() -> Path | None:
    """Where compiled objects are kept (see the module's docstring); None when there is no home directory to
    put the cache in (``~`` does not expand) and neither variable is set."""
    if os.environ.get("GRAPHAUDIT_CACHE"):
        return Path(os.environ["GRAPHAUDIT_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "graphaudit"
    home = os.path.expanduser("~")
    return None if home.startswith("~") else Path(home) / ".cache" / "graphaudit"


def _cpu() -> str | None:
    """The CPU's identity lines of ``/proc/cpuinfo`` (first processor), or None where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    keep = ("vendor_id", "cpu family", "model", "model name", "flags")
    lines = []
    for line in text.split("\n\n", 1)[0].splitlines():
        k = line.split(":", 1)[0].strip()
        if k in keep:
            lines.append(line.strip())
    return "\n".join(lines) if lines else None


def cache_file(ir: str) -> Path | None:
    """The cache file of ``ir`` compiled for this machine, or None where objects are not cached (not x86-64
    Linux, llvmlite not installed, no CPU identity)."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        from importlib.metadata import version

        llvmlite = version("llvmlite")
    except Exception:  # noqa: BLE001 - not installed, or broken metadata
        return None
    cpu, where = _cpu(), cache_dir()
    if cpu is None or where is None:
        return None
    key = sha256("\0".join((str(FORMAT), ir, llvmlite, cpu)).encode()).hexdigest()[:32]
    return where / f"errorsums-{key}.o"


def optimized_module(ir: str, **target_options):
    """``ir`` parsed, verified and optimized for the host CPU (llvmlite's new pass manager, speed level 3, loop and
    SLP vectorization): ``(llvm, target_machine, module)``. ``target_options`` go to ``create_target_machine``
    (e.g. ``reloc="pic"``). Raises whatever llvmlite raises (ImportError when it is missing; an AttributeError on
    llvmlite < 0.44, which has no new pass manager)."""
    import llvmlite.binding as llvm

    if hasattr(llvm, "initialize_native_target"):
        try:  # needed by llvmlite < 0.45, an error in later versions (initialization is automatic there)
            llvm.initialize()
        except Exception:  # noqa: BLE001
            pass
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                      opt=3, **target_options)
    mod = llvm.parse_assembly(ir)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return llvm, tm, mod


def build_object(ir: str) -> bytes:
    """``ir`` compiled for the host CPU (:func:`optimized_module`, position-independent) as an ELF relocatable
    object. Raises whatever llvmlite raises."""
    _, tm, mod = optimized_module(ir, reloc="pic", codemodel="small")
    return tm.emit_object(mod)


def _write(path: Path, obj: bytes) -> None:
    """``path`` holds the SHA-256 of ``obj`` and ``obj``, written atomically (a temporary file renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".errorsums-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(sha256(obj).digest() + obj)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def failed_marker(path: Path) -> Path:
    """The file that records a failed compile of the cache file ``path`` (the child's error), so that later runs do
    not start the child again; removing it (or the cache directory) retries. Another llvmlite gets another key."""
    return path.with_name(path.name + ".failed")


def build_in_child(ir: str, path: Path, timeout: float = 120.0) -> bool:
    """Compile ``ir`` in a child process (this file run by ``sys.executable``) into the cache file ``path``;
    True when the file was written. The child's LLVM never enters this process. Not tried when the cache directory
    cannot be written or an earlier compile of ``path`` failed (:func:`failed_marker`)."""
    marker = failed_marker(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if marker.exists() or not os.access(path.parent, os.W_OK) or not sys.executable:
            return False
        p = subprocess.run([sys.executable, str(Path(__file__).resolve()), str(path)], input=ir.encode(),
                           capture_output=True, timeout=timeout, check=False)
    except Exception:  # noqa: BLE001 - no Python to start, a timeout, a file system error: no cached kernel
        return False
    if p.returncode == 0 and path.is_file():
        return True
    try:
        marker.write_bytes(p.stderr[-4000:] or b"failed")
    except OSError:
        pass
    return False


def load(path: Path, names: tuple[str, ...]) -> dict[str, int] | None:
    """Addresses of the functions ``names`` of the cached object at ``path``, laid out in executable memory
    (:func:`link`), or None when the file is missing, damaged (its SHA-256), not an object this loader reads, or
    the memory cannot be made executable."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < 32 or sha256(data[32:]).digest() != data[:32]:
        return None
    try:
        return link(data[32:], names)
    except (ValueError, struct.error, OSError):
        return None


_keep: list = []  # the executable mappings, alive as long as the process


def _sections(obj: bytes) -> list[tuple]:
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    e_type, e_machine = struct.unpack_from("<HH", obj, 16)
    if e_type != 1 or e_machine != 62:
        raise ValueError("not an x86-64 relocatable object")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    return [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + k * shentsize) for k in range(shnum)]


def link(obj: bytes, names: tuple[str, ...]) -> dict[str, int]:
    """Lay out the allocated sections of an x86-64 ELF relocatable object in one executable mapping, apply its
    relocations, and return the addresses of the global functions ``names``.

    Raises
    ------
    ValueError
        Not such an object, a relocation of another type or against an undefined symbol, a name it does not define.
    OSError
        The mapping cannot be made executable (``mprotect`` refused).
    """
    secs = _sections(obj)
    offset, size = {}, 0
    for k, (_n, typ, flags, _a, _o, sz, _l, _i, align, _e) in enumerate(secs):
        if flags & _SHF_ALLOC and typ in (_SHT_PROGBITS, _SHT_NOBITS):
            size = -(-size // max(align, 1)) * max(align, 1)
            offset[k] = size
            size += sz
    symtab = next((s for s in secs if s[1] == _SHT_SYMTAB), None)
    if symtab is None or not offset:
        raise ValueError("no symbols or no code")
    strtab = secs[symtab[6]]
    syms = [struct.unpack_from("<IBBHQQ", obj, symtab[4] + k * 24) for k in range(symtab[5] // 24)]
    mem = mmap.mmap(-1, max(_PAGE, -(-size // _PAGE) * _PAGE), prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    image = bytearray(size)
    for k, at in offset.items():
        if secs[k][1] == _SHT_PROGBITS:
            image[at:at + secs[k][5]] = obj[secs[k][4]:secs[k][4] + secs[k][5]]
    for _n, typ, _f, _a, off, sz, _l, target, _al, _e in secs:
        if typ != _SHT_RELA or target not in offset:
            continue
        for r in range(sz // 24):
            where, info, addend = struct.unpack_from("<QQq", obj, off + r * 24)
            _name, _info, _other, shndx, value, _size = syms[info >> 32]
            if shndx not in offset:
                raise ValueError("a relocation against an undefined symbol")
            s, p = base + offset[shndx] + value, base + offset[target] + where
            kind = info & 0xFFFFFFFF
            if kind in (_R_X86_64_PC32, _R_X86_64_PLT32):
                struct.pack_into("<i", image, offset[target] + where, s + addend - p)  # struct.error if out of range
            elif kind == _R_X86_64_64:
                struct.pack_into("<Q", image, offset[target] + where, s + addend)
            else:
                raise ValueError(f"relocation type {kind}")
    out = {}
    for name_off, info, _other, shndx, value, _size in syms:
        end = obj.index(b"\0", strtab[4] + name_off)
        name = obj[strtab[4] + name_off:end].decode()
        if name in names and info & 0xF == _STT_FUNC and shndx in offset:
            out[name] = base + offset[shndx] + value
    if set(out) != set(names):
        raise ValueError(f"the object does not define {sorted(set(names) - set(out))}")
    mem.write(bytes(image))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if libc.mprotect(base, len(mem), mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        raise OSError(ctypes.get_errno(), "mprotect refused executable memory")
    _keep.append(mem)
    return out


def _main() -> int:
    """``python kernelcode.py OUT``: compile the IR on stdin into the cache file OUT (exit 0), or exit 1."""
    try:
        _write(Path(sys.argv[1]), build_object(sys.stdin.buffer.read().decode()))
    except Exception as e:  # noqa: BLE001 - the parent only needs to know it failed
        print(f"kernelcode: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
