"""Tensor and node correspondence between two stages: anchors, then structural propagation.

The algorithm (README.md, "How alignment works"):

1. Anchors: graph inputs and outputs (by name, else by position), same-name tensors whose
   producers are compatible, weights with the same name or the same content hash.
2. Wrappers (QuantizeLinear/DequantizeLinear, HzCalibration, Cast, Identity, layout Transpose,
   HzPreprocess) are looked through: tensors are matched by their *root*.
3. Propagation: from matched tensors, consumers with the same op, the same input slot and
   consistent other inputs are matched, and their outputs with them (forward); producers of
   matched tensors with the same op are matched, and their inputs (backward).
4. When propagation stalls, nodes whose structural signature (op, weight shapes, key
   attributes, neighbourhood) is unique among the unmatched nodes of both stages are matched
   and propagation resumes. Nothing is guessed without a recorded confidence.

This module seeds the anchors (step 1) and runs the steps; the state is a :class:`~.matching.Matching`,
propagation is in :mod:`.propagate`, signatures in :mod:`.signature`, and the recognition of toolchain rewrites
(folds, fused followers, decompositions) that seeding and propagation share in :mod:`.rewrites`.
"""

from __future__ import annotations

from collections import defaultdict
from operator import methodcaller

from ..stage import PARAM_KINDS
from ..toolchains.ops import (ABSORBABLE_ACTIVATIONS, DEQUANTIZED_VALUE_OPS, FIXED_POINT_TENSOR_SUFFIX, WEIGHTED_OPS,
                              op_class)
from .matching import Matching
from .propagate import propagate
from .rewrites import fusion_keeps_name, node_changed, skip_fused_followers
from .signature import seed_signatures
from .view import StageView

__all__ = ["match_stages"]


def _seed_io(m: Matching) -> None:
    a, b = m.a, m.b
    for names_a, names_b, what in ((a.inputs, b.inputs, "graph input"), (a.outputs, b.outputs, "graph output")):
        in_b = set(names_b)
        common = [n for n in names_a if n in in_b]
        for n in common:
            m.map(m.root_a(n), m.root_b(n), "exact", 1.0, f"{what} {n!r} in both", "io")
        in_common = set(common)
        rest_a = [n for n in names_a if n not in in_common]
        rest_b = [n for n in names_b if n not in in_common]
        if rest_a and len(rest_a) == len(rest_b):
            for na, nb in zip(rest_a, rest_b):
                sa, sb = a.tensors[na].shape, b.tensors[nb].shape
                if sa is None or sb is None or len(sa) == len(sb):
                    m.map(m.root_a(na), m.root_b(nb), "exact", 0.8, f"{what} at the same position ({na!r} -> {nb!r})",
                          "io")


def _quantize_output(m: Matching, rb: str) -> str | None:
    """Last tensor of the first QuantizeLinear->DequantizeLinear path hanging below root ``rb`` in b."""
    for wid in m.vb.tree.get(rb, []):
        node = m.b.nodes[wid]
        if m.vb.wrappers[wid] == "quantize" and node.op_type in DEQUANTIZED_VALUE_OPS:
            return node.outputs[0]
    return None


def _name_pairs(m: Matching) -> list[tuple[str, str, str]]:
    """(a tensor, b tensor, kind) for tensors named alike: the same name, or b's name with the fixed-point
    suffix (``X_quantized`` in Horizon's quantized stage holds the integer form of ``X``)."""
    a_tensors, b_tensors = m.a.tensors, m.b.tensors
    suffix, k = FIXED_POINT_TENSOR_SUFFIX, len(FIXED_POINT_TENSOR_SUFFIX)
    # the candidates picked at C speed (a set intersection, filters), then b's table order kept by one filter: a
    # Python loop over every name of b (450,000 on a 200,000-node QDQ stage) took 0.3-0.4 s
    named = b_tensors.keys() & a_tensors.keys()
    named.update(n for n in filter(methodcaller("endswith", suffix), b_tensors) if n[:-k] in a_tensors)
    return [(name, name, "exact") if name in a_tensors else (name[:-k], name, "quantized")
            for name in filter(named.__contains__, b_tensors)]


