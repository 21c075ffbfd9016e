"""The toolchain's per-node and per-output tables: row records and the splitting of table lines."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["NodeRow", "OutputRow", "TableReader", "is_table_header", "is_rule", "column_titles", "cell_float"]

_COLUMN = re.compile(r"\S+(?: \S+)*")  # a column title: words separated by single spaces
_RULE = re.compile(r"^[\s=+|:-]+$")  # table borders: ====, ----, +---+---+, |---|


@dataclass(slots=True)
class NodeRow:
    """One row of the toolchain's per-node table (or one ``*_quant_info.json`` node).

    ``cosine`` is the toolchain's cosine similarity of the node's output against the float model on
    the calibration data: hb_mapper 1.x "Cosine Similarity" (quantized model vs float); hb_compile 3.x
    "Calibrated Cosine" = quant_info.json ``cosine_similarity`` (calibrated vs float). ``nan`` when the
    toolchain printed nan, None when it printed ``--`` or nothing. ``threshold`` is the calibration
    threshold (None for ``--``). ``dtype`` is "DataType" / "In/Out DataType" / "Output Data Type".
    Other columns are kept by their title in ``extra``. ``truncated``: the log cut the name to its
    column width and printed ``...`` + its end. ``line`` is 1-based in the log (0 for JSON).
    """

    node: str
    on: str | None = None
    subgraph: str | None = None
    type: str | None = None
    cosine: float | None = None
    threshold: float | None = None
    dtype: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    truncated: bool = False
    line: int = 0


@dataclass(slots=True)
class OutputRow:
    """One row of the toolchain's model-output table: cosine and L1/L2/Chebyshev distances (floats or None)."""

    output: str
    cosine: float | None = None
    l1: float | None = None
    l2: float | None = None
    chebyshev: float | None = None
    extra: dict[str, str] = field(default_factory=dict)
    line: int = 0


def cell_float(cell: str | None) -> float | None:
    """Float of a table cell; None for ``--``, empty or non-numeric cells; ``nan`` stays nan."""
    if cell is None:
        return None
    c = cell.strip()
    if not c or c.strip("-") == "":
        return None
    try:
        return float(c)
    except ValueError:
        return None


def column_titles(header: str) -> list[tuple[str, int]]:
    """(title, start offset) of each column of a space-aligned header (titles are split by 2+ spaces)."""
    return [(m.group(0), m.start()) for m in _COLUMN.finditer(header)]


def is_table_header(cells: list[str]) -> bool:
    """True for the title cells of a node table (Node, ON/Type/..., cosine) or an output table."""
    if not cells or cells[0] not in ("Node", "Output", "TensorName"):
        return False
    return any(c in ("ON", "Type", "NodeType", "Subgraph") or "Cosine" in c or "Distance" in c for c in cells[1:])


def is_rule(text: str) -> bool:
    """True for a table border line (``====``, ``----``, ``+---+``, ``|---|``)."""
    return bool(text.strip()) and bool(_RULE.match(text.strip()))


def _node_row(cells: dict[str, str], line: int) -> NodeRow:
    name = cells.get("Node", "")
    dtype_key = next((k for k in ("DataType", "In/Out DataType", "Output Data Type") if k in cells), None)
    cos_key = "Cosine Similarity" if "Cosine Similarity" in cells else "Calibrated Cosine"
    known = {"Node", "ON", "Subgraph", "Type", "NodeType", "Threshold", cos_key, dtype_key}
    opt = lambda k: (cells.get(k) or None) if cells.get(k) != "--" else None  # noqa: E731
    return NodeRow(node=name[3:] if name.startswith("...") else name, on=opt("ON"), subgraph=opt("Subgraph"),
                   type=opt("Type") or opt("NodeType"), cosine=cell_float(cells.get(cos_key)),
                   threshold=cell_float(cells.get("Threshold")), dtype=opt(dtype_key) if dtype_key else None,
                   extra={k: v for k, v in cells.items() if k not in known}, truncated=name.startswith("..."),
                   line=line)


def _output_row(cells: dict[str, str], line: int) -> OutputRow:
    titles = list(cells)
    cos_key = "Cosine Similarity" if "Cosine Similarity" in cells else "Calibrated Cosine"
    known = {titles[0], cos_key, "L1 Distance", "L2 Distance", "Chebyshev Distance"}
    return OutputRow(output=cells[titles[0]], cosine=cell_float(cells.get(cos_key)),
                     l1=cell_float(cells.get("L1 Distance")), l2=cell_float(cells.get("L2 Distance")),
                     chebyshev=cell_float(cells.get("Chebyshev Distance")),
                     extra={k: v for k, v in cells.items() if k not in known}, line=line)


class TableReader:
    """One table being read line by line: node table or output table, space-aligned or pipe-separated.

    Parameters
    ----------
    titles : list of str
        Column titles from the header line.
    starts : list of int or None
        Start offsets of the columns of a space-aligned header; None for a pipe-separated table.
    line : int
        1-based log line of the header.
    """

    def __init__(self, titles: list[str], starts: list[int] | None, line: int):
        self.titles, self.starts, self.line = titles, starts, line
        self.kind = ("outputs" if titles[0] in ("Output", "TensorName")
                     or any("Distance" in t for t in titles) else "nodes")
        self.rows: list = []  # NodeRow or OutputRow, built as the lines stream by

    def add(self, text: str, lineno: int, where: str, warnings: list[str]) -> None:
        """Split a row line into cells and append its record; a row that cannot be split goes to ``warnings``.

        Space-aligned rows are cut at the header's offsets (short rows padded with empty cells); a row
        whose cell ran into the next column is split on runs of 2+ spaces instead.
        """
        if self.starts is None:
            cells = [c.strip() for c in text.strip().strip("|").split("|")]
        else:
            s = self.starts
            cells = [text[a:b].strip() for a, b in zip(s, s[1:] + [len(text)])]
            if any(len(text) > b and not text[b - 1].isspace() for b in s[1:]):
                cells = re.split(r"\s{2,}", text.strip())
            if len(cells) < len(self.titles):
                cells += [""] * (len(self.titles) - len(cells))
        if len(cells) != len(self.titles):
            warnings.append(f"{where}:{lineno}: table row with {len(cells)} cells, header has {len(self.titles)}: "
                            f"{text.strip()[:80]}")
            return
        d = dict(zip(self.titles, cells))
        self.rows.append(_node_row(d, lineno) if self.kind == "nodes" else _output_row(d, lineno))
