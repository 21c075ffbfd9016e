"""Parse Horizon toolchain side files: hb_mapper / hb_compile logs and ``*_quant_info.json``."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GraphAuditError
from ..fileio import require_regular_file
from .hbtable import NodeRow, OutputRow, TableReader, cell_float, column_titles, is_rule, is_table_header

__all__ = ["NodeRow", "OutputRow", "ToolchainLog", "ToolchainFiles", "parse_log", "parse_quant_info",
           "find_toolchain_files", "MAX_LINE_BYTES", "TABLE_STAGE_ROLES"]

#: Stage roles whose node names the toolchain's node table uses, in order of preference (the table lists
#: calibrated/quantized nodes, which keep the optimized_float names; docs/HORIZON.md sections 1 and 5).
TABLE_STAGE_ROLES = ("calibrated", "optimized", "ptq", "quantized")

#: Longest log line read (bytes); a longer line means the file is not a toolchain log.
MAX_LINE_BYTES = 1 << 20
#: Most lines kept of the echoed YAML config (a real echo has a few dozen).
MAX_CONFIG_LINES = 10_000
#: Largest ``*_quant_info.json`` read whole (bytes).
MAX_QUANT_INFO_BYTES = 256 << 20

# "2024-06-21 11:26:37,456 file: x.py func: x line No: 73 msg" (hb_mapper >= 1.6) or
# "2021-04-20 17:06:20,339 INFO msg" (older hb_mapper, as quoted in rdk_doc ptq_process.md).
_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d{3} "
                     r"(?:file: \S+ func: \S+ line No: \d+ ?|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )")
#: ANSI terminal escape sequences (CSI: ESC [ parameters final byte), as colour codes.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_VERSION = re.compile(r"\b(hb_mapper|hb_compile|horizon_nn|HorizonNN|hmct|HMCT|hbdk|HBDK)[ \t]+version[ \t]*:?[ \t]*"
                      r"([0-9][\w.+-]*)")
_NAME_LIST = re.compile(r"(?:Model input names|input names)\s*:?\s*(\[.*\])")
_IO_LINE = re.compile(r"^(Input|Output) name:\s+([^,\s]+)")


@dataclass
class ToolchainLog:
    """What a Horizon log (or quant_info.json) says.

    ``config_text`` is the YAML config echoed after "Dump config:"; its first line starts at
    ``config_line`` (1-based) and character ``config_column`` (0-based) of the log, later lines at
    column 0: see :meth:`config_position`. ``warnings`` lists rows that could not be split cleanly.
    """

    path: str
    tool: str = "unknown"  # "hb_mapper makertbin" | "hb_mapper checker" | "hb_compile" | "quant_info.json"
    hb_mapper_version: str | None = None
    hb_compile_version: str | None = None
    horizon_nn_version: str | None = None  # horizon_nn (1.x) or hmct (3.x)
    hbdk_version: str | None = None
    config_text: str | None = None
    config_line: int | None = None
    config_column: int = 0
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    nodes: list[NodeRow] = field(default_factory=list)
    outputs: list[OutputRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def toolchain_version(self) -> str | None:
        """Version of the conversion tool (hb_compile for 3.x, else hb_mapper)."""
        return self.hb_compile_version or self.hb_mapper_version

    def config_position(self, yaml_line: int, yaml_column: int = 0) -> tuple[int, int]:
        """(log line, log column) of a 1-based line / 0-based column of :attr:`config_text`."""
        if self.config_line is None:
            raise ValueError(f"{self.path}: the log echoes no config")
        return self.config_line + yaml_line - 1, yaml_column + (self.config_column if yaml_line == 1 else 0)


def _open_text(path: Path):
    require_regular_file(path, "a toolchain log or quant_info file")
    try:
        fh = open(path, "rb")
    except FileNotFoundError as e:
        raise GraphAuditError(f"{path}: no such file") from e
    except IsADirectoryError as e:
        raise GraphAuditError(f"{path}: is a directory, expected a toolchain log file") from e
    except OSError as e:
        raise GraphAuditError(f"{path}: cannot read ({e.strerror})") from e
    return fh


def _lines(path: Path):
    """Yield (1-based number, text) of each line, streaming; GraphAuditError on binary data or a huge line."""
    with _open_text(path) as fh:
        n = 0
        while True:
            try:
                raw = fh.readline(MAX_LINE_BYTES + 1)
            except OSError as e:
                raise GraphAuditError(f"{path}: cannot read ({e.strerror})") from e
            if not raw:
                if n == 0:
                    raise GraphAuditError(f"{path}: empty file, expected an hb_mapper/hb_compile log")
                return
            n += 1
            if len(raw) > MAX_LINE_BYTES:
                raise GraphAuditError(f"{path}: line {n} is longer than {MAX_LINE_BYTES} bytes; "
                                      "not an hb_mapper/hb_compile log")
            if b"\x00" in raw:
                raise GraphAuditError(f"{path}: binary data (NUL byte) on line {n}; not an hb_mapper/hb_compile log")
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            # hb_mapper's console output (what a terminal shows, saved with `| tee`) colours the level names with
            # ANSI escapes: "2026-12-04 12:33:27,919 \x1b[92mINFO\x1b[0m The quantized model output:"
            yield n, _ANSI.sub("", text) if "\x1b" in text else text


def parse_log(path: str | Path) -> ToolchainLog:
    """Parse an hb_mapper (1.x) or hb_compile (3.x) log, reading it line by line.

    Space-aligned tables (hb_mapper 1.x, every layout in ``corpus/horizon/logs``: with or without
    Cosine Similarity / Threshold / DataType / In/Out DataType columns, names cut to ``...`` + end,
    a last row without padding) are split at the header's column offsets. Pipe-separated tables
    (``| Node | NodeType | ON | Threshold | Calibrated Cosine | Quantized Cosine | Output Data Type |``
    and ``| TensorName | Calibrated Cosine | Quantized Cosine |``) follow the column titles of the
    OE 3.x ``horizon_tc_ui`` NodeInfo source (node_info.py); no real hb_compile 3.x log was available,
    so that layout (a '|' between cells, '+---+' borders) is an assumption. When a log holds several
    tables of a kind (several runs appended), the last one is kept and a warning says so. The YAML
    config is read after a "Dump config:" line (the hb_mapper 1.x echo: its first line on the next log
    line, the rest unprefixed); a log that echoes it otherwise leaves ``config_text`` None.

    Returns
    -------
    ToolchainLog

    Raises
    ------
    GraphAuditError
        Missing or unreadable file, empty file, binary data, a line over :data:`MAX_LINE_BYTES`, or a
        text file with nothing of a Horizon toolchain log (no version line, config echo or table).
    """
    p = Path(path)
    parser = _LogParser(p)
    for n, line in _lines(p):
        parser.feed(n, line)
    return parser.finish()


#: Tool names in version lines -> the :class:`ToolchainLog` field prefix (hmct is horizon_nn's 3.x name).
_VERSION_KEYS = {"HorizonNN": "horizon_nn", "hmct": "horizon_nn", "HMCT": "horizon_nn", "HBDK": "hbdk"}
#: (marker in a message line, tool) in the order they are tried.
_TOOL_MARKERS = (("hb_mapper_makertbin", "hb_mapper makertbin"), ("hb_mapper_checker", "hb_mapper checker"),
                 ("hb_compile", "hb_compile"))


class _LogParser:
    """The line-by-line state machine of :func:`parse_log`.

    A log message (a line with the timestamp prefix, :data:`_PREFIX`) ends any open block and is read by
    :meth:`_message`. Any other line goes to the handler of the current state: ``"config"`` while the YAML echo
    after "Dump config:" is collected, ``"table"`` while a node or output table is open, else ``"text"`` (table
    headers, the model's input and output names). A table line that does not belong to the table closes it and
    is read again as text.
    """

    def __init__(self, path: Path):
        self.path = path
        self.log = ToolchainLog(path=str(path))
        self.table: TableReader | None = None
        self.pending_header: tuple[str, int] | None = None  # a space-aligned header waiting for its '----' rule
        self.config_next = False  # the next message starts the config echo
        self.config_lines: list[str] | None = None  # the config echo being collected
        self.io_block: str | None = None  # "inputs" / "outputs" while reading "Graph input:" / "Graph output:"
        self.tables = {"nodes": 0, "outputs": 0}
        self.handlers = {"config": self._config_line, "table": self._table_line, "text": self._text_line}

    @property
    def state(self) -> str:
        """``"config"``, ``"table"`` or ``"text"``: which handler reads the next unprefixed line."""
        if self.config_lines is not None:
            return "config"
        return "table" if self.table is not None else "text"

    def feed(self, n: int, line: str) -> None:
        """Read line ``n`` (1-based) of the log."""
        m = _PREFIX.match(line)
        if m:
            self._message(n, line, m)
        else:
            self.handlers[self.state](n, line)

    def finish(self) -> ToolchainLog:
        """The log read so far, with open blocks closed (GraphAuditError when nothing of a toolchain log)."""
        self._close_table()
        self._close_config()
        log = self.log
        if not log.output_names and log.outputs:
            log.output_names = [o.output for o in log.outputs]
        if not (log.nodes or log.outputs or log.config_text or log.toolchain_version or log.horizon_nn_version):
            raise GraphAuditError(f"{self.path}: no hb_mapper/hb_compile log content (no version line, config echo "
                                  "or node table)")
        return log

    # --- blocks ---------------------------------------------------------------------------------------

    def _close_table(self) -> None:
        table, self.table = self.table, None
        if table is None or not table.rows:
            return
        self.tables[table.kind] += 1
        if self.tables[table.kind] > 1:
            self.log.warnings.append(f"{self.path}:{table.line}: another {table.kind} table; the last one is kept")
        if table.kind == "nodes":
            self.log.nodes = table.rows
        else:
            self.log.outputs = table.rows

    def _close_config(self) -> None:
        if self.config_lines is not None:
            self.log.config_text = "\n".join(self.config_lines).rstrip() + "\n"
            self.config_lines = None

    # --- log messages ---------------------------------------------------------------------------------

    def _message(self, n: int, line: str, m: re.Match) -> None:
        """A prefixed line: closes the open table and config echo; versions, tool, input names, config start."""
        msg = line[m.end():]
        self._close_table()
        self.pending_header = None
        self.io_block = None
        self._close_config()
        if self.config_next:
            self.config_next = False
            self.config_lines, self.log.config_line, self.log.config_column = [msg], n, m.end()
            return
        if msg.strip() == "Dump config:":
            self.config_next = True
        log = self.log
        for name, ver in _VERSION.findall(msg):
            key = _VERSION_KEYS.get(name, name) + "_version"
            if getattr(log, key) is None:
                setattr(log, key, ver)
        if log.tool == "unknown":
            log.tool = next((tool for marker, tool in _TOOL_MARKERS if marker in line), "unknown")
        nm = _NAME_LIST.search(msg)
        if nm and not log.input_names:
            try:
                names = ast.literal_eval(nm.group(1))
                log.input_names = [str(x) for x in names] if isinstance(names, list) else []
            except (ValueError, SyntaxError):
                pass

    # --- unprefixed lines, by state -------------------------------------------------------------------

    def _config_line(self, n: int, line: str) -> None:
        """A line of the config echo (kept up to :data:`MAX_CONFIG_LINES`)."""
        lines = self.config_lines
        if len(lines) < MAX_CONFIG_LINES:
            lines.append(line)
        elif len(lines) == MAX_CONFIG_LINES:
            lines.append("")
            self.log.warnings.append(f"{self.path}:{n}: config echo longer than {MAX_CONFIG_LINES} lines; "
                                     "the rest is ignored")

    def _table_line(self, n: int, line: str) -> None:
        """A row of the open table; a blank line ends it, and a line of something else ends it and is read as text."""
        stripped = line.strip()
        table = self.table
        if not stripped:
            self._close_table()
            return
        if is_rule(stripped):
            return
        if table.starts is None and ("|" not in stripped
                                     or is_table_header([c.strip() for c in stripped.strip("|").split("|")])):
            self._close_table()  # not a pipe row, or the next table follows without a gap
            self._text_line(n, line)
            return
        table.add(line, n, str(self.path), self.log.warnings)

    def _text_line(self, n: int, line: str) -> None:
        """Outside tables and the config: a table header (with its rule), or the model's input/output names."""
        stripped = line.strip()
        if self._table_start(n, line, stripped):
            return
        self.pending_header = None
        self._names_line(line, stripped)

    def _table_start(self, n: int, line: str, stripped: str) -> bool:
        """Open a table at a pipe header, or at the rule under a space-aligned header; True when the line is one."""
        if stripped.startswith("|"):
            titles = [c.strip() for c in stripped.strip("|").split("|")]
            if is_table_header(titles):
                self.table = TableReader(titles, None, n)
                return True
        cols = column_titles(line)
        if cols and is_table_header([t for t, _ in cols]):
            self.pending_header = (line, n)
            return True
        if self.pending_header is not None and is_rule(stripped):
            cols = column_titles(self.pending_header[0])
            self.table = TableReader([t for t, _ in cols], [s for _, s in cols], self.pending_header[1])
            self.pending_header = None
            return True
        return False

    def _names_line(self, line: str, stripped: str) -> None:
        """``Input name: x, ...`` lines, and the indented entries of ``Graph input:`` / ``Graph output:`` blocks."""
        log = self.log
        io = _IO_LINE.match(stripped)
        if io:
            (log.input_names if io.group(1) == "Input" else log.output_names).append(io.group(2))
            if io.group(1) == "Input" and len(log.input_names) != len(set(log.input_names)):
                log.input_names = list(dict.fromkeys(log.input_names))
            return
        if stripped in ("Graph input:", "Graph output:"):
            self.io_block = "inputs" if stripped == "Graph input:" else "outputs"
            if self.io_block == "outputs":
                log.output_names = []
            return
        if self.io_block and line.startswith(" ") and ":" in stripped:
            name = stripped.split(":", 1)[0].strip()
            target = log.input_names if self.io_block == "inputs" else log.output_names
            if name not in target:
                target.append(name)
            return
        self.io_block = None


def _threshold(entry: dict) -> float | None:
    th = entry.get("thresholds")
    if isinstance(th, list) and th and isinstance(th[0], list) and th[0]:
        try:
            return float(th[0][0])
        except (TypeError, ValueError):
            return None
    return None


def parse_quant_info(path: str | Path) -> ToolchainLog:
    """Parse a ``{prefix}_quant_info.json`` into a :class:`ToolchainLog` (tool ``"quant_info.json"``).

    Layout as the OE 3.x ``horizon_tc_ui`` NodeInfo source reads it (node_info.py; no real file was
    available to check against): an object keyed by node name, each ``{"type", "inputs", "outputs",
    "thresholds": [[t, ...], ...], "cosine_similarity"}``, plus ``"model_output_tensor":
    {tensor: {"cosine_similarity"}}``. Entries without these keys are kept with None fields.

    Raises
    ------
    GraphAuditError
        Missing, unreadable, too large (> 256 MiB), not JSON, nested deeper than Python's recursion limit, or not
        a JSON object.
    """
    p = Path(path)
    with _open_text(p) as fh:
        try:
            data = fh.read(MAX_QUANT_INFO_BYTES + 1)
        except OSError as e:
            raise GraphAuditError(f"{p}: cannot read ({e.strerror})") from e
    if not data:
        raise GraphAuditError(f"{p}: empty file, expected a quant_info JSON object")
    if len(data) > MAX_QUANT_INFO_BYTES:
        raise GraphAuditError(f"{p}: larger than {MAX_QUANT_INFO_BYTES >> 20} MiB; not a quant_info.json")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise GraphAuditError(f"{p}: not JSON ({str(e).splitlines()[0][:120]})") from e
    except RecursionError:
        raise GraphAuditError(f"{p}: JSON nested too deeply; not a quant_info.json") from None
    if not isinstance(obj, dict):
        raise GraphAuditError(f"{p}: expected a JSON object keyed by node name, got {type(obj).__name__}")
    log = ToolchainLog(path=str(p), tool="quant_info.json")
    for name, entry in obj.items():
        if name == "model_output_tensor" and isinstance(entry, dict):
            for out, info in entry.items():
                cos = info.get("cosine_similarity") if isinstance(info, dict) else None
                log.outputs.append(OutputRow(output=str(out), cosine=cell_float(str(cos)) if cos is not None else None))
            continue
        if not isinstance(entry, dict):
            log.warnings.append(f"{p}: entry {name!r} is not an object; skipped")
            continue
        cos = entry.get("cosine_similarity")
        outs = entry.get("outputs") if isinstance(entry.get("outputs"), list) else []
        log.nodes.append(NodeRow(node=str(name), type=str(entry["type"]) if "type" in entry else None,
                                 cosine=cell_float(str(cos)) if cos is not None else None, threshold=_threshold(entry),
                                 outputs=tuple(str(o) for o in outs)))
    log.output_names = [o.output for o in log.outputs]
    return log


@dataclass
class ToolchainFiles:
    """Toolchain side files next to a stage directory: logs (best first) and quant_info files."""

    logs: list[Path] = field(default_factory=list)
    quant_info: list[Path] = field(default_factory=list)


_LOG_RANK = ("hb_mapper_makertbin", "hb_compile", "hb_mapper")


def find_toolchain_files(stage_dir: str | Path) -> ToolchainFiles:
    """Logs (``hb_mapper*.log``, ``hb_compile*.log``) and ``*_quant_info.json`` in ``stage_dir`` or its parent.

    hb_mapper/hb_compile write the stage models to ``working_dir`` (default ``model_output``) and the
    log to the directory they ran in, usually ``working_dir``'s parent (docs/HORIZON.md section 1). Logs
    are ranked makertbin / hb_compile before checker, then newest first; files in ``stage_dir``
    before its parent's. A stage *file* stands for its directory. Nothing is read.
    """
    d = Path(stage_dir)
    if d.is_file():
        d = d.parent
    found = ToolchainFiles()
    try:
        places = (d, d.resolve().parent)
    except (OSError, RuntimeError):  # a symlink loop: no toolchain files (stage discovery reports the path)
        return found
    for where in places:
        try:
            entries = sorted((e for e in where.iterdir() if e.is_file()), key=lambda e: e.name)
        except OSError:
            continue
        logs = [e for e in entries if e.suffix == ".log" and e.name.startswith(("hb_mapper", "hb_compile"))]

        def rank(e: Path) -> tuple:
            r = next((i for i, k in enumerate(_LOG_RANK) if e.name.startswith(k)), len(_LOG_RANK))
            try:
                mtime = e.stat().st_mtime
            except OSError:
                mtime = 0.0
            return (r, -mtime, e.name)

        found.logs += [e for e in sorted(logs, key=rank) if e not in found.logs]
        found.quant_info += [e for e in entries if e.name.endswith("_quant_info.json") and e not in found.quant_info]
    return found