#: Tensor kinds never paired by name: weights (paired by name or content in _seed_params) and names nothing defines.
_NOT_SEEDED = PARAM_KINDS | {"missing"}


def _seed_names(m: Matching) -> None:
    """Pair tensors named alike, unless the producers say the value moved.

    A name is evidence, not proof: when b's producer was changed by a fold (other weights, more inputs) and
    a's tensor feeds a foldable follower that b no longer shows (BatchNormalization, an elementwise op with a
    constant, an activation), b's tensor holds the value after that follower, and is paired with it
    (hb_mapper keeps the pre-BatchNormalization name on the Conv that absorbed it; docs/HORIZON.md).
    """
    a, b = m.a, m.b
    a_tensors, b_tensors, a_root, b_root, a2b, b2a = a.tensors, b.tensors, m.va.root, m.vb.root, m.a2b, m.b2a
    for an, bn, kind in _name_pairs(m):
        if a_tensors[an].kind in _NOT_SEEDED or b_tensors[bn].kind in _NOT_SEEDED:
            continue
        ra, rb = a_root.get(an, an), b_root.get(bn, bn)
        if ra in a2b or rb in b2a:
            continue
        pa, pb = a.producer(ra), b.producer(rb)
        if pa is None or pb is None:
            if pa is None and pb is None and a.tensors[ra].kind == "input" and b.tensors[rb].kind == "input":
                m.map(ra, rb, kind, 1.0, f"same name {bn!r}", "name")
            continue  # a value_info entry nothing computes is no tensor to pair
        if op_class(pa) == op_class(pb):
            absorbs = op_class(pb) in WEIGHTED_OPS and node_changed(m, pa, pb)
            target, skipped = skip_fused_followers(m, ra, rb) if absorbs else (ra, 0)
            if skipped:
                m.map(target, rb, kind, 0.9, f"{bn!r} in {b.name} is produced by a {pb.op_type} that absorbed "
                      f"{skipped} follower(s) of {an!r}: it holds the value of {target!r}", "structure")
            else:
                m.map(ra, rb, kind, 1.0, f"same name {bn!r}, both produced by {pa.op_type}", "name")
            continue
        q_out = _quantize_output(m, rb) if pa.op_type in ABSORBABLE_ACTIVATIONS else None
        if q_out is not None and pa.inputs and pa.inputs[0] and kind == "exact":
            # onnxruntime's QDQ quantizer renames the producer's output to the activation's name: b's name-alike is the pre-activation; a's value is the dequantized output.
            pre = m.root_a(pa.inputs[0])
            m.absorb(ra, q_out, pa.id)
            m.worklist.append((ra, rb))
            m.map(pre, rb, "exact", 0.9,
                  f"{bn!r} in {b.name} is produced by {pb.op_type}: the {pa.op_type} was absorbed into quantization, "
                  f"so it holds the pre-activation {pre!r}", "structure")
            continue
        why = fusion_keeps_name(m, pa, pb)
        if why:
            target, skipped = (skip_fused_followers(m, ra, rb) if why == "fused" and op_class(pb) in WEIGHTED_OPS
                               else (ra, 0))
            if skipped:  # e.g. ConvTranspose+Add+BatchNormalization -> ConvTranspose named like the Add output
                m.map(target, rb, kind, 0.85, f"{bn!r} in {b.name} is produced by a {pb.op_type} that absorbed "
                      f"{pa.op_type} and {skipped} follower(s) of {an!r}: it holds the value of {target!r}", "structure")
            else:
                m.map(ra, rb, kind, 0.9, f"same name {bn!r}, produced by {pa.op_type} in {a.name} and {pb.op_type} "
                      f"in {b.name} (fusion keeps the name)", "name")


