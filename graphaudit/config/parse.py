"""Reading a Horizon conversion YAML safely, with the line and column of every key, and detecting its toolchain family."""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .schema import FAMILY_1X_ONLY_KEYS, FAMILY_3X_ONLY_KEYS, MARCH
from .values import is_unset, parse_channels, parse_shape, split_per_input
from .yamlload import (MAX_CONFIG_BYTES, MAX_CONFIG_NODES, MAX_EXPANDED_CHARS, MAX_FLOW_DEPTH, MAX_LINE_CHARS,
                       load_yaml_text)

__all__ = ["ConfigInput", "ConversionConfig", "load_config", "parse_config_text", "split_per_input", "parse_channels",
           "parse_shape", "is_unset", "MAX_CONFIG_BYTES", "MAX_CONFIG_NODES", "MAX_LINE_CHARS", "MAX_EXPANDED_CHARS",
           "MAX_FLOW_DEPTH"]

#: Per-input keys of ``input_parameters`` and ``calibration_parameters`` (';'-separated or YAML lists).
PER_INPUT_KEYS = (("input_parameters", "input_name"), ("input_parameters", "input_type_rt"),
                  ("input_parameters", "input_type_train"), ("input_parameters", "input_layout_train"),
                  ("input_parameters", "input_layout_rt"), ("input_parameters", "input_space_and_range"),
                  ("input_parameters", "input_shape"), ("input_parameters", "norm_type"),
                  ("input_parameters", "mean_value"), ("input_parameters", "scale_value"),
                  ("input_parameters", "std_value"), ("calibration_parameters", "cal_data_dir"),
                  ("calibration_parameters", "cal_data_type"))


@dataclass
class ConfigInput:
    """One model input as the config describes it (``';'`` position ``index``).

    Attributes
    ----------
    index : int
        Position in the ';'-separated lists.
    name : str or None
        ``input_name`` (None when unset: the model's only input is meant).
    type_train, type_rt : str or None
        ``input_type_train`` / ``input_type_rt`` as written (lower case).
    layout_train, layout_rt : str or None
        ``"NCHW"`` / ``"NHWC"`` (upper case as written) or None.
    shape : tuple of int or None
        ``input_shape`` (None when unset or malformed).
    mean, scale : list of float or None
        ``mean_value``; ``scale_value``, or ``1/std`` per channel when the config gives ``std_value``.
    std : list of float or None
        ``std_value`` as written.
    norm_type : str or None
        1.x ``norm_type``.
    cal_data_dir : str or None
    cal_data_type : str or None
        Explicit ``cal_data_type`` (not inferred from the ``_f32`` suffix).
    """

    index: int
    name: str | None = None
    type_train: str | None = None
    type_rt: str | None = None
    layout_train: str | None = None
    layout_rt: str | None = None
    shape: tuple[int, ...] | None = None
    mean: list[float] | None = None
    scale: list[float] | None = None
    std: list[float] | None = None
    norm_type: str | None = None
    cal_data_dir: str | None = None
    cal_data_type: str | None = None


@dataclass
class ConversionConfig:
    """A parsed hb_mapper (1.x) / hb_compile (3.x) conversion YAML.

    Attributes
    ----------
    path : str
        The file read (``"<text>"`` for :func:`parse_config_text`).
    data : dict
        The document as plain dicts/lists/scalars (keys as YAML gives them; YAML 1.1 booleans, as PyYAML reads).
    family : str
        ``"1.x"`` (hb_mapper: bernoulli2/bayes/bayes-e) or ``"3.x"`` (hb_compile: nash-*).
    family_reason : str
        Why: ``"march 'bayes-e'"``, ``"keys ..."``, ``"--toolchain"`` or ``"default"``.
    inputs : list of ConfigInput
        One per input in ';' order (at least one).
    positions : dict
        Key path (tuple of keys, list indices as ints) -> (line, col), 1-based, of the key (or list item).
    """

    path: str
    data: dict
    family: str
    family_reason: str
    inputs: list[ConfigInput] = field(default_factory=list)
    positions: dict[tuple, tuple[int, int]] = field(default_factory=dict)

    def position(self, key_path: tuple | list | str) -> tuple[int, int]:
        """(line, col), 1-based, of a key path such as ``("input_parameters", "mean_value")`` (or ``"a.b"``).

        A path that is not in the file gives the position of its nearest present ancestor; ``(1, 1)`` at worst.
        """
        kp = tuple(key_path.split(".")) if isinstance(key_path, str) else tuple(key_path)
        while kp:
            if kp in self.positions:
                return self.positions[kp]
            kp = kp[:-1]
        return (1, 1)

    def section(self, name: str) -> dict:
        """A top-level section as a dict ({} when absent or not a mapping)."""
        v = self.data.get(name)
        return v if isinstance(v, dict) else {}

    def get(self, section: str, key: str) -> Any:
        """A value of a section, ``None`` when absent."""
        return self.section(section).get(key)

    @property
    def base_dir(self) -> Path:
        """Directory relative paths in the config are resolved against (the config's own directory)."""
        return Path(self.path).resolve().parent if self.path != "<text>" else Path.cwd()

    @property
    def march(self) -> str | None:
        """``model_parameters.march`` as a lower-case string, or None."""
        m = self.get("model_parameters", "march")
        return str(m).strip().lower() if not is_unset(m) else None


