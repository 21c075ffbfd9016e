"""The conversion config a toolchain log echoes ("Dump config:" in hb_mapper logs), with positions in the log."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ConfigError, GraphAuditError
from ..fileio import require_regular_file
from .parse import MAX_CONFIG_BYTES, ConversionConfig, load_config, parse_config_text

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
        The file is not a toolchain log, or the log echoes no config, an empty one or one larger than
        :data:`~graphaudit.config.parse.MAX_CONFIG_BYTES` (refused before the log is parsed; one line naming
        the file).
    """
    from ..toolchains.hblog import parse_log

    require_regular_file(path, "a toolchain log", ConfigError)
    if _echo_bytes(Path(path)) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: the log's config echo is larger than {MAX_CONFIG_BYTES >> 10} kB; "
                          "not a conversion config")
    log = parse_log(path)
    if log.config_text is not None and log.config_line is not None and not log.config_text.strip():
        raise ConfigError(f"{path}: the log's config echo is empty (nothing after 'Dump config:')")
    if not log.config_text or log.config_line is None:
        raise ConfigError(f"{path}: the log echoes no conversion config (no 'Dump config:' block)")
    cfg = parse_config_text(log.config_text, str(path), toolchain)
    moved = {}
    for key, (line, col) in cfg.positions.items():
        log_line, log_col = log.config_position(line, col - 1)
        moved[key] = (log_line, log_col + 1)
    cfg.positions = moved
    return cfg


#: A log line's timestamp: the config echo ends at the first timestamped line after its first line.
_STAMP = re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_DUMP = b"Dump config:"


def _echo_bytes(p: Path) -> int:
    """Bytes of the first config echo of a log (its first, timestamped line and the unprefixed lines after it),
    read line by line and counted only up to ``MAX_CONFIG_BYTES + 1``: a huge echo is refused before
    :func:`~graphaudit.toolchains.hblog.parse_log` keeps it. 0 when the file has no echo or cannot be read (the
    parser reports that)."""
    size, state = 0, 0  # state 0: before "Dump config:", 1: expecting the echo's first line, 2: in the echo
    try:
        with open(p, "rb") as fh:
            while True:
                line = fh.readline(MAX_CONFIG_BYTES + 2)
                if not line:
                    return size
                if state == 0:
                    state = 1 if _DUMP in line else 0
                    continue
                if state == 2 and _STAMP.match(line):
                    return size
                size += len(line)
                state = 2
                if size > MAX_CONFIG_BYTES:
                    return size
    except OSError:
        return 0


def _last_line_is_dump(p: Path) -> bool:
    """True when the file's last non-blank line is a "Dump config:" with nothing after it (a cut-off log)."""
    try:
        with open(p, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            tail = fh.read()
    except OSError:
        return False
    return tail.rstrip().endswith(_DUMP)


def load_config_or_log(path: str | os.PathLike, toolchain: str | None = None) -> ConversionConfig:
    """:func:`load_config` for a YAML file, :func:`load_logged_config` for a toolchain log (told apart by
    content: a file that reads as an hb_mapper/hb_compile log is one).

    Raises
    ------
    ConfigError
        As :func:`load_config` for a file that is not a log.
    """
    if not str(path):
        raise ConfigError("empty config path")
    p = Path(path)
    if p.is_file():
        try:
            return load_logged_config(p, toolchain)
        except ConfigError:
            raise
        except GraphAuditError:
            if _last_line_is_dump(p):  # a log cut off right after "Dump config:" has nothing else a log has
                raise ConfigError(f"{p}: the log's config echo is empty (nothing after 'Dump config:')") from None
            # not a log: read it as YAML
    return load_config(p, toolchain)
