"""Terminal styles and number formats shared by the console renderers (rich style strings, no rich import)."""

from __future__ import annotations

__all__ = ["SEV_STYLE", "KIND_STYLE", "CAUSE_TAG", "fmt", "cosine_order"]

SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
KIND_STYLE = {"fused": "magenta", "replaced": "blue", "modified": "yellow", "inserted": "green",
              "removed": "red", "unmatched": "bold red", "kept": "dim"}

#: Verdict cause -> (short tag, style); the causes of :data:`graphaudit.report.VERDICT_CAUSES`.
CAUSE_TAG = {"harness": ("HARNESS", "bold white on red"), "config": ("CONFIG", "bold white on red"),
             "rewrite": ("REWRITE", "bold white on magenta"), "toolchain": ("TOOLCHAIN", "bold white on red"),
             "quantization": ("QUANT", "bold black on yellow"), "equal": ("EQUAL", "bold black on green"),
             "not-seen": ("NOT SEEN", "bold white on blue")}


def fmt(x, spec: str) -> str:
    """A report figure formatted with ``spec``: ``-`` when absent, ``"inf"``/``"nan"`` strings as they are."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return format(x, spec)


def cosine_order(x) -> float:
    """Sort key of a cosine (a float, ``"nan"``/``"inf"`` as the report spells them, or None): nan first (the
    toolchain could not compare), missing last."""
    if x is None:
        return 2.0
    if isinstance(x, str):
        return -2.0 if x == "nan" else 2.0
    return x
