"""User-facing errors: bad files, bad arguments, bad data (distinct from findings)."""

from __future__ import annotations

__all__ = [
    "StageRunError",
    "GraphAuditError",
    "ModelLoadError",
    "StageDiscoveryError",
    "StagesUnrelatedError",
    "RuleCatalogueError",
    "DataError",
    "DataFileError",
    "DataUnreadableError",
    "NonFiniteSampleError",
    "NoSampleLeftError",
    "LoweringError",
    "GraphvizMissingError",
    "ConfigError",
]


class GraphAuditError(Exception):
    """Base class of every error caused by the user's input.

    The CLI prints ``str(err)`` on one line and exits with code 2. The message must
    name the offending file (or argument) and the problem.
    """


class ModelLoadError(GraphAuditError):
    """An ONNX file could not be read: missing, not ONNX, truncated or inconsistent."""


class StageDiscoveryError(GraphAuditError):
    """No stage files were found, or the given stages cannot be ordered."""


class StagesUnrelatedError(GraphAuditError):
    """Two consecutive stages share no tensors or structure (not one pipeline)."""


class RuleCatalogueError(GraphAuditError):
    """A rule file in ``graphaudit/rules/`` is malformed (this is a packaging defect)."""


class DataError(GraphAuditError):
    """Model input data could not be used: missing, unreadable, pickled, or not matching the model's inputs."""


class DataFileError(DataError):
    """One data file whose content cannot be read: truncated, corrupt, pickled, not the format its name says, an
    image Pillow cannot decode, a raw file of the wrong byte size, or a file that cannot be opened. A directory of
    data leaves such a file out (:attr:`graphaudit.data.source.DataSource.unreadable`) and goes on with the others.

    ``path`` is the file."""

    def __init__(self, message: str, path=None):
        super().__init__(message)
        self.path = path


class DataUnreadableError(DataError):
    """No sample of the data could be read: the file given, or every file of the directory given, is a
    :class:`DataFileError`. ``unreadable`` lists them as ``(path, message)``; the message names the first."""

    def __init__(self, message: str, unreadable: list | tuple = ()):
        super().__init__(message)
        self.unreadable = list(unreadable)


class NonFiniteSampleError(DataError):
    """One sample fed to a stage holds NaN or infinite values (raised by the feed check of the numeric comparison,
    which leaves such a sample out). ``label`` names the sample (its file, or ``sample K``), ``input`` the input."""

    def __init__(self, message: str, label: str = "", input: str = ""):
        super().__init__(message)
        self.label, self.input = label, input


class NoSampleLeftError(DataError):
    """Every sample of a numeric comparison was left out for holding NaN or infinite values. ``left_out`` lists
    them as ``(sample label, input name)``; the message names the first and the count."""

    def __init__(self, message: str, left_out: list | tuple = ()):
        super().__init__(message)
        self.left_out = [tuple(x) for x in left_out]

    @classmethod
    def of(cls, left_out: list) -> "NoSampleLeftError":
        """The error of ``left_out`` (``(sample label, input name)``, at least one), naming the first."""
        label, name = left_out[0]
        every = (f"the only sample ({label}, input {name!r}) holds NaN or infinite values" if len(left_out) == 1
                 else f"all {len(left_out)} samples hold NaN or infinite values (the first: {label}, input {name!r})")
        return cls(f"{every}, so no sample was left to compare the stages on", left_out)


class LoweringError(GraphAuditError):
    """Custom-domain ops that cannot be lowered to standard ONNX, or a lowered model that cannot be written.

    The message names the model and every op that could not be lowered, with the reason.
    ``failures`` holds one dict per (op, reason): ``{"op_type", "count", "reason", "nodes"}``.
    """

    def __init__(self, message: str, failures: list[dict] | tuple = ()):
        super().__init__(message)
        self.failures = list(failures)


class StageRunError(GraphAuditError):
    """A stage the numeric comparison cannot run: lowering its custom ops failed, the runtime refuses the model, or
    it fails on the data.

    ``path`` is the stage file; the message names it and the runtime's (or the lowering's) reason, which for a
    refused node names the node. The comparison reports it as a finding (N403) and goes on with the stages before it.
    """

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.path = path


class GraphvizMissingError(GraphAuditError):
    """The Graphviz ``dot`` program is not on ``PATH``: SVG/PNG cannot be laid out (DOT can still be written)."""


class ConfigError(GraphAuditError):
    """A conversion config (hb_mapper / hb_compile YAML) that cannot be read: missing, binary, empty, not YAML,
    not a mapping, too large, or too deeply aliased (a "YAML bomb")."""
