"""The report's ``toolchain`` section as typed records: a toolchain log's per-node similarity mapped onto the stages.

Built by :func:`graphaudit.toolchain_log.toolchain_section`; ``to_dict`` gives the schema's layout (README "JSON
report", ``toolchain``), ``from_dict`` reads it back. Cosines keep the schema's spelling: floats, ``"nan"`` or None.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Union

__all__ = ["ToolchainNode", "ToolchainOutput", "ToolchainSection"]

_Figure = Union[float, str, None]


@dataclass
class ToolchainNode:
    """One node row of the toolchain's similarity table, with graphaudit's figure for the same node.

    Attributes
    ----------
    node : str
        Node name as the log prints it (the end of it when ``truncated``).
    truncated : bool
    line : int
        1-based line of the row in the log (0 for quant_info.json).
    node_id : str or None
        The node of the mapped stage it names, None when none does.
    on, subgraph, type, dtype : str or None
        The row's columns (BPU/CPU, subgraph id, op type, output dtype).
    cosine, threshold : float, str or None
        The toolchain's cosine similarity and threshold column.
    extra : dict
        Other columns by title.
    graphaudit_cosine, graphaudit_first_sample_cosine : float, str or None
        graphaudit's cosine of the node's output over all samples, and of the first sample alone.
    graphaudit_tensor : str or None
        The tensor graphaudit compared.
    graphaudit_note : str
        Why graphaudit's figure is missing or measures another quantity (``""`` when it is the same quantity).
    """

    node: str
    truncated: bool
    line: int
    node_id: str | None
    on: str | None
    subgraph: str | None
    type: str | None
    cosine: _Figure
    threshold: _Figure
    dtype: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    graphaudit_cosine: _Figure = None
    graphaudit_tensor: str | None = None
    graphaudit_first_sample_cosine: _Figure = None
    graphaudit_note: str = ""


@dataclass
class ToolchainOutput:
    """One row of the toolchain's model-output table, with graphaudit's cosine of that output.

    Attributes
    ----------
    output : str
        Output (or, hb_mapper 1.18, its node) as the log names it.
    line : int
    tensor : str or None
        The graph output of the mapped stage, None when not found.
    cosine, l1, l2, chebyshev : float, str or None
        The toolchain's figures.
    extra : dict
    graphaudit_cosine, graphaudit_first_sample_cosine : float, str or None
    """

    output: str
    line: int
    tensor: str | None
    cosine: _Figure
    l1: _Figure
    l2: _Figure
    chebyshev: _Figure
    extra: dict[str, Any] = field(default_factory=dict)
    graphaudit_cosine: _Figure = None
    graphaudit_first_sample_cosine: _Figure = None


@dataclass
class ToolchainSection:
    """What a toolchain log (hb_mapper / hb_compile) or ``*_quant_info.json`` says, mapped onto a stage.

    Attributes
    ----------
    source : str
        The file read.
    tool : str
        ``"hb_mapper makertbin"``, ``"hb_mapper checker"``, ``"hb_compile"`` or ``"quant_info.json"``.
    toolchain_version, horizon_nn_version, hbdk_version : str or None
    config_line : int or None
        Log line where the echoed YAML config starts.
    stage : str or None
        Stage the node ids refer to (calibrated, else optimized, ptq, quantized).
    compared : str or None
        The numeric transition graphaudit's figures come from (``"optimized -> calibrated"``), None without a run.
    nodes_total, nodes_mapped : int
        Node rows, and those naming a node of ``stage``.
    nodes : list of ToolchainNode
    outputs : list of ToolchainOutput
    warnings : list of str
        Rows that could not be split cleanly.
    """

    source: str
    tool: str
    toolchain_version: str | None
    horizon_nn_version: str | None
    hbdk_version: str | None
    config_line: int | None
    stage: str | None
    compared: str | None
    nodes_total: int
    nodes_mapped: int
    nodes: list[ToolchainNode] = field(default_factory=list)
    outputs: list[ToolchainOutput] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report's ``toolchain`` section (keys in field order, as written since schema 1.2)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ToolchainSection":
        """Inverse of :meth:`to_dict`."""
        return cls(**{**d, "nodes": [ToolchainNode(**n) for n in d.get("nodes", [])],
                      "outputs": [ToolchainOutput(**o) for o in d.get("outputs", [])]})
