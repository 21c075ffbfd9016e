"""The conversion config a toolchain log echoes ("Dump config:" in hb_mapper logs), with positions in the log."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError, GraphAuditError
from .parse import ConversionConfig, load_config, parse_config_text

__all__ = ["load_logged_config", "load_config_or_log"]


def load_logged_config(path: str | os.PathLike, toolchain: str | None = None) -> ConversionConfig:
    """Parse the YAML config echoed by an hb_mapper/hb_compile log; positions point into the log file.

    Parameters
    ----------
    path : path-like
        The log (``hb_mapper_makertbin.log`` and the like; read by :func:`graphaudit.toolchains.hblog.parse_log`).
    toolchain : {"1.x", "3.x"}, optional
        Force the family.

    Raises
    ------
    GraphAuditError
        The file is not a toolchain log, or the log echoes no config (one line naming the file).
    """
    from ..toolchains.hblog import parse_log

    log = parse_log(path)
    if not log.config_text or log.config_line is None:
        raise ConfigError(f"{path}: the log echoes no conversion config (no 'Dump config:' block)")
    cfg = parse_config_text(log.config_text, str(path), toolchain)
    moved = {}
    for key, (line, col) in cfg.positions.items():
        log_line, log_col = log.config_position(line, col - 1)
        moved[key] = (log_line, log_col + 1)
    cfg.positions = moved
    return cfg


def load_config_or_log(path: str | os.PathLike, toolchain: str | None = None) -> ConversionConfig:
    """:func:`load_config` for a YAML file, :func:`load_logged_config` for a toolchain log (told apart by
    content: a file that reads as an hb_mapper/hb_compile log is one).

    Raises
    ------
    ConfigError
        As :func:`load_config` for a file that is not a log.
    """
    p = Path(path)
    if p.is_file():
        try:
            return load_logged_config(p, toolchain)
        except ConfigError:
            raise
        except GraphAuditError:
            pass  # not a log: read it as YAML
    return load_config(p, toolchain)
