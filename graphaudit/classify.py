"""Turn an :class:`~graphaudit.lineage.Alignment` into :class:`Change` records with pattern names."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter

import onnx

from .lineage import Alignment, Region, WrapperDiff
from .stage import PARAM_KINDS
from .toolchains.ops import DEQUANTIZE_OPS, QUANTIZE_OPS, is_fixed_point, is_table_lookup, norm_domain, op_class
from .toolchains.patterns import KNOWN_PATTERNS

__all__ = ["Change", "CHANGE_KINDS", "classify", "coverage", "Coverage"]

#: Change kinds, in the order reports list them.
CHANGE_KINDS = ("fused", "replaced", "modified", "inserted", "removed", "unmatched", "kept")

#: Regions larger than this (a + b nodes) with no known pattern are reported as unmatched.
MAX_EXPLAINED_REGION = 12


@dataclass(slots=True)
class Change:
    """One change between stage a and stage b.

    Attributes
    ----------
    kind : str
        One of :data:`CHANGE_KINDS`.
    a_nodes, b_nodes : list of str
        Node ids in stage a and stage b.
    tensors : list of str
        Boundary tensors of stage a (inputs then outputs), or the wrapped tensor.
    pattern : str
        E.g. ``"Conv+BatchNormalization -> Conv"``, ``"QuantizeLinear/DequantizeLinear pair"``.
    confidence : float
        In [0, 1].
    evidence : str
        Why (which names, attributes, weights).
    """

    kind: str
    a_nodes: list[str]
    b_nodes: list[str]
    tensors: list[str] = field(default_factory=list)
    pattern: str = ""
    confidence: float = 1.0
    evidence: str = ""


def _ops(stage, ids) -> list[str]:
    return [stage.nodes[i].op_type for i in ids]


def _pattern(al: Alignment, r: Region) -> str:
    a_ops = [op for op in _ops(al.a, r.a_nodes) if op != "Constant"]
    b_ops = [op for op in _ops(al.b, r.b_nodes) if op != "Constant"]
    return f"{'+'.join(a_ops) or '(none)'} -> {'+'.join(b_ops) or '(none)'}"


def _param_diff(al: Alignment, na, nb) -> list[str]:
    """Weight slots whose content differs between two matched nodes (looking through no wrapper)."""
    diffs = []
    tensors_a, tensors_b = al.a.tensors, al.b.tensors
    for i, (xa, xb) in enumerate(zip(na.inputs, nb.inputs)):
        if not xa or not xb:
            continue
        ta = tensors_a[xa]
        if ta.kind not in PARAM_KINDS:
            continue
        tb = tensors_b[xb]
        if tb.kind not in PARAM_KINDS:
            continue
        if ta.shape != tb.shape or ta.dtype != tb.dtype:
            diffs.append(f"input {i} {xa!r}: {ta.dtype}{list(ta.shape or ())} -> {tb.dtype}{list(tb.shape or ())}")
            continue
        da, db = ta.digest(), tb.digest()
        if da and db and da != db:
            diffs.append(f"input {i} {xa!r}: weight values differ")
    extra = (len(nb.inputs) - nb.inputs.count("")) - (len(na.inputs) - na.inputs.count(""))  # non-empty inputs
    if extra > 0:
        diffs.append(f"{extra} more input(s) in b")
    return diffs


@lru_cache(maxsize=None)
def _schema_defaults(op_type: str, domain: str) -> dict:
    """Default attribute values from the ONNX operator schema (latest opset), ``{}`` for custom ops."""
    try:
        schema = onnx.defs.get_schema(op_type, domain=domain)
    except onnx.defs.SchemaError:
        return {}
    out = {}
    for name, attr in schema.attributes.items():
        if attr.default_value is not None and attr.default_value.type:
            v = onnx.helper.get_attribute_value(attr.default_value)
            out[name] = v.decode() if isinstance(v, bytes) else v
    return out


def _attr_diff(na, nb) -> list[str]:
    """Attributes that differ, treating an omitted attribute as its ONNX schema default.

    The schema is read only when one node sets an attribute the other omits: the first read builds onnx's operator
    registry (7 MB of RSS, onnx 1.23), which nodes setting the same attributes never need."""
    keys_a, keys_b = set(na.attributes), set(nb.attributes)
    defaults = _schema_defaults(na.op_type, norm_domain(na.domain)) if keys_a != keys_b else {}
    keys = sorted(keys_a | keys_b)
    diffs = []
    for k in keys:
        va, vb = na.attributes.get(k, defaults.get(k)), nb.attributes.get(k, defaults.get(k))
        if va != vb:
            diffs.append(f"{k}: {na.attributes.get(k)!r} -> {nb.attributes.get(k)!r}")
    return diffs


def _fixed_point_confidence(al: Alignment, a_core: list[str], b_core: list[str]) -> float | None:
    """Confidence of a region that turned float ops into one fixed-point op of Horizon's quantized stage:
    1.0 when the fixed-point op computes the region's first op (HzSQuantizedConv for Conv(+Relu, +Add), an
    HzSElementwise op for Add/Mul) or is a table lookup (HzLut) of one unary op; None for other regions."""
    if len(b_core) != 1 or not is_fixed_point(al.b.nodes[b_core[0]]):
        return None
    nb = al.b.nodes[b_core[0]]
    first = al.a.nodes[a_core[0]]
    if op_class(nb) == op_class(first):
        return 1.0
    if is_table_lookup(nb) and len(a_core) == 1:
        return 1.0
    return 0.8


def _classify_region(al: Alignment, r: Region) -> Change:
    a_core = [n for n in r.a_nodes if al.a.nodes[n].op_type != "Constant"]
    b_core = [n for n in r.b_nodes if al.b.nodes[n].op_type != "Constant"]
    ins = set(r.inputs)
    tensors = r.inputs + [t for t in r.outputs if t not in ins]
    if not a_core and not b_core:
        # weight-holding Constant nodes only
        if r.a_nodes and not r.b_nodes:
            outs = [o for n in r.a_nodes for o in al.a.nodes[n].outputs[:1] if o]
            if all(o in al.a_to_b for o in outs):
                return Change("kept", r.a_nodes, [], outs, "Constant -> initializer", 1.0,
                              "weight moved from a Constant node to an initializer")
            return Change("removed", r.a_nodes, [], outs, "unused Constant removed", 0.9, "no consumer in b")
        if r.b_nodes and not r.a_nodes:
            return Change("inserted", [], r.b_nodes, [], "Constant inserted", 0.9, "")
        return Change("kept", r.a_nodes, r.b_nodes, [], "Constant", 1.0, "")
    if len(a_core) == 1 and len(b_core) == 1:
        na, nb = al.a.nodes[a_core[0]], al.b.nodes[b_core[0]]
        if na.op_type == nb.op_type and na.domain == nb.domain:
            conf, ev = al.node_confidence.get(na.id, (0.8, "same position between matched tensors"))
            diffs = _attr_diff(na, nb) + _param_diff(al, na, nb)
            if diffs:
                return Change("modified", r.a_nodes, r.b_nodes, tensors, f"{na.op_type} modified", conf,
                              "; ".join(diffs))
            return Change("kept", r.a_nodes, r.b_nodes, tensors, na.op_type, conf, ev)
        kind, pattern = "replaced", _pattern(al, r)
        fixed = _fixed_point_confidence(al, a_core, b_core)
        return Change(kind, r.a_nodes, r.b_nodes, tensors, pattern,
                      fixed or KNOWN_PATTERNS.get(pattern, 0.9 if op_class(na) == op_class(nb) else 0.6),
                      f"{na.op_type} {na.name or na.id!r} -> {nb.op_type} {nb.name or nb.id!r}")
    if not b_core:
        return _removed(al, r, a_core, tensors)
    if not a_core:
        return Change("inserted", r.a_nodes, r.b_nodes, r.b_inputs + r.b_outputs, f"{'+'.join(_ops(al.b, b_core))} inserted",
                      0.8, "no counterpart in a")
    size, pattern = len(a_core) + len(b_core), _pattern(al, r)
    known = KNOWN_PATTERNS.get(pattern) or _fixed_point_confidence(al, a_core, b_core)
    if known is None and size > MAX_EXPLAINED_REGION:
        top = lambda st, ids: ", ".join(f"{op} x{c}" for op, c in Counter(_ops(st, ids)).most_common(4))  # noqa: E731
        return Change("unmatched", r.a_nodes, r.b_nodes, tensors, f"{len(a_core)} nodes -> {len(b_core)} nodes", 0.0,
                      f"could not align {len(a_core)} nodes of a ({top(al.a, a_core)}) with {len(b_core)} nodes of b "
                      f"({top(al.b, b_core)}) between {len(r.inputs)} input and {len(r.outputs)} output tensors")
    if len(b_core) == 1:
        survivor = al.b.nodes[b_core[0]].op_type
        conf = known if known is not None else (0.85 if survivor in _ops(al.a, a_core) else 0.6)
        names = ", ".join(f"{al.a.nodes[n].op_type} {al.a.nodes[n].name or n!r}" for n in a_core)
        return Change("fused", r.a_nodes, r.b_nodes, tensors, pattern, conf,
                      f"{names} -> {survivor} {al.b.nodes[b_core[0]].name or b_core[0]!r}")
    return Change("replaced", r.a_nodes, r.b_nodes, tensors, pattern, known if known is not None else 0.6,
                  f"{len(a_core)} node(s) rewritten as {len(b_core)}")


def _removed(al: Alignment, r: Region, a_core: list[str], tensors: list[str]) -> Change:
    a_ops = _ops(al.a, a_core)
    t = al.absorbed_output(a_core[0]) if len(a_core) == 1 else None
    if t is not None:
        out_b = al.absorbed[t][0]
        qdq = list(al.view_b.chain(out_b))
        return Change("fused", r.a_nodes, qdq, [t], f"{a_ops[0]} absorbed into quantization",
                      KNOWN_PATTERNS.get(f"{a_ops[0]} absorbed into quantization", 0.9),
                      f"{a_ops[0]} {al.a.nodes[a_core[0]].name or a_core[0]!r}: its output {t!r} is the "
                      f"DequantizeLinear output {out_b!r} in b; {t!r} in b holds the pre-activation")
    outs = [o for n in a_core for o in al.a.nodes[n].outputs if o]
    if outs and all(al.a_to_b.get(o) and all(al.tensor_map[x].kind == "folded" for x in al.a_to_b[o])
                    for o in r.outputs if o in outs):
        return Change("removed", r.a_nodes, [], tensors, f"constant folding ({'+'.join(a_ops)} -> initializer)", 0.95,
                      "the computed value is a weight in b")
    if all(not al.a.tensors[o].consumers and not al.a.tensors[o].is_graph_output for o in outs):
        return Change("removed", r.a_nodes, [], tensors, f"dead code ({'+'.join(a_ops)})", 0.9, "outputs unused")
    return Change("unmatched", r.a_nodes, [], tensors, f"{'+'.join(a_ops)} -> (none)", 0.0,
                  f"no counterpart found in b for {len(a_core)} node(s); outputs {outs[:3]} have no matching tensor")


def _wrapper_pattern(stage, ids: list[str], root: str | None) -> str:
    ops = [stage.nodes[i].op_type for i in ids]
    weight = root is not None and stage.tensors[root].is_param
    kinds = set(ops)
    if "QuantizeLinear" in kinds and "DequantizeLinear" in kinds:
        base = "QuantizeLinear/DequantizeLinear pair"
    elif kinds == {"DequantizeLinear"}:
        base = "DequantizeLinear (quantized weight)" if weight else "DequantizeLinear"
    elif kinds == {"HzCalibration"}:
        return f"HzCalibration({'weight' if weight else 'activation'})"
    elif kinds == {"Transpose"}:
        base = "layout Transpose"
    else:
        base = "+".join(dict.fromkeys(ops))
    if weight and "weight" not in base:
        base += " on weight"
    return base


def _wrapper_units(stage, ids: list[str]) -> list[list[str]]:
    """Split inserted wrapper nodes into logical units: a QuantizeLinear with the DequantizeLinear
    nodes reading it is one unit; any other wrapper node is a unit of its own."""
    chosen = set(ids)
    units: list[list[str]] = []
    taken: set[str] = set()
    for nid in ids:
        if nid in taken:
            continue
        node = stage.nodes[nid]
        unit = [nid]
        if node.op_type in QUANTIZE_OPS:
            for cid, _k in stage.tensors[node.outputs[0]].consumers:
                if cid in chosen and cid not in taken and stage.nodes[cid].op_type in DEQUANTIZE_OPS:
                    unit.append(cid)
        taken.update(unit)
        units.append(unit)
    return units


def has_fixed_point(stage) -> bool:
    """Whether any node of ``stage`` (a :class:`graphaudit.stage.StageGraph`) is one of Horizon's fixed-point ops
    (:func:`graphaudit.toolchains.ops.is_fixed_point`): the quantized stage. Computed once per stage."""
    found = stage.__dict__.get("_has_fixed_point")
    if found is None:
        found = stage.__dict__["_has_fixed_point"] = any(is_fixed_point(n) for n in stage.nodes.values())
    return found


def _classify_wrappers(al: Alignment, w: WrapperDiff) -> list[Change]:
    out: list[Change] = []
    tensor = [w.a_root] if w.a_root else ([w.b_root] if w.b_root else [])
    for xa, xb in w.kept:
        na, nb = al.a.nodes[xa], al.b.nodes[xb]
        if na.op_type != nb.op_type:  # e.g. HzPreprocess -> HzSQuantizedPreprocess in the fixed-point stage
            out.append(Change("replaced", [xa], [xb], tensor, f"{na.op_type} -> {nb.op_type}", 1.0,
                              f"{nb.op_type} {nb.name or xb!r} computes {na.op_type} {na.name or xa!r} on the same value"))
            continue
        diffs = _attr_diff(na, nb) + _param_diff(al, na, nb)
        kind = "modified" if diffs else "kept"
        out.append(Change(kind, [xa], [xb], tensor, na.op_type if not diffs else f"{na.op_type} modified",
                          0.95, "; ".join(diffs) or "same wrapper on the same value"))
    for unit in _wrapper_units(al.b, w.inserted):
        pattern = _wrapper_pattern(al.b, unit, w.b_root)
        where = f"on {w.a_root!r}" if w.a_root else f"on {w.b_root!r} (no counterpart in a)"
        out.append(Change("inserted", [], unit, tensor, pattern, 1.0 if w.a_root else 0.8,
                          f"{'/'.join(al.b.nodes[n].op_type for n in unit)} {where}"))
    if w.removed:
        ops = {al.a.nodes[x].op_type for x in w.removed}
        pattern = f"{'+'.join(sorted(ops))} removed"
        if ops == {"HzCalibration"} and has_fixed_point(al.b):
            out.append(Change("removed", list(w.removed), [], tensor, "HzCalibration consumed by fixed point", 1.0,
                              f"the fake quantization of {w.a_root!r} became the integer scales of the fixed-point ops"))
            return out
        out.append(Change("removed", list(w.removed), [], tensor, pattern, 1.0,
                          f"{len(w.removed)} node(s) on {w.a_root!r} no longer in b"))
    return out


def classify(al: Alignment) -> list[Change]:
    """Classify every region and wrapper difference of an alignment.

    Returns a list of :class:`Change` covering every top-level node of both stages exactly once.
    """
    changes = [_classify_region(al, r) for r in al.regions]
    for w in al.wrappers:
        changes.extend(_classify_wrappers(al, w))
    return changes


#: A node's parent id (None in the main graph; node ids are never empty), read at C speed.
_PARENT = attrgetter("parent")


@dataclass
class Coverage:
    """Share of nodes of each stage that ended aligned (kept/modified/fused/replaced) or classified
    (inserted/removed with a pattern); the rest are unmatched, with reasons in the changes."""

    a_total: int
    a_accounted: int
    b_total: int
    b_accounted: int
    unmatched: list[Change]

    @property
    def a_ratio(self) -> float:
        return self.a_accounted / self.a_total if self.a_total else 1.0

    @property
    def b_ratio(self) -> float:
        return self.b_accounted / self.b_total if self.b_total else 1.0


def coverage(al: Alignment, changes: list[Change]) -> Coverage:
    """Coverage of an alignment's changes over the nodes of both stages (subgraph nodes count with their parent)."""
    acc_a: set[str] = set()
    acc_b: set[str] = set()
    for c in changes:
        if c.kind != "unmatched":
            acc_a.update(c.a_nodes)
            acc_b.update(c.b_nodes)

    def count(stage, acc):
        nodes = stage.nodes
        if not any(map(_PARENT, nodes.values())):  # no subgraph (the common case): each node is its own top node
            return len(nodes), len(acc & nodes.keys())
        total = ok = 0
        for n in nodes.values():
            total += 1
            top = n
            while top.parent is not None:
                top = stage.nodes[top.parent]
            ok += top.id in acc
        return total, ok

    at, aok = count(al.a, acc_a)
    bt, bok = count(al.b, acc_b)
    return Coverage(at, aok, bt, bok, [c for c in changes if c.kind == "unmatched"])
