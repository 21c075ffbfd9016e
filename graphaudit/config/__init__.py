"""Horizon conversion configs (hb_mapper 1.x / hb_compile 3.x YAML): safe loading with positions, and linting.

Public interface::

    from graphaudit.config import load_config, lint_config
    cfg = load_config(path)                 # ConversionConfig; ConfigError (a GraphAuditError) on bad input
    cfg = load_config_or_log(path)          # the same, or the config an hb_mapper log echoes (positions in the log)
    cfg.family                              # "1.x" | "3.x"
    cfg.inputs                              # list[ConfigInput], one per input in ';' order
    cfg.position(("input_parameters", "mean_value"))   # (line, col), 1-based
    findings = lint_config(path_or_cfg, model=None, stages=None, data=None)   # list[Finding], most serious first
    config_inputs(cfg)                      # every path the config refers to (outputs must not touch them)
    lint_scope(cfg, model, stages, data)    # what lint checks and what it skips, and why
"""

from __future__ import annotations

from ..errors import ConfigError
from .fromlog import load_config_or_log, load_logged_config
from .lint import LintScope, config_model_path, lint_config, lint_scope
from .parse import ConfigInput, ConversionConfig, load_config, parse_config_text
from .refs import config_inputs

__all__ = ["load_config", "lint_config", "parse_config_text", "config_model_path", "ConversionConfig", "ConfigInput",
           "ConfigError", "load_logged_config", "load_config_or_log", "config_inputs", "lint_scope", "LintScope"]