def _detect_family(data: dict, override: str | None) -> tuple[str, str]:
    """Family from ``--toolchain``, else ``march`` (docs/HORIZON.md section 4), else family-only keys, else 3.x."""
    if override:
        if override not in ("1.x", "3.x"):
            raise ConfigError(f"--toolchain {override!r}: expected 1.x or 3.x")
        return override, "--toolchain"
    mp = data.get("model_parameters") if isinstance(data.get("model_parameters"), dict) else {}
    march = mp.get("march")
    if isinstance(march, str) and march.strip():
        m = march.strip().lower()
        for fam, marches in MARCH.items():
            if m in marches:
                return fam, f"march {march.strip()!r}"
        if m.startswith("nash"):
            return "3.x", f"march {march.strip()!r}"
    present = {k for sec in data.values() if isinstance(sec, dict) for k in sec if isinstance(k, str)}
    only3, only1 = sorted(present & FAMILY_3X_ONLY_KEYS), sorted(present & FAMILY_1X_ONLY_KEYS)
    if only3 and not only1:
        return "3.x", f"keys {', '.join(only3)}"
    if only1 and not only3:
        return "1.x", f"keys {', '.join(only1)}"
    return "3.x", "default (no march)"


def _inputs(data: dict) -> list[ConfigInput]:
    """One :class:`ConfigInput` per input; a single value applies to every input (malformed items read as None)."""
    per: dict[str, list[Any]] = {}
    for sec, key in PER_INPUT_KEYS:
        s = data.get(sec)
        per[key] = split_per_input(s.get(key)) if isinstance(s, dict) else []
    n = max([len(v) for v in per.values()] + [1])
    names = per["input_name"]
    if names and not all(is_unset(x) for x in names):
        n = len(names)

    def item(key: str, i: int) -> Any:
        vals = per[key]
        if not vals:
            return None
        v = vals[i] if i < len(vals) else (vals[0] if len(vals) == 1 else None)
        return None if is_unset(v) else v

    def text(key: str, i: int, upper: bool = False) -> str | None:
        v = item(key, i)
        if v is None or isinstance(v, (dict, list)):
            return None
        s = str(v).strip()
        return s.upper() if upper else s.lower() if key.startswith("input_type") or key == "norm_type" else s

    def chans(key: str, i: int) -> list[float] | None:
        try:
            return parse_channels(item(key, i))[0]
        except ValueError:
            return None

    out = []
    for i in range(n):
        try:
            shape = parse_shape(item("input_shape", i))
        except ValueError:
            shape = None
        std, scale = chans("std_value", i), chans("scale_value", i)
        if scale is None and std is not None and all(s != 0 and math.isfinite(1.0 / s) for s in std):
            scale = [1.0 / s for s in std]
        out.append(ConfigInput(
            index=i, name=text("input_name", i), type_train=text("input_type_train", i),
            type_rt=text("input_type_rt", i), layout_train=text("input_layout_train", i, upper=True),
            layout_rt=text("input_layout_rt", i, upper=True), shape=shape, mean=chans("mean_value", i), scale=scale,
            std=std, norm_type=text("norm_type", i), cal_data_dir=text("cal_data_dir", i),
            cal_data_type=text("cal_data_type", i)))
    return out


def parse_config_text(text: str, label: str = "<text>", toolchain: str | None = None) -> ConversionConfig:
    """Parse conversion YAML text (see :func:`load_config`); ``label`` names it in errors.

    Raises
    ------
    ConfigError
        As :func:`load_config` (the size, line length, nesting and alias limits apply to the text).
    """
    data, positions = load_yaml_text(text, label)
    family, reason = _detect_family(data, toolchain)
    return ConversionConfig(path=label, data=data, family=family, family_reason=reason, inputs=_inputs(data),
                            positions=positions)


def load_config(path: str | os.PathLike, toolchain: str | None = None) -> ConversionConfig:
    """Load a hb_mapper (OE 1.x) / hb_compile (OE 3.x) conversion YAML safely, with key positions.

    Parameters
    ----------
    path : path-like
        The YAML file.
    toolchain : {"1.x", "3.x"}, optional
        Force the family instead of detecting it from ``march`` (docs/HORIZON.md section 4) and family-only keys.

    Returns
    -------
    ConversionConfig

    Raises
    ------
    ConfigError
        One line naming the file: missing or unreadable, larger than :data:`MAX_CONFIG_BYTES`, binary (NUL bytes
        or not UTF-8), empty, not YAML (with line and column), not a mapping, duplicate keys, or more than
        :data:`MAX_CONFIG_NODES` nodes once aliases are expanded. Nothing is executed: ruamel's round-trip loader
        builds only plain mappings, sequences and scalars.
    """
    if not str(path):
        raise ConfigError("empty config path")
    p = Path(path)
    try:
        mode = p.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{p}: is a directory, not a config file")
        if not stat.S_ISREG(mode):  # a FIFO would block the read, a device never end
            raise ConfigError(f"{p}: not a regular file (a FIFO, socket or device); not a config file")
        with open(p, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, not a config file") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{p}: cannot read config: {getattr(e, 'strerror', None) or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{p}: larger than {MAX_CONFIG_BYTES >> 10} kB; not a conversion config")
    if b"\x00" in raw:
        raise ConfigError(f"{p}: binary file (NUL bytes), not a YAML config")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (byte {e.start}); not a YAML config") from None
    return parse_config_text(text, str(p), toolchain)
