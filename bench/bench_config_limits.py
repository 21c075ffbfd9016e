"""Time and peak memory of reading adversarial conversion configs at the size limits (128 kB, 8 kB lines).

Usage: ``.venv/bin/python bench/bench_config_limits.py`` — prints one line per input: seconds, peak RSS, and
whether it was read or refused (each input runs in a fresh process so the peak RSS is its own).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from graphaudit.config.yamlload import MAX_CONFIG_BYTES, MAX_CONFIG_NODES, MAX_FLOW_DEPTH, MAX_LINE_CHARS, _flow_scan

__all__ = ["cases"]

HEAD = "model_parameters:\n  march: bayes\n"


def _fill(head: str, line: str, budget: int) -> str:
    """``head`` and as many copies of ``line`` as keep it under the byte and node limits (``budget`` bytes)."""
    out, size = [head], len(head)
    while size + len(line) <= budget and _nodes("".join(out) + line) < MAX_CONFIG_NODES - 10:
        out.append(line)
        size += len(line)
    return "".join(out)


def _nodes(text: str) -> int:
    """The pre-scan's node estimate (flow items + content lines), as parse_config_text counts it."""
    lines = sum(1 for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#"))
    return _flow_scan(text)[1] + lines


def cases() -> dict[str, str]:
    """Inputs just under the limits (size, line length, nesting, node estimate), shaped after the tester's slow
    files: comments, nested and flat flow collections, keys, anchors, long scalars, deep block nesting, and a
    long string aliased many times."""
    room = MAX_CONFIG_BYTES - 64
    width = MAX_LINE_CHARS - 2
    out = {}
    out["comment lines"] = _fill(HEAD, "#" * width + "\n", room)
    nest = "[" * (MAX_FLOW_DEPTH - 1) + "]" * (MAX_FLOW_DEPTH - 1)
    out["nested flow rows"] = _fill(HEAD + "  x:\n", "  - [" + nest + "]\n", room)
    out["flat flow rows"] = _fill(HEAD + "  x:\n", "  - [" + ",".join(["1"] * 200) + "]\n", room)
    out["many keys"] = HEAD + "".join(f"k{i}: {i}\n" for i in range(MAX_CONFIG_NODES - 20))
    out["many anchors and aliases"] = HEAD + "".join(f"a{i}: &a{i} {i}\nb{i}: *a{i}\n"
                                                     for i in range(MAX_CONFIG_NODES // 2 - 20))
    out["long scalars"] = HEAD + "".join(f"  s{i}: " + "x" * (width - 12) + "\n" for i in range(room // width))
    out["escaped quoted scalars"] = HEAD + "".join(f"  q{i}: \"" + "\\x41" * ((width - 12) // 4) + "\"\n"
                                                   for i in range(room // width))
    depth, block = 0, []
    while sum(len(b) for b in block) + depth + 3 < room:
        block.append(" " * depth + "k:\n")
        depth += 1
    out["deep block nesting"] = "".join(block)
    anchor = "  s: &a \"" + "\n   ".join(["x" * 4000] * 15) + "\"\n  l:\n"
    out["string aliased many times"] = _fill(HEAD + anchor, "   - *a\n", room)
    return out


def _measure(path: Path) -> tuple[float, int, str]:
    code = ("import resource, sys, time\n"
            "from graphaudit.config import load_config\nfrom graphaudit.errors import ConfigError\n"
            "t = time.perf_counter()\n"
            "try:\n    load_config(sys.argv[1]); what = 'read'\n"
            "except ConfigError as e:\n    what = 'refused: ' + str(e).split(': ', 1)[1][:70]\n"
            "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, what, sep='|')\n")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=600)
    if r.returncode:
        return float("nan"), 0, "crashed: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    t, rss, what = r.stdout.strip().split("|", 2)
    return float(t), int(rss), what


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in cases().items():
            p = Path(tmp) / "c.yaml"
            p.write_text(text, encoding="utf-8")
            t, rss, what = _measure(p)
            print(f"{name:30s} {len(text.encode()) / 1024:6.1f} kB  {t:6.2f} s  peak RSS {rss / 1024:6.0f} MiB  {what}")


if __name__ == "__main__":
    main()
