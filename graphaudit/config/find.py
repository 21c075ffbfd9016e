"""Find the conversion config of a stage directory: the YAML hb_mapper / hb_compile ran with, beside its output."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import GraphAuditError
from .parse import MAX_CONFIG_BYTES, ConversionConfig, load_config
from .refs import config_path
from .values import is_unset

__all__ = ["find_config"]

#: At most this many YAML files per directory are read while looking (a directory of many YAML files is not a
#: conversion project; the user gives --config there).
MAX_CANDIDATES = 20

def find_config(path: str | os.PathLike) -> tuple[ConversionConfig | None, list[Path]]:
    """The conversion config whose output directory is the stage directory the user named.

    hb_mapper / hb_compile write the stage models into ``model_parameters.working_dir`` (default ``model_output``),
    resolved against the directory they ran in, which is usually the config's own (docs/HORIZON.md section 1). A
    ``*.yaml`` / ``*.yml`` file in ``path`` (a directory, or a stage file's directory) or in its parent is the
    config of these stages when it parses as a conversion config (:func:`graphaudit.config.load_config`, safe
    loading) and its ``working_dir``, resolved against the config's directory, is an existing directory equal to
    ``path`` or directly inside it (``explain PROJECT`` as well as ``explain PROJECT/model_output``).

    Parameters
    ----------
    path : path-like
        What the user gave as the stages.

    Returns
    -------
    (ConversionConfig or None, list of pathlib.Path)
        The config when exactly one file matches, and every matching file (several: none is picked; the caller
        says so). Files that do not parse, or are not regular files, are passed over: the user did not name them.
    """
    p = Path(path)
    try:
        given = Path(os.path.abspath(p.parent if p.is_file() else p))
        d = given.resolve()
    except (OSError, RuntimeError):
        return None, []
    hits: list[tuple[Path, ConversionConfig]] = []
    seen: set[Path] = set()
    for where in dict.fromkeys((d, d.parent, given.parent)):
        for f in _yaml_files(where):
            try:
                real = f.resolve()
            except (OSError, RuntimeError):
                continue
            if real in seen:  # the same file through the given path and the resolved one
                continue
            seen.add(real)
            cfg = _parse(f)
            if cfg is not None and _writes_into(cfg, d, given):
                hits.append((f, cfg))
    return (hits[0][1] if len(hits) == 1 else None), [f for f, _c in hits]


def _yaml_files(where: Path) -> list[Path]:
    try:
        files = sorted(e for e in where.iterdir() if e.suffix.lower() in (".yaml", ".yml"))
    except OSError:
        return []
    return [f for f in files[:MAX_CANDIDATES] if _small_regular_file(f)]


#: A YAML larger than this is not read while looking (the largest public conversion config we know is about
#: 10 kB; parsing with positions costs about 1 s per 30 kB). --config reads any size up to the parser's limit.
MAX_FOUND_BYTES = 64 << 10


def _small_regular_file(f: Path) -> bool:
    try:
        return f.is_file() and f.stat().st_size <= min(MAX_FOUND_BYTES, MAX_CONFIG_BYTES)
    except OSError:
        return False


def _parse(f: Path) -> ConversionConfig | None:
    try:
        cfg = load_config(f)
    except GraphAuditError:
        return None
    return cfg if cfg.section("model_parameters") else None


def _writes_into(cfg: ConversionConfig, d: Path, given: Path) -> bool:
    """The config's working_dir is the directory given or one directly inside it: compared as written (a
    working_dir that is a symlink to elsewhere is still where hb_mapper wrote) and with symlinks resolved."""
    wd = cfg.get("model_parameters", "working_dir")
    wd_path = config_path(cfg, "model_output" if is_unset(wd) else wd)
    try:
        if wd_path is None or not wd_path.is_dir():
            return False
        written = Path(os.path.normpath(os.path.abspath(wd_path)))
        real = wd_path.resolve()
        return given in (written, written.parent) or d in (real, real.parent)
    except (OSError, RuntimeError):
        return False
