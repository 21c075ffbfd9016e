"""Hybrid stages: stage b of a transition with a chosen set of its changes reverted to stage a's version.

The splice units are the classified changes of the transition (:class:`graphaudit.classify.Change`): b's nodes of a
change are taken out and a's nodes of the same change are put in their place, wired to the b tensors that hold the
same values (the alignment's tensor map). Reverting an inserted wrapper (HzCalibration, a Q/DQ pair) wires its
consumers to the tensor it wrapped; reverting a fusion or a replacement puts a's original nodes back with a's
weights; reverting a modified node restores a's attributes and weights. The result is b's model (opsets, inputs,
outputs) with the same runtime requirements, so the runtime that measures b measures the hybrid.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx

from ..classify import Change
from ..errors import GraphAuditError
from ..lineage import Alignment
from ..toolchains.ops import is_fixed_point, wrapper_kind
from .backends import HORIZON_RUNTIME
from .lower import lower_model, needs_lowering
from .regions import COMPARABLE_KINDS

__all__ = ["REVERTIBLE_KINDS", "HybridError", "revertible", "build_hybrid", "hybrid_session_model", "output_noise"]

#: Change kinds a hybrid can revert. "removed" changes (a node b has no longer: Identity, Dropout, a Cast) are left:
#: their a nodes read and write tensors b has merged into one, and they do not change numbers where b is right.
REVERTIBLE_KINDS = ("fused", "inserted", "replaced", "modified")

_PREFIX = "graphaudit_revert"


class HybridError(GraphAuditError):
    """A change cannot be reverted in b (its boundary has no counterpart in b, or it lies inside a subgraph)."""


def _outer(al: Alignment, c: Change) -> tuple[list[str], list[str]]:
    """(b tensors read by the change's b nodes from outside it, b tensors written by them and read outside it or
    graph outputs); initializers and constants of b are not inputs."""
    b = al.b
    inside = set(c.b_nodes)
    ins, outs = [], []
    for nid in c.b_nodes:
        n = b.nodes[nid]
        for x in n.inputs:
            t = b.tensors.get(x) if x else None
            if t is None or t.is_param or (t.producer is not None and t.producer in inside) or x in ins:
                continue
            ins.append(x)
        for x in n.outputs:
            t = b.tensors.get(x) if x else None
            if t is not None and (t.is_graph_output or any(cid not in inside for cid, _k in t.consumers)):
                outs.append(x)
    return ins, outs


def revertible(al: Alignment, changes: list[Change]) -> list[tuple[int, ...]]:
    """The splice units of one transition that :func:`build_hybrid` can revert, as tuples of change indices.

    A unit is a set of changes sharing b nodes (an activation absorbed into quantization is one change, the Q/DQ
    pair that now computes it another, over the same two b nodes: reverting either reverts both). A unit is
    revertible when every change in it has a kind in :data:`REVERTIBLE_KINDS`, no node lies inside a subgraph
    (Loop/If/Scan bodies), and every b tensor it writes for the rest of b has an a counterpart of a comparable kind
    (:data:`graphaudit.numeric.regions.COMPARABLE_KINDS`) that a's nodes of the change or its inputs hold.
    """
    owner: dict[str, int] = {}
    groups: dict[int, list[int]] = {}
    for j, c in enumerate(changes):
        if c.kind == "kept" or not c.b_nodes:
            continue
        hit = sorted({owner[n] for n in c.b_nodes if n in owner})
        root = hit[0] if hit else j
        members = [j] + [m for h in hit for m in groups.pop(h, [])]
        groups.setdefault(root, []).extend(members)
        for m in members:
            for n in changes[m].b_nodes:
                owner[n] = root
    units = []
    for members in groups.values():
        unit = tuple(sorted(set(members)))
        try:
            for j in unit:
                c = changes[j]
                if c.kind not in REVERTIBLE_KINDS or _in_subgraph(al, c):
                    raise HybridError(c.pattern)
                _splice(al, c, j, None, None)
        except HybridError:
            continue
        units.append(unit)
    return sorted(units)


def _in_subgraph(al: Alignment, c: Change) -> bool:
    """Whether a node of the change lies in a Loop/If/Scan body (not spliced: its index is not the top graph's)."""
    return any(al.a.nodes[n].parent is not None for n in c.a_nodes) or any(
        al.b.nodes[n].parent is not None for n in c.b_nodes)


def _closure(changes: list[Change], revert: Iterable[int]) -> list[int]:
    """``revert`` with every change that shares b nodes with one in it (transitively), the non-inserted changes
    first: a fusion's a nodes restore what an inserted wrapper over the same b nodes also stands for."""
    chosen = set(revert)
    grew = True
    while grew:
        nodes = {n for j in chosen for n in changes[j].b_nodes}
        more = {j for j, c in enumerate(changes) if j not in chosen and c.kind != "kept" and nodes & set(c.b_nodes)}
        chosen |= more
        grew = bool(more)
    return sorted(chosen, key=lambda j: (changes[j].kind == "inserted", j))


def _a_value_source(al: Alignment, c: Change, b_ins: list[str]) -> dict[str, str]:
    """a tensor -> the b tensor b's change reads for it (the value the rest of b hands the change)."""
    src: dict[str, str] = {}
    for x in b_ins:
        tm = al.tensor_map.get(x)
        if tm is not None and tm.kind in COMPARABLE_KINDS | {"preprocessed"}:
            src.setdefault(tm.a, x)
    return src


def _splice(al: Alignment, c: Change, j: int, model_a: onnx.ModelProto | None, inits_a: dict | None
            ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """a's nodes of change ``j`` renamed into b's tensor names, and the initializers they need (None models: only
    check that the splice closes). Raises HybridError when it does not."""
    a = al.a
    b_ins, b_outs = _outer(al, c)
    if c.kind == "inserted":
        return _bypass(al, c, j, b_outs, inits_a)
    src = _a_value_source(al, c, b_ins)
    a_inside = set(c.a_nodes)
    produced_in_a = {o: nid for nid in c.a_nodes for o in a.nodes[nid].outputs if o}
    rename: dict[str, str] = {}
    extra_nodes: list[onnx.NodeProto] = []
    extra_inits: list[onnx.TensorProto] = []
    prefix = f"{_PREFIX}{j}/"
    _float_boundary(al, c, b_ins, b_outs)
    for x in b_outs:  # every value the rest of b reads from the change must come from a's side
        tm = al.tensor_map.get(x)
        if tm is None or tm.kind not in COMPARABLE_KINDS:
            raise HybridError(f"{al.b.path}: {x!r} written by {c.pattern} has no counterpart in {al.a.name}")
        if tm.a in produced_in_a and tm.a not in rename:
            rename[tm.a] = x
        elif tm.a in produced_in_a or tm.a in src:
            extra_nodes.append(onnx.helper.make_node("Identity", [rename.get(tm.a) or src[tm.a]], [x],
                                                     name=f"{prefix}identity_{len(extra_nodes)}"))
        elif a.tensors.get(tm.a) is not None and a.tensors[tm.a].is_param:
            if inits_a is not None:
                if tm.a not in inits_a:
                    raise HybridError(f"{al.a.path}: weight {tm.a!r} is not an initializer")
                extra_inits.append(_renamed(inits_a[tm.a], x))
        else:
            raise HybridError(f"{al.b.path}: {x!r} written by {c.pattern} is not computed by its {al.a.name} nodes")
    if model_a is None:
        for nid in c.a_nodes:  # every a input from outside the change must be held by b
            for x in a.nodes[nid].inputs:
                t = a.tensors.get(x) if x else None
                if t is None or t.is_param or (t.producer is not None and t.producer in a_inside):
                    continue
                held = src.get(x) or al.b_for(x)
                if held is None:
                    raise HybridError(f"{al.a.path}: {x!r} read by {c.pattern} has no counterpart in {al.b.name}")
                _same_shape(al, x, held, c)
        for x in b_outs:
            tm = al.tensor_map[x]
            if tm.a in produced_in_a:
                _same_shape(al, tm.a, x, c)
        return [], []
    nodes = []
    for nid in c.a_nodes:
        proto = model_a.graph.node[a.nodes[nid].index]
        n = onnx.NodeProto()
        n.CopyFrom(proto)
        n.name = prefix + (proto.name or nid)
        for k, x in enumerate(n.input):
            if not x:
                continue
            t = a.tensors.get(x)
            if x in rename:
                n.input[k] = rename[x]
            elif t is not None and t.producer is not None and t.producer in a_inside:
                n.input[k] = prefix + x
            elif x in inits_a:
                n.input[k] = prefix + x
                extra_inits.append(_renamed(inits_a[x], prefix + x))
            else:
                n.input[k] = src.get(x) or al.b_for(x)
        for k, x in enumerate(n.output):
            if x:
                n.output[k] = rename.get(x, prefix + x)
        nodes.append(n)
    return nodes + extra_nodes, extra_inits


def _float_boundary(al: Alignment, c: Change, b_ins: list[str], b_outs: list[str]) -> None:
    """Raise HybridError when a tensor crossing the change's boundary is a fixed-point value in b: written by one of
    Horizon's fixed-point ops (HzSQuantized*, HzLut, ...) that the change reads, or read by one outside the change.
    Such a tensor holds integers in NHWC layout (docs/HORIZON.md, the quantized stage), so a's float NCHW nodes can
    neither read it nor stand in for its producer. The quantized stage's file has no value_info for most of its
    tensors, so the dtype check of :func:`_bypass` and the shape check of :func:`_same_shape` cannot see this."""
    b = al.b
    inside = set(c.b_nodes)
    for x in b_ins:
        t = b.tensors.get(x)
        if t is not None and t.producer is not None and is_fixed_point(b.nodes[t.producer]):
            raise HybridError(f"{b.path}: {c.pattern} reads {x!r}, a fixed-point value of "
                              f"{b.nodes[t.producer].op_type}, which {al.a.name}'s float nodes cannot read")
    for x in b_outs:
        t = b.tensors.get(x)
        for cid, _slot in (t.consumers if t is not None else ()):
            if cid not in inside and is_fixed_point(b.nodes[cid]):
                raise HybridError(f"{b.path}: {x!r} written by {c.pattern} is read as fixed-point integers by "
                                  f"{b.nodes[cid].op_type}, which {al.a.name}'s float value cannot stand in for")


def _bypass(al: Alignment, c: Change, j: int, b_outs: list[str], inits_a: dict | None
            ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """An inserted wrapper chain (HzCalibration, QuantizeLinear/DequantizeLinear, Cast) taken out of b: what the
    rest of b read from it becomes the value it wrapped, b's own tensor (b's float weight for a weight wrapper: the
    toolchain may have rescaled it, so a's copy is not used) — except a weight b stores quantized (an integer
    initializer under a DequantizeLinear), which only a holds in float: a's weight is put back."""
    b = al.b
    inside = set(c.b_nodes)
    roots = []
    for nid in c.b_nodes:
        n = b.nodes[nid]
        x = n.inputs[0] if n.inputs else ""
        t = b.tensors.get(x) if x else None
        if t is not None and (t.producer is None or t.producer not in inside) and x not in roots:
            roots.append(x)
    if len(roots) != 1 or not b_outs:
        raise HybridError(f"{b.path}: the inserted {c.pattern} does not wrap one tensor")
    layout = next((b.nodes[nid] for nid in c.b_nodes if wrapper_kind(b, b.nodes[nid]) == "layout"), None)
    if layout is not None:  # hb_mapper's NCHW -> NHWC Transpose before the fixed-point graph: its readers need NHWC
        raise HybridError(f"{b.path}: the inserted {c.pattern} ({layout.name or layout.op_type}) changes the layout "
                          f"the rest of b reads; taken out alone it would hand them {roots[0]!r} in the other layout")
    root = b.tensors[roots[0]]
    for x in b_outs:  # the rest of b reads an int32 where the wrapper computed it (Horizon's quantized stage)
        t = b.tensors.get(x)
        if not root.is_param and root.dtype and t is not None and t.dtype and t.dtype != root.dtype:
            raise HybridError(f"{b.path}: the inserted {c.pattern} turns {roots[0]!r} ({root.dtype}) into {x!r} "
                              f"({t.dtype}), which the rest of b reads")
    if not (root.is_param and str(root.dtype).upper().startswith(("INT", "UINT"))):
        return [onnx.helper.make_node("Identity", [roots[0]], [x], name=f"{_PREFIX}{j}/bypass_{k}")
                for k, x in enumerate(b_outs)], []
    inits = []
    for x in b_outs:
        tm = al.tensor_map.get(x)
        w = al.a.tensors.get(tm.a) if tm is not None else None
        if w is None or not w.is_param or (inits_a is not None and tm.a not in inits_a):
            raise HybridError(f"{b.path}: the quantized weight {roots[0]!r} has no float weight in {al.a.name}")
        if inits_a is not None:
            inits.append(_renamed(inits_a[tm.a], x))
    return [], inits


def _same_shape(al: Alignment, a_name: str, b_name: str, c: Change) -> None:
    """Raise HybridError when both tensors have known static shapes and they differ (b may hold a value in another
    layout or rank, e.g. a Gemm's input that hb_mapper turned into a 4-D Conv input)."""
    sa, sb = al.a.tensors[a_name].shape, al.b.tensors[b_name].shape
    static = all(isinstance(d, int) and d > 0 for d in (sa or ())) and all(
        isinstance(d, int) and d > 0 for d in (sb or ()))
    if sa and sb and static and tuple(sa) != tuple(sb):
        raise HybridError(f"{al.b.path}: {c.pattern}: {b_name!r} has shape {list(sb)} where {al.a.name} has "
                          f"{list(sa)} for {a_name!r}")


def _renamed(t: onnx.TensorProto, name: str) -> onnx.TensorProto:
    out = onnx.TensorProto()
    out.CopyFrom(t)
    out.name = name
    return out


def _topological(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Kahn's order of ``nodes`` given the tensors ``available`` before them (graph inputs, initializers); nodes
    whose inputs never become available keep their place at the end (the runtime names them)."""
    waiting: dict[str, list[int]] = {}
    missing = []
    for k, n in enumerate(nodes):
        need = {x for x in n.input if x and x not in available}
        missing.append(len(need))
        for x in need:
            waiting.setdefault(x, []).append(k)
    ready = [k for k, m in enumerate(missing) if m == 0]
    order: list[int] = []
    done: set[int] = set()
    while ready:
        k = ready.pop()
        order.append(k)
        done.add(k)
        for x in nodes[k].output:
            for w in waiting.pop(x, []):
                missing[w] -= 1
                if missing[w] == 0:
                    ready.append(w)
    order.sort()  # stable: file order where the dependencies allow (re-checked below)
    placed: set[str] = set(available)
    out: list[onnx.NodeProto] = []
    pending = [nodes[k] for k in order]
    while pending:
        rest = []
        for n in pending:
            if all(not x or x in placed for x in n.input):
                out.append(n)
                placed.update(o for o in n.output if o)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            break
        pending = rest
    return out + pending + [nodes[k] for k in range(len(nodes)) if k not in done]


def build_hybrid(al: Alignment, changes: list[Change], revert: Iterable[int], model_a: onnx.ModelProto,
                 model_b: onnx.ModelProto) -> onnx.ModelProto:
    """Stage b's model with the changes ``revert`` (indices into ``changes``) reverted to stage a's version.

    Parameters
    ----------
    al : Alignment
        The transition a -> b.
    changes : list of Change
        Its classified changes (:func:`graphaudit.classify.classify`).
    revert : iterable of int
        Which changes to revert (with the rest of their :func:`revertible` unit); each must be revertible. Empty:
        a copy of b.
    model_a, model_b : onnx.ModelProto
        The two stage models with their weights (``onnx.load`` of ``al.a.path`` / ``al.b.path``); not modified.

    Returns
    -------
    onnx.ModelProto
        b's graph inputs, outputs, opsets and IR version; b's nodes of the reverted changes replaced by a's
        (renamed ``graphaudit_revert<j>/...``), nodes in topological order. a's opsets are added where b lacks
        one of the domains a's nodes use.

    Raises
    ------
    HybridError
        A change in ``revert`` cannot be reverted (see :func:`revertible`).
    """
    revert = _closure(changes, revert)
    inits_a = {t.name: t for t in model_a.graph.initializer}
    for n in model_a.graph.node:  # Constant nodes of a are weights too (values the change may read)
        if n.op_type == "Constant" and len(n.output) == 1 and n.attribute and n.attribute[0].name == "value":
            inits_a.setdefault(n.output[0], _renamed(n.attribute[0].t, n.output[0]))
    drop: set[int] = set()
    new_nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    for j in revert:
        c = changes[j]
        if c.kind not in REVERTIBLE_KINDS or _in_subgraph(al, c):
            raise HybridError(f"{al.b.path}: change {j} ({c.kind} {c.pattern}) cannot be reverted")
        if c.b_nodes and {al.b.nodes[nid].index for nid in c.b_nodes} <= drop:
            continue  # a wrapper over nodes a fusion of the same unit already put back
        _splice(al, c, j, None, None)
        nodes, inits = _splice(al, c, j, model_a, inits_a)
        drop.update(al.b.nodes[nid].index for nid in c.b_nodes)
        new_nodes += nodes
        new_inits += inits
    hybrid = onnx.ModelProto()
    hybrid.CopyFrom(model_b)
    g = hybrid.graph
    kept = [n for k, n in enumerate(model_b.graph.node) if k not in drop]
    available = {i.name for i in g.input} | {t.name for t in g.initializer} | {t.name for t in new_inits}
    ordered = _topological(kept + new_nodes, available)
    del g.node[:]
    g.node.extend(ordered)
    g.initializer.extend(new_inits)
    used = {n.domain or "" for n in ordered}
    have = {o.domain or "" for o in hybrid.opset_import}
    for o in model_a.opset_import:
        if (o.domain or "") in used and (o.domain or "") not in have:
            hybrid.opset_import.append(o)
    _prune_value_info(g)
    return hybrid


def _prune_value_info(g: onnx.GraphProto) -> None:
    """Drop value_info entries of tensors the hybrid no longer computes (stale shapes would mislead the runtime)."""
    produced = {o for n in g.node for o in n.output if o}
    keep = [v for v in g.value_info if v.name in produced]
    del g.value_info[:]
    g.value_info.extend(keep)


def output_noise(ref: list[np.ndarray], got: list[np.ndarray]) -> tuple[float, float]:
    """(sum of squared differences, sum of squared reference values) over the graph outputs of one sample, in
    float64: the noise and signal energy of SQNR = 10 log10(signal / noise) dB."""
    noise = sum(float(np.sum((np.asarray(g, np.float64) - np.asarray(r, np.float64)) ** 2)) for r, g in zip(ref, got))
    signal = sum(float(np.sum(np.asarray(r, np.float64) ** 2)) for r in ref)
    return noise, signal



def hybrid_session_model(model: onnx.ModelProto, path, runtime: str) -> onnx.ModelProto:
    """The model a session of ``runtime`` runs: Horizon's runtime takes the file as the toolchain writes it; stock
    onnxruntime takes Horizon's custom ops lowered (:func:`graphaudit.numeric.lower.lower_model`; ``path`` names
    the stage in errors).

    Raises
    ------
    LoweringError
        A custom op without public semantics (the fixed-point ops).
    """
    if runtime != HORIZON_RUNTIME and needs_lowering(model):
        return lower_model(model, path).model
    return model
