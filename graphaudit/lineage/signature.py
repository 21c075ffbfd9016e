"""Structural signatures: pair the nodes whose neighbourhood is unique on both sides when propagation stalls."""

from __future__ import annotations

from collections import defaultdict

from ..digests import blake2b
from ..stage import NodeInfo
from ..toolchains.ops import op_class
from .matching import Matching
from .propagate import input_ok, try_pair
from .rewrites import KEY_ATTRS
from .view import StageView

__all__ = ["seed_signatures"]


def _base_signature(view: StageView, n: NodeInfo) -> str:
    """Op class, shapes of weights of rank >= 2 (biases and BN folds change 1-D ones), key attributes."""
    st = view.stage
    params = []
    for x in n.inputs:
        if x and view.is_param_root(x):
            shape = st.tensors[view.root.get(x, x)].shape
            if shape is not None and len(shape) >= 2:
                params.append(shape)
        elif x:
            params.append("~")
    attrs = tuple((k, repr(n.attributes.get(k))) for k in KEY_ATTRS if k in n.attributes)
    return f"{op_class(n)}|{params}|{attrs}"


def _signatures(view: StageView, skip: set[str], rounds: int = 2) -> dict[str, str]:
    """Weisfeiler-Lehman style signatures of the core nodes not in ``skip``.

    Round 0 is op class, weight shapes and key attributes; each round hashes in the sorted
    signatures of data predecessors and successors (looking through wrappers).
    """
    st = view.stage
    nodes = [n for n in view.core_nodes() if n.id not in skip and not (n.op_type == "Constant")]
    sig = {n.id: _base_signature(view, n) for n in nodes}
    for _ in range(rounds):
        new = {}
        for n in nodes:
            preds = []
            for x in n.inputs:
                if x and not view.is_param_root(x):
                    p = st.producer(view.root.get(x, x))
                    preds.append(sig.get(p.id, p.op_type) if p is not None else "input")
            succs = []
            for x in n.outputs:
                for cid, _i, _t in view.consumers.get(x, []):
                    succs.append(sig.get(cid, st.nodes[cid].op_type))
            h = blake2b(digest_size=12)
            h.update(sig[n.id].encode())
            h.update(repr(preds).encode())
            h.update(repr(sorted(succs)).encode())
            new[n.id] = h.hexdigest()
        sig = new
    return sig


def seed_signatures(m: Matching) -> int:
    """Match core nodes whose signature is unique among unmatched nodes on both sides."""
    added = 0
    left_a = any(n.id not in m.node_a2b and n.op_type != "Constant" for n in m.va.core_nodes())
    left_b = any(n.id not in m.node_b2a and n.op_type != "Constant" for n in m.vb.core_nodes())
    if not (left_a and left_b):
        return 0
    for rounds in (2, 1, 0):
        sa = _signatures(m.va, set(m.node_a2b), rounds)
        sb = _signatures(m.vb, set(m.node_b2a), rounds)
        inv_a: dict[str, list[str]] = defaultdict(list)
        inv_b: dict[str, list[str]] = defaultdict(list)
        for k, s in sa.items():
            inv_a[s].append(k)
        for k, s in sb.items():
            inv_b[s].append(k)
        for s, la in inv_a.items():
            lb = inv_b.get(s, [])
            if len(la) != 1 or len(lb) != 1 or la[0] in m.node_a2b or lb[0] in m.node_b2a:
                continue
            na, nb = m.a.nodes[la[0]], m.b.nodes[lb[0]]
            ok, _ = input_ok(m, na, nb)
            if not ok:
                continue
            try_pair(m, na, nb, 0.7 + 0.1 * rounds,
                      f"unique structural signature ({na.op_type}, weight shapes, attributes, {rounds}-hop neighbourhood)")
            added += 1
        if added:
            return added
    return added
