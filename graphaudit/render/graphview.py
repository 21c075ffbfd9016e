"""Keeping a drawn graph readable: neighbourhoods around focus nodes and collapsed chains of kept nodes."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

import networkx as nx

__all__ = ["neighbourhood", "collapse_chains"]


def neighbourhood(g: nx.DiGraph, seeds: Iterable[str], radius: int, limit: int | None = None) -> set[str]:
    """Nodes within ``radius`` hops of the seeds, edges taken in either direction (breadth-first).

    Seeds are taken in the order given; each seed's ball is added ring by ring, and the
    search stops as soon as ``limit`` nodes are collected, so earlier seeds keep their whole
    neighbourhood and later ones get what is left.

    Parameters
    ----------
    g : networkx.DiGraph
    seeds : iterable of node keys of ``g`` (unknown keys are ignored)
    radius : int
        Hops, >= 0.
    limit : int, optional
        Largest number of nodes returned.

    Returns
    -------
    set of str
    """
    out: set[str] = set()
    full = lambda: limit is not None and len(out) >= limit  # noqa: E731
    for s in seeds:
        if full():
            break
        if s not in g or s in out:
            continue
        out.add(s)
        ring, seen = [s], {s}
        for _ in range(radius):
            nxt = []
            for u in ring:
                for v in (*g.predecessors(u), *g.successors(u)):
                    if v in seen:
                        continue
                    seen.add(v)
                    nxt.append(v)
                    if v not in out:
                        if full():
                            return out
                        out.add(v)
            ring = nxt
    return out


def collapse_chains(g: nx.DiGraph, collapsible: set[str], min_len: int = 3) -> tuple[nx.DiGraph, int]:
    """Replace every maximal chain of ``min_len`` or more collapsible nodes by one node.

    A chain is a path ``v1 -> v2 -> ... -> vk`` whose nodes are all in ``collapsible`` and whose inner
    links are the only edges of their endpoints (``vi`` has one successor ``vi+1``, which has one
    predecessor ``vi``). The chain node gets the key ``"chain:<v1>"`` and the attributes
    ``kind="collapsed"``, ``members`` (the keys, in order), ``sequence`` (their ``op`` attributes, in
    order) and ``ops`` (a Counter of them); the edges into ``v1`` and out of ``vk`` are moved onto it with
    their attributes.

    Returns
    -------
    (networkx.DiGraph, int)
        A new graph, and how many nodes went into chain nodes.
    """
    def linked(u: str, v: str) -> bool:
        return g.out_degree(u) == 1 and g.in_degree(v) == 1

    def continues(u: str) -> bool:  # u extends the chain of its single predecessor
        if g.in_degree(u) != 1:
            return False
        p = next(iter(g.predecessors(u)))
        return p in collapsible and linked(p, u)

    heads = [u for u in g if u in collapsible and not continues(u)]
    chains = []
    for h in heads:
        chain = [h]
        while g.out_degree(chain[-1]) == 1:
            nxt = next(iter(g.successors(chain[-1])))
            if nxt not in collapsible or not linked(chain[-1], nxt) or nxt in chain:
                break
            chain.append(nxt)
        if len(chain) >= min_len:
            chains.append(chain)
    if not chains:
        return g, 0
    out = g.copy()
    owner = {m: f"chain:{chain[0]}" for chain in chains for m in chain}
    for chain in chains:
        key = owner[chain[0]]
        seq = [g.nodes[m].get("op", "?") for m in chain]
        out.add_node(key, kind="collapsed", members=list(chain), sequence=seq, ops=Counter(seq))
    for chain in chains:
        key = owner[chain[0]]
        for p in g.predecessors(chain[0]):
            out.add_edge(owner.get(p, p), key, **g.edges[p, chain[0]])
        for s in g.successors(chain[-1]):
            out.add_edge(key, owner.get(s, s), **g.edges[chain[-1], s])
    out.remove_nodes_from(owner)
    return out, len(owner)
