"""Composition of pairwise alignments along a pipeline of N stages."""

from __future__ import annotations

from dataclasses import dataclass

from ..stage import StageGraph
from .align import Alignment, align

__all__ = ["Lineage", "align_chain"]


@dataclass
class Lineage:
    """Alignments of consecutive stages and their composition.

    ``alignments[i]`` aligns ``stages[i]`` (a) with ``stages[i + 1]`` (b).
    """

    stages: list[StageGraph]
    alignments: list[Alignment]

    def origin(self, stage_index: int, tensor: str) -> list[tuple[int, str, str]]:
        """Trace a tensor of stage ``stage_index`` back towards stage 0.

        Returns a list of (stage index, tensor name, match kind), starting with the given
        tensor (kind ``"self"``) and stopping where a stage has no counterpart.
        """
        path = [(stage_index, tensor, "self")]
        cur = tensor
        for i in range(stage_index - 1, -1, -1):
            tm = self.alignments[i].tensor_map.get(cur)
            if tm is None:
                break
            path.append((i, tm.a, tm.kind))
            cur = tm.a
        return path

    def descendants(self, tensor: str, stage_index: int = 0) -> list[tuple[int, str | None]]:
        """Follow a tensor of stage ``stage_index`` forward: its value's tensor in each later stage (or None)."""
        path: list[tuple[int, str | None]] = [(stage_index, tensor)]
        cur: str | None = tensor
        for i in range(stage_index, len(self.alignments)):
            cur = self.alignments[i].b_for(cur) if cur is not None else None
            path.append((i + 1, cur))
        return path

    def node_origin(self, stage_index: int, node_id: str) -> list[str]:
        """Node ids of stage 0 whose region leads to ``node_id`` of stage ``stage_index``."""
        return self._map_nodes({node_id}, range(stage_index - 1, -1, -1), forward=False)

    def node_descendants(self, stage_index: int, node_id: str, target: int) -> list[str]:
        """Node ids of stage ``target`` (> ``stage_index``) that ``node_id`` of stage ``stage_index`` became
        (through regions and kept wrappers); empty when it was removed."""
        return self._map_nodes({node_id}, range(stage_index, target), forward=True)

    def _map_nodes(self, current: set[str], transitions: range, forward: bool) -> list[str]:
        for i in transitions:
            al = self.alignments[i]
            nxt: set[str] = set()
            for r in al.regions:
                src, dst = (r.a_nodes, r.b_nodes) if forward else (r.b_nodes, r.a_nodes)
                if current & set(src):
                    nxt |= set(dst)
            for w in al.wrappers:
                for xa, xb in w.kept:
                    if (xa if forward else xb) in current:
                        nxt.add(xb if forward else xa)
            current = nxt
        return sorted(current)


def align_chain(stages: list[StageGraph], check_related: bool = True) -> Lineage:
    """Align every pair of consecutive stages (pipeline order) and return the :class:`Lineage`.

    Raises
    ------
    StagesUnrelatedError
        When two consecutive stages share no structure (see :func:`align`).
    """
    return Lineage(stages, [align(a, b, check_related) for a, b in zip(stages, stages[1:])])
