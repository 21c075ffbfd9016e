"""Text from the user's files made safe to print on a terminal or to put into a DOT/SVG string."""

from __future__ import annotations

import re

__all__ = ["printable", "needs_escape", "print_line"]

# C0 and C1 control characters and DEL (ESC starts terminal sequences that clear the screen or set the window title),
# line/paragraph separators, and bidirectional overrides (which reverse how a name reads).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with control characters shown as escapes (``"\\x1b"``, ``"\\n"``), safe to print on a terminal."""
    if text.isprintable():  # no control, separator or format character (a superset of _CONTROL): the common case
        return text
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def needs_escape(text: str) -> bool:
    """Whether :func:`printable` would change ``text``."""
    return _CONTROL.search(text) is not None


def print_line(console, *objects, **kw) -> None:
    """Print a line of text on a rich ``console``: folded at its width on a terminal; whole when the output goes to a
    file or a pipe (no hard wrap at the 160 columns piped output is laid out in, README "Usage": tables keep that
    width, lines of text do not), as the explain brief keeps its finding lines whole."""
    console.print(*objects, soft_wrap=not console.is_terminal, **kw)