def _seed_params(m: Matching) -> None:
    a, b = m.a, m.b
    b_get = b.tensors.get
    weights_a, weights_b = a.weight_names(), b.weight_names()
    for name in weights_a:
        tb = b_get(name)
        if tb is not None and tb.kind in PARAM_KINDS:  # TensorInfo.is_param, inline
            m.map(name, name, "exact", 1.0, f"weight {name!r} in both", "name")
    a2b, b2a = m.a2b, m.b2a
    _match_params_by_hash(m, [n for n in weights_a if n not in a2b], [n for n in weights_b if n not in b2a])


def _match_params_by_hash(m: Matching, cand_a: list[str], cand_b: list[str]) -> None:
    """Map unmatched weights whose (dtype, shape, content hash) is unique on both sides."""
    groups_a: dict[tuple, list[str]] = defaultdict(list)
    groups_b: dict[tuple, list[str]] = {}  # only the keys a has (a QDQ stage's zero points have none)
    a_tensors, b_tensors = m.a.tensors, m.b.tensors
    for n in cand_a:
        t = a_tensors[n]
        groups_a[(t.dtype, t.shape)].append(n)
    for n in cand_b:
        t = b_tensors[n]
        key = (t.dtype, t.shape)
        if key in groups_a:
            lst = groups_b.get(key)
            if lst is None:
                groups_b[key] = [n]
            else:
                lst.append(n)
    for key, names_a in groups_a.items():
        names_b = groups_b.get(key)
        if not names_b:
            continue
        # the side with many more weights hashes only those whose bytes one of the other side's has (equal
        # bytes of one dtype and shape: equal digests), e.g. 100,000 quantization scales against 2 Clip bounds
        if len(names_b) > 2 * len(names_a):
            by_hash_a = _by_digest(m.a.tensors, names_a)
            by_hash_b = _by_digest(m.b.tensors, names_b, _raws(m.a.tensors, names_a))
        elif len(names_a) > 2 * len(names_b):
            by_hash_b = _by_digest(m.b.tensors, names_b)
            by_hash_a = _by_digest(m.a.tensors, names_a, _raws(m.b.tensors, names_b))
        else:
            by_hash_a, by_hash_b = _by_digest(m.a.tensors, names_a), _by_digest(m.b.tensors, names_b)
        for d, la in by_hash_a.items():
            lb = by_hash_b.get(d, [])
            if len(la) == 1 and len(lb) == 1:
                m.map(la[0], lb[0], "exact", 0.95, f"weights {la[0]!r} and {lb[0]!r} have the same content", "hash")


def _raw(t) -> bytes | None:
    """The bytes of weight ``t`` (as :meth:`TensorInfo.digest` reads them), None when unreadable."""
    try:
        return t._reader() if t._reader is not None else None
    except (OSError, ValueError):
        return None


def _raws(tensors: dict, names: list[str]) -> set[bytes]:
    """The bytes of the weights ``names`` (the readable ones)."""
    return {r for r in (_raw(tensors[n]) for n in names) if r is not None}


def _by_digest(tensors: dict, names: list[str], among: set[bytes] | None = None) -> dict[str, list[str]]:
    """Content hash -> names of the weights ``names`` (of one dtype and shape) that have it (unreadable ones left
    out); with ``among``, only the weights whose bytes are one of those."""
    out: dict[str, list[str]] = defaultdict(list)
    for n in names:
        t = tensors[n]
        if among is not None:
            raw = _raw(t)
            if raw is None or raw not in among:
                continue
        d = t.digest()
        if d:
            out[d].append(n)
    return out


def match_stages(va: StageView, vb: StageView) -> Matching:
    """Compute tensor and node correspondences between stage a (earlier) and b (later).

    Returns the :class:`Matching` (roots only; wrapper outputs are derived by the caller).
    Pure: reads the views, writes nothing.
    """
    m = Matching(va, vb)
    _seed_io(m)
    _seed_params(m)
    _seed_names(m)
    propagate(m)
    for _ in range(50):
        if not seed_signatures(m):
            break
        propagate(m)
    return m
