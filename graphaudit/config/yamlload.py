"""Reading YAML text safely with ruamel: size, line, node, nesting and alias limits, PyYAML's YAML 1.1 booleans,
a plain-Python copy of the document with the 1-based position of every key, one-line errors."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, ReusedAnchorWarning, YAMLError
from ruamel.yaml.resolver import VersionedResolver

from ..errors import ConfigError

__all__ = ["load_yaml_text", "MAX_CONFIG_BYTES", "MAX_LINE_CHARS", "MAX_EXPANDED_CHARS", "MAX_CONFIG_NODES",
           "MAX_FLOW_DEPTH", "MAX_BLOCK_DEPTH"]

#: Larger files are refused: real conversion configs are 1-10 kB (the largest in the corpus is 12 kB); the bound
#: keeps ruamel's pure-Python parser to about a second on the worst input (see bench/bench_config_limits.py).
MAX_CONFIG_BYTES = 128 << 10
#: Longest line accepted (characters): real config lines are under 200 (a node list may reach a few kB).
MAX_LINE_CHARS = 8 << 10
#: Characters of scalars (keys and values) once aliases are expanded: bounds the memory of a document whose
#: few kB of text alias one long string thousands of times (a string "billion laughs").
MAX_EXPANDED_CHARS = 4 << 20
#: Nodes visited when walking the parsed YAML (aliases count each time they are reached): bounds memory and
#: time on "billion laughs" documents whose aliases expand exponentially. The largest corpus config has 138.
#: Checked first on the text (flow items and content lines), so that a file of many small nodes is refused before
#: ruamel's parser spends seconds on it.
MAX_CONFIG_NODES = 5000

#: Longest text shown for a mapping or list used as a key (``? {a: 1}``); longer ones end in "...".
_KEY_TEXT_CHARS = 200


def _key_text(k: Any) -> str:
    """A non-scalar key (a YAML mapping or list used as a key) as YAML flow text, ``{a: 1}`` / ``[a, b]``,
    cut after :data:`_KEY_TEXT_CHARS` characters (the walk stops there)."""
    parts: list[str] = []
    size = 0

    def emit(t: str) -> bool:
        nonlocal size
        parts.append(t)
        size += len(t)
        return size <= _KEY_TEXT_CHARS

    def go(x: Any, depth: int) -> bool:
        if depth > 8:
            return emit("...")
        if isinstance(x, Mapping):
            if not emit("{"):
                return False
            for i, (a, b) in enumerate(x.items()):
                if (i and not emit(", ")) or not go(a, depth + 1) or not emit(": ") or not go(b, depth + 1):
                    return False
            return emit("}")
        if isinstance(x, (list, tuple, Sequence)) and not isinstance(x, str):
            if not emit("["):
                return False
            for i, a in enumerate(x):
                if (i and not emit(", ")) or not go(a, depth + 1):
                    return False
            return emit("]")
        return emit(str(x)[:_KEY_TEXT_CHARS + 1])

    if not go(k, 0):
        return "".join(parts)[:_KEY_TEXT_CHARS] + "..."
    return "".join(parts)


class _Walker:
    """Plain-Python copy of the ruamel tree with key positions, bounded in nodes visited and cycle-safe."""

    def __init__(self, label: str):
        self.label, self.count, self.chars, self.positions = label, 0, 0, {}
        self._stack: set[int] = set()

    def _text(self, s: Any) -> str:
        """``str(s)``, counted against :data:`MAX_EXPANDED_CHARS` (before the copy is made)."""
        self.chars += len(s) if isinstance(s, str) else 0
        if self.chars > MAX_EXPANDED_CHARS:
            raise ConfigError(f"{self.label}: more than {MAX_EXPANDED_CHARS >> 20} MiB of text once aliases are "
                              "expanded (a long string aliased many times, a 'YAML bomb'?); refusing to read it")
        return str(s)

    def walk(self, node: Any, path: tuple) -> Any:
        self.count += 1
        if self.count > MAX_CONFIG_NODES:
            raise ConfigError(f"{self.label}: more than {MAX_CONFIG_NODES} YAML nodes once aliases are expanded "
                              "(nested aliases, a 'YAML bomb'?); refusing to read it")
        if isinstance(node, (CommentedMap, CommentedSeq, dict, list)):
            if id(node) in self._stack:
                raise ConfigError(f"{self.label}: recursive YAML alias at {'.'.join(map(str, path)) or 'top level'}")
            self._stack.add(id(node))
            try:
                if isinstance(node, dict):
                    out = {}
                    for k, v in node.items():
                        key = self._text(k) if isinstance(k, str) else k if isinstance(k, (int, float, bool)) or \
                            k is None else _key_text(k)
                        kp = path + (key,)
                        if isinstance(node, CommentedMap):
                            try:
                                line, col = node.lc.key(k)
                                self.positions[kp] = (line + 1, col + 1)
                            except (KeyError, TypeError, AttributeError):
                                pass
                        out[key] = self.walk(v, kp)
                    return out
                items = []
                for i, v in enumerate(node):
                    if isinstance(node, CommentedSeq):
                        try:
                            line, col = node.lc.item(i)
                            self.positions[path + (i,)] = (line + 1, col + 1)
                        except (KeyError, TypeError, AttributeError, IndexError):
                            pass
                    items.append(self.walk(v, path + (i,)))
                return items
            finally:
                self._stack.discard(id(node))
        if isinstance(node, str):
            return self._text(node)
        if isinstance(node, bool) or node is None:
            return node
        if isinstance(node, int):
            return int(node)
        if isinstance(node, float):
            return float(node)
        return self._text(str(node))  # timestamps and other scalars: their text


#: Deepest ``[``/``{`` nesting accepted: real configs nest 3 levels; ruamel's scanner is quadratic in flow depth.
MAX_FLOW_DEPTH = 64


def _flow_scan(text: str) -> tuple[int, int]:
    """(deepest ``[``/``{`` nesting, count of ``[``/``{``/``,``) outside quotes and comments: a cheap pre-scan,
    not a YAML parser."""
    depth = deepest = items = 0
    quote = None
    prev = "\n"
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
        elif ch == "#" and prev in " \t\n":
            quote = "\n"  # skip the comment up to the end of the line
        elif ch in "'\"" and prev in " \t\n[{,:":
            quote = ch
        elif ch in "[{":
            depth += 1
            items += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == ",":
            items += 1
        prev = ch
    return deepest, items


#: Deepest block (indentation) nesting accepted: real configs nest 3 levels; ruamel's parser recurses once per level
#: and runs out of Python's stack a few hundred levels down (250 did under pytest), so a deeper document is refused
#: from its text before it is parsed.
MAX_BLOCK_DEPTH = 64

_DASHES = re.compile(r"(?:-(?:[ \t]+|$))+")
_BLOCK_SCALAR = re.compile(r"(?:^|[:\-][ \t]+)[|>][-+0-9]*[ \t]*(?:#.*)?$")


def _too_deep(text: str, limit: int) -> int:
    """The 1-based line where block nesting, estimated from indentation outside block scalars, first exceeds
    ``limit`` levels (0: never): a content line more indented than the open levels opens one more, and each ``- ``
    of a compact sequence (``- - - x``) one more. An upper estimate (``- key:`` and the keys below it count
    twice), not a YAML parser."""
    stack: list[int] = []
    scalar_at = None  # indent of the line that opened a block scalar (| or >): deeper lines are its text
    for n, ln in enumerate(text.splitlines(), 1):
        body = ln.lstrip(" ")
        if not body.strip() or body.startswith("#"):
            continue
        indent = len(ln) - len(body)
        if scalar_at is not None and indent > scalar_at:
            continue
        scalar_at = None
        while stack and stack[-1] >= indent:
            stack.pop()
        stack.append(indent)
        dashes = _DASHES.match(body)
        if len(stack) + (dashes.group().count("-") - 1 if dashes else 0) > limit:
            return n
        if _BLOCK_SCALAR.search(body):
            scalar_at = indent
    return 0


def _int_limit() -> int:
    """Most digits Python converts to an int (``sys.get_int_max_str_digits``, 4300 by default; 0: no limit);
    PyYAML, which hb_mapper/hb_compile read configs with, fails beyond it too."""
    import sys

    get = getattr(sys, "get_int_max_str_digits", None)
    return get() if get is not None else 4300


def _long_integer(text: str, label: str) -> ConfigError | None:
    """The ConfigError for a YAML integer too long for Python's int conversion (line, column, digit count), or
    None when no such run of digits is found."""
    limit = _int_limit()
    if not limit:
        return None
    for n, ln in enumerate(text.splitlines(), 1):
        for m in re.finditer(r"(?<![\w.\-+])[-+]?[0-9][0-9_]*", ln):
            digits = sum(ch.isdigit() for ch in m.group())
            if digits > limit:
                return ConfigError(f"{label}: not valid YAML at line {n}, column {m.start() + 1}: an integer of "
                                   f"{digits} digits (Python reads at most {limit}, and so does PyYAML, which "
                                   "hb_mapper/hb_compile read the config with)")
    return None


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(text: str) -> str:
    """``text`` on one line: control characters (line breaks in a quoted key, ESC) shown as escapes."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text.strip())


#: PyYAML's YAML 1.1 booleans (yaml/resolver.py): y/Y/n/N are not among them, they stay strings.
_PYYAML_BOOL = re.compile(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$")
_BOOL_TAG = "tag:yaml.org,2002:bool"


class _PyYAMLResolver(VersionedResolver):
    """ruamel's resolver with PyYAML's YAML 1.1 booleans: ruamel's 1.1 table also reads ``y``/``n`` as booleans,
    PyYAML (which hb_mapper / hb_compile read their configs with) keeps them as strings."""

    @property
    def versioned_resolver(self) -> Any:
        table = VersionedResolver.versioned_resolver.fget(self)
        fixed = self.__dict__.setdefault("_pyyaml_fixed", set())
        if id(table) not in fixed:
            for ch, entries in table.items():
                table[ch] = [(tag, _PYYAML_BOOL if tag == _BOOL_TAG else rx) for tag, rx in entries]
            fixed.add(id(table))
        return table


def _type_name(x: Any) -> str:
    """A YAML value's kind in words: "a list", "a string", "a number"..."""
    if isinstance(x, list):
        return "a list"
    if isinstance(x, dict):
        return "a mapping"
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, (int, float)):
        return "a number"
    if isinstance(x, str):
        return "a string"
    return f"a {type(x).__name__}"


def load_yaml_text(text: str, label: str) -> tuple[dict, dict[tuple, tuple[int, int]]]:
    """A YAML mapping document as plain dicts/lists/scalars, and the (line, col), 1-based, of every key path.

    Read as PyYAML reads YAML 1.1 (what hb_mapper / hb_compile use): yes/no/on/off/true/false are booleans,
    y/n stay strings; a duplicate key or anchor is an error. Nothing is executed: ruamel's round-trip loader
    builds only mappings, sequences and scalars.

    Raises
    ------
    ConfigError
        One line naming ``label``: larger than :data:`MAX_CONFIG_BYTES`, empty, a line longer than
        :data:`MAX_LINE_CHARS`, nested deeper than :data:`MAX_FLOW_DEPTH` (flow) or :data:`MAX_BLOCK_DEPTH`
        (indentation), an integer longer than Python converts (line and column), more than :data:`MAX_CONFIG_NODES`
        nodes (estimated from the text first, then counted with aliases expanded), more than
        :data:`MAX_EXPANDED_CHARS` of text with aliases expanded, not YAML (with line and column), not a mapping.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{label}: larger than {MAX_CONFIG_BYTES >> 10} kB; not a conversion config")
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise ConfigError(f"{label}: empty config (no YAML content)")
    depth, items = _flow_scan(text)
    if depth > MAX_FLOW_DEPTH:
        raise ConfigError(f"{label}: YAML nested more than {MAX_FLOW_DEPTH} levels deep; not a conversion config")
    line = _too_deep(text, MAX_BLOCK_DEPTH)
    if line:
        raise ConfigError(f"{label}: YAML nested more than {MAX_BLOCK_DEPTH} levels deep (line {line}); not a "
                          "conversion config")
    lines = 0
    for n, ln in enumerate(text.splitlines(), 1):
        if len(ln) > MAX_LINE_CHARS:
            raise ConfigError(f"{label}: line {n} is longer than {MAX_LINE_CHARS} characters; not a conversion config")
        lines += bool(ln.strip()) and not ln.lstrip().startswith("#")
    if items + lines > MAX_CONFIG_NODES:
        raise ConfigError(f"{label}: more than {MAX_CONFIG_NODES} YAML nodes (lines and flow items); "
                          "not a conversion config")
    yaml = YAML(typ="rt", pure=True)
    yaml.Resolver = _PyYAMLResolver
    yaml.version = (1, 1)  # hb_mapper / hb_compile read with PyYAML: YAML 1.1 (yes/no/on/off are booleans)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            doc = yaml.load(text)
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{label}: not valid YAML{where}: {_one_line(e.problem or e.context or 'parse error')}") \
            from None
    except RecursionError:
        raise ConfigError(f"{label}: YAML nested too deeply to read; not a conversion config") from None
    except ValueError as e:
        if "integer string conversion" in str(e):
            raise (_long_integer(text, label) or ConfigError(
                f"{label}: not valid YAML: an integer with more digits than Python reads ({_int_limit()})")) from None
        raise ConfigError(f"{label}: not valid YAML ({e.__class__.__name__}: {_one_line(str(e))})") from None
    except (YAMLError, TypeError) as e:
        raise ConfigError(f"{label}: not valid YAML ({e.__class__.__name__}: {_one_line(str(e))})") from None
    for w in caught:
        if issubclass(w.category, ReusedAnchorWarning):
            lines = re.findall(r"line (\d+), column (\d+)", str(w.message))
            anchor = re.search(r"duplicate anchor (\S+)", str(w.message))
            where = f" at line {lines[-1][0]}, column {lines[-1][1]}" if lines else ""
            raise ConfigError(f"{label}: not valid YAML{where}: duplicate anchor {anchor.group(1) if anchor else ''} "
                              "(PyYAML, which hb_mapper/hb_compile read the config with, refuses it)")
    if doc is None:
        raise ConfigError(f"{label}: empty config (no YAML content)")
    if not isinstance(doc, dict):
        raise ConfigError(f"{label}: not a conversion config (top level is {_type_name(doc)}, expected a mapping "
                          "with model_parameters, input_parameters, ...)")
    w = _Walker(label)
    try:
        data = w.walk(doc, ())
    except RecursionError:
        raise ConfigError(f"{label}: YAML nested too deeply") from None
    return data, w.positions
