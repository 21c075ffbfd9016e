"""The package's shape: layers import downward only, no import cycles, small modules and functions.

The layer table is the diagram of docs/ARCHITECTURE.md; the imports are read from the source with ``ast``
(module-level and function-level imports alike), not by importing anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PKG = Path(__file__).resolve().parents[1] / "graphaudit"

#: Bottom to top; a module may import modules of its own layer or of a lower one. A prefix names a module or a
#: package (and everything in it).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("_version", "errors", "jsonvalues", "fileio", "findings", "catalogue", "digests", "stopsignals")),
    ("model", ("stage", "load")),
    ("toolchains", ("toolchains",)),
    ("lineage", ("lineage", "classify")),
    ("data", ("data",)),
    ("config", ("config",)),
    ("numeric", ("numeric",)),
    ("checks", ("checks",)),
    ("report", ("report", "verdict", "verdict_toolchain", "verdict_notseen", "verdict_figures", "bisect_report")),
    ("render", ("render",)),
    ("pipeline", ("pipeline", "measure", "evaluate", "inputcheck", "toolchain_log", "lint", "outputs", "samples",
                  "bisection", "bisect_eval", "fixes", "scaleout", "shards", "evalshards", "shards_bisect",
                  "hybrideval", "workerprocs", "rayprobe")),
    ("cli", ("cli", "cliargs", "__main__", "")),
]

#: Size limits of the issue "One home for the main job": lines per module, lines per function.
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    """Dotted name below ``graphaudit`` ("" for the package itself) -> file."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _layer(name: str) -> int:
    """Index in :data:`LAYERS` of a module (the longest matching prefix wins)."""
    best, rank = -1, None
    for i, (_label, prefixes) in enumerate(LAYERS):
        for pre in prefixes:
            if (name == pre or name.startswith(pre + ".") or pre == "") and len(pre) > best:
                best, rank = len(pre), i
    assert rank is not None, f"graphaudit.{name} is in no layer of tests/test_architecture.py"
    return rank


def _inside(dotted: str) -> str | None:
    """``graphaudit.x.y`` -> ``x.y`` ("" for the package), None for a module of another distribution."""
    if dotted == "graphaudit":
        return ""
    return dotted[len("graphaudit."):] if dotted.startswith("graphaudit.") else None


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Modules of the package that ``name`` imports (relative and absolute, at any depth of the file)."""
    pkg = [p for p in name.split(".") if p]
    if path.name != "__init__.py":
        pkg = pkg[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {m for m in (_inside(a.name) for a in node.names) if m is not None}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = _inside(node.module or "")
                if base is None:
                    continue
            for a in node.names:  # ``from pkg import submodule`` depends on the submodule, else on pkg itself
                sub = f"{base}.{a.name}".strip(".")
                found.add(sub if sub in mods else base)
    return {m for m in found if m in mods and m != name}


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        for dep in _imports(name, path, mods):
            g.add_edge(name, dep)
    return g


def test_every_module_has_a_layer(graph):
    for name in graph:
        _layer(name)


def test_imports_go_downward_only(graph):
    up = [f"graphaudit.{a} ({LAYERS[_layer(a)][0]}) imports graphaudit.{b} ({LAYERS[_layer(b)][0]})"
          for a, b in graph.edges if _layer(b) > _layer(a)]
    assert not up, "upward imports:\n" + "\n".join(sorted(up))


def test_no_import_cycles(graph):
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_no_cycles_between_packages(graph):
    """Modules folded into their top-level package (config, checks, numeric, ...): importing a module runs its
    package's ``__init__`` first, so two packages that import each other form a loop held together by import order."""
    top = nx.DiGraph()
    for a, b in graph.edges:
        pa, pb = a.split(".")[0], b.split(".")[0]
        if pa != pb and "" not in (a, b):
            top.add_edge(pa, pb)
    cycles = [sorted(c) for c in nx.strongly_connected_components(top) if len(c) > 1]
    assert not cycles, f"packages importing each other: {cycles}"


def test_the_checker_sees_a_planted_upward_import(tmp_path):
    """The checker itself: an import of the CLI from the model layer is reported as upward."""
    mods = {"stage": tmp_path / "stage.py", "cli": tmp_path / "cli.py"}
    mods["stage"].write_text("def f():\n    from .cli import main\n")
    mods["cli"].write_text("")
    deps = _imports("stage", mods["stage"], mods)
    assert deps == {"cli"} and _layer("cli") > _layer("stage")


def test_modules_and_functions_are_small():
    big_mods, big_funcs = [], []
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        n = len(text.splitlines())
        if n > MAX_MODULE_LINES:
            big_mods.append(f"graphaudit.{name}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    big_funcs.append(f"graphaudit.{name}.{node.name}: {length} lines")
    assert not big_mods and not big_funcs, "\n".join(big_mods + big_funcs)
