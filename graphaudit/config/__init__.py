"""Horizon conversion configs (hb_mapper 1.x / hb_compile 3.x YAML): safe loading with positions (parsing only).

Public interface::

    from graphaudit.config import load_config
    cfg = load_config(path)                 # ConversionConfig; ConfigError (a GraphAuditError) on bad input
    cfg = load_config_or_log(path)          # the same, or the config an hb_mapper log echoes (positions in the log)
    cfg.family                              # "1.x" | "3.x"
    cfg.inputs                              # list[ConfigInput], one per input in ';' order
    cfg.position(("input_parameters", "mean_value"))   # (line, col), 1-based
    config_inputs(cfg)                      # every path the config refers to (outputs must not touch them)
    cfg, files = find_config(stage_dir)     # the config whose working_dir is that directory (or None)
"""

from __future__ import annotations

from ..errors import ConfigError
from .find import find_config
from .fromlog import load_config_or_log, load_logged_config
from .parse import ConfigInput, ConversionConfig, load_config, parse_config_text
from .refs import config_inputs

__all__ = ["load_config", "parse_config_text", "ConversionConfig", "ConfigInput", "ConfigError", "load_logged_config",
           "load_config_or_log", "config_inputs", "find_config"]
