"""A setting the user can paste into the toolchain's config so the nodes bisect chose keep higher precision.

- Horizon hb_mapper 1.x / hb_compile: ``model_parameters.node_info`` in its dict form, keyed by node names of the
  optimized_float model (docs/HORIZON.md section 4: names from any other stage match nothing). An activation's
  HzCalibration on a tensor becomes ``{producer: {OutputType: int16}}``; a weight's HzCalibration becomes
  ``{consumer: {ON: CPU}}`` (the node then runs in float on the CPU). hb_mapper 1.x's own parser
  (``horizon_tc_ui/config/mapper_conf_parser.py``, ``__get_node_dict_by_dict``) accepts exactly the keys ``ON``,
  ``OutputType`` and ``InputType<k>``; its string form takes one node only, so the dict form is written.
- onnxruntime's ``quantize_static``: ``nodes_to_exclude`` with the float model's node names (the producer and the
  consumers of each tensor whose Q/DQ pair was chosen), per onnxruntime's ``quantize_static`` docstring.

The Horizon snippet is linted with graphaudit's config lint (C3xx) against the stages, merged into the user's
config when one is given; findings on ``node_info`` are returned with the snippet.
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass, field

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import SingleQuotedScalarString

from .bisect_report import BisectReport
from .classify import Change
from .config import ConversionConfig, parse_config_text
from .lineage import Alignment
from .lint import lint_config
from .stage import StageGraph

__all__ = ["FixSuggestion", "suggest_fix", "yaml11_safe"]


@dataclass
class FixSuggestion:
    """The setting to paste, what it names and what graphaudit's lint says of it.

    Attributes
    ----------
    toolchain : str
        ``"hb_mapper"`` or ``"onnxruntime"``; ``""`` when no setting exists for the transition (a float rewrite:
        the toolchain has no switch for its graph optimizations).
    text : str
        YAML (hb_mapper) or Python (onnxruntime) to paste; ``""`` when none.
    nodes : list of str
        Node names of stage a (the optimized_float / float model) the setting names.
    note : str
        One line: where the text goes and what it does.
    lint : list of str
        ``CODE message`` of each lint finding on the snippet (empty: clean).
    """

    toolchain: str
    text: str
    nodes: list[str] = field(default_factory=list)
    note: str = ""
    lint: list[str] = field(default_factory=list)


def _wrapped_a_tensor(al: Alignment, c: Change) -> str | None:
    """The a tensor an inserted wrapper chain quantizes (its first node's input, mapped to a)."""
    b = al.b
    inside = set(c.b_nodes)
    for nid in c.b_nodes:
        n = b.nodes[nid]
        x = n.inputs[0] if n.inputs else ""
        t = b.tensors.get(x) if x else None
        if t is not None and (t.producer is None or t.producer not in inside):
            tm = al.tensor_map.get(x)
            return tm.a if tm is not None else None
    return None


def _name(st: StageGraph, nid: str) -> str:
    return st.nodes[nid].name or nid


def _horizon_entries(al: Alignment, changes: list[Change], units: list[list[int]]) -> dict[str, dict[str, str]]:
    """node_info entries for the chosen units: activation -> producer OutputType int16, weight -> consumers on CPU."""
    a = al.a
    out: dict[str, dict[str, str]] = {}
    for unit in units:
        for j in unit:
            c = changes[j]
            if c.kind != "inserted":
                continue
            x = _wrapped_a_tensor(al, c)
            t = a.tensors.get(x) if x else None
            if t is None:
                continue
            if t.is_param:
                for cid, _k in t.consumers:
                    out.setdefault(_name(a, cid), {})["ON"] = "CPU"
            elif t.producer is not None:
                out.setdefault(_name(a, t.producer), {})["OutputType"] = "int16"
            else:  # a graph input: its consumers read it in int16
                for cid, k in t.consumers:
                    out.setdefault(_name(a, cid), {})[f"InputType{k}"] = "int16"
    return out


#: Plain scalars a YAML 1.1 reader (PyYAML, which hb_mapper uses) turns into booleans or null.
_YAML11_SPECIAL = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def yaml11_safe(x):
    """``x`` (nested dicts of strings) with the strings a YAML 1.1 reader (PyYAML, which hb_mapper uses) would read
    back as booleans, null or numbers wrapped to be written single-quoted by ruamel.yaml."""
    return _quoted(x)


def _quoted(x):
    """Strings a YAML 1.1 reader would not read back as strings, single-quoted (``'ON'`` unquoted is a boolean to YAML 1.1 readers such as PyYAML, hb_mapper's)."""
    if isinstance(x, dict):
        return {_quoted(k): _quoted(v) for k, v in x.items()}
    if isinstance(x, str) and (x.lower() in _YAML11_SPECIAL or x.replace(".", "", 1).lstrip("+-").isdigit()):
        return SingleQuotedScalarString(x)
    return x


def _dump(data) -> str:
    data = _quoted(data)
    y = YAML()
    y.default_flow_style = False
    buf = io.StringIO()
    y.dump(data, buf)
    return buf.getvalue()


def _lint(entries: dict, config: ConversionConfig | None, stages: list[StageGraph], lineage) -> list[str]:
    """Lint findings on node_info for the snippet merged into ``config`` (or alone)."""
    if config is not None and isinstance(config.data, dict):
        data = copy.deepcopy(config.data)
        mp = data.setdefault("model_parameters", {})
        ni = mp.get("node_info") if isinstance(mp.get("node_info"), dict) else {}
        mp["node_info"] = {**ni, **entries}
        label = str(config.path)
    else:
        data, label = {"model_parameters": {"node_info": entries}}, "<node_info snippet>"
    cfg = parse_config_text(_dump(data), label, toolchain=config.family if config is not None else "1.x")
    found = lint_config(cfg, stages=stages, lineage=lineage)
    return [f"{f.code} {f.message}" for f in found
            if "node_info" in str((f.location or {}).get("key", "")) or "node_info" in f.message]


def suggest_fix(rep: BisectReport, stages: list[StageGraph], al: Alignment, changes: list[Change],
                config: ConversionConfig | None = None, lineage=None, chosen: list[int] | None = None
                ) -> FixSuggestion:
    """The setting that keeps the chosen units of ``rep`` in higher precision (see the module docstring).

    Parameters
    ----------
    rep : BisectReport
        A finished bisection of transition ``al`` (``rep.units[k].changes`` index ``changes``).
    stages : list of StageGraph
        The pipeline (for the lint's node-name check against the optimized_float stage).
    al, changes
        The transition's alignment and changes.
    config : ConversionConfig, optional
        The user's config: the snippet is linted merged into it.
    lineage : Lineage, optional
        The pipeline's lineage (the lint names what a source node became).
    chosen : list of int, optional
        Units (indices into ``rep.units``) to name instead of ``rep.chosen``.

    Returns
    -------
    FixSuggestion
    """
    units = [rep.units[k].changes for k in (rep.chosen if chosen is None else chosen)]
    kinds = {changes[j].kind for u in units for j in u}
    wrappers = {al.b.nodes[n].op_type for u in units for j in u for n in changes[j].b_nodes}
    if "HzCalibration" in wrappers:
        entries = _horizon_entries(al, changes, units)
        if entries:
            text = _dump({"model_parameters": {"node_info": entries}})
            return FixSuggestion("hb_mapper", text, sorted(entries),
                                 f"add under model_parameters in the config hb_mapper runs (names of {al.a.name})",
                                 _lint(entries, config, stages, lineage))
    if wrappers & {"QuantizeLinear", "DequantizeLinear"}:
        names = []
        for u in units:
            for j in u:
                x = _wrapped_a_tensor(al, changes[j])
                t = al.a.tensors.get(x) if x else None
                if t is not None and not t.is_param:
                    names += ([t.producer] if t.producer else []) + [cid for cid, _k in t.consumers]
        names = list(dict.fromkeys(_name(al.a, n) for n in names))
        if names:
            return FixSuggestion("onnxruntime", f"nodes_to_exclude={names!r}", names,
                                 f"pass to onnxruntime.quantization.quantize_static on {al.a.name} (not linted: "
                                 "Python, not a config file)")
    return FixSuggestion("", "", [], f"no toolchain setting reverts {', '.join(sorted(kinds))} changes of "
                                     f"{al.a.name} -> {al.b.name}: they are the toolchain's own float rewrites")
