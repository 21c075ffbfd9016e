"""The state of a two-stage matching: root tensor pairs, node pairs, absorbed activations and the worklist."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..stage import StageGraph
from .view import StageView

__all__ = ["BASES", "TensorMatch", "Matching"]

#: How a tensor pair was established, strongest first: ``io`` (graph input/output), ``name`` (same name,
#: checked against the producers), ``hash`` (same weight content), ``structure`` (propagation through matched
#: nodes, rewrites and signatures).
BASES = ("io", "name", "hash", "structure")


@dataclass(slots=True)
class TensorMatch:
    """Correspondence of one tensor of stage b to one tensor of stage a.

    ``kind`` is ``"exact"`` (same value expected), ``"quantized"`` (fake-quantized copy),
    ``"converted"`` (Cast), ``"layout"`` (transposed), ``"preprocessed"`` (behind HzPreprocess),
    ``"folded"`` (computed in a, a weight in b), ``"absorbed"`` (a's value is b's wrapper output
    after an activation absorbed into quantization), ``"rescaled"`` (behind an HzCalibration that also
    multiplies each channel: not the same value). ``confidence`` is in [0, 1];
    ``evidence`` says why; ``basis`` how the pair was established (one of :data:`BASES`).
    """

    a: str
    b: str
    kind: str
    confidence: float
    evidence: str
    basis: str = "structure"


@dataclass
class Matching:
    """Mutable state of a two-stage matching (roots only, plus node pairs)."""

    va: StageView
    vb: StageView
    a2b: dict[str, str] = field(default_factory=dict)
    b2a: dict[str, str] = field(default_factory=dict)
    info: dict[str, tuple[str, float, str, str]] = field(default_factory=dict)  # a root -> (kind, conf, evidence, basis)
    absorbed: dict[str, tuple[str, str]] = field(default_factory=dict)  # a tensor -> (b wrapper output, activation node id)
    node_a2b: dict[str, str] = field(default_factory=dict)
    node_b2a: dict[str, str] = field(default_factory=dict)
    node_conf: dict[str, tuple[float, str]] = field(default_factory=dict)  # a node -> (confidence, evidence)
    worklist: list[tuple[str, str]] = field(default_factory=list)
    #: b root -> b wrapper outputs below it that hold an absorbed activation's value (the index of ``absorbed`` that
    #: forward propagation looks up per pair; kept by :meth:`absorb`).
    absorbed_below: dict[str, list[str]] = field(default_factory=dict)

    @property
    def a(self) -> StageGraph:
        return self.va.stage

    @property
    def b(self) -> StageGraph:
        return self.vb.stage

    def map(self, ra: str, rb: str, kind: str, conf: float, evidence: str, basis: str = "structure") -> bool:
        """Record root ``ra`` (stage a) <-> root ``rb`` (stage b); False if either is taken."""
        if ra in self.a2b or rb in self.b2a or ra in self.absorbed:
            return False
        self.a2b[ra], self.b2a[rb] = rb, ra
        self.info[ra] = (kind, conf, evidence, basis)
        if not self.a.tensors[ra].is_param:
            self.worklist.append((ra, rb))
        return True

    def absorb(self, ra: str, out_b: str, act: str) -> None:
        """Record that a's tensor ``ra`` (output of activation node ``act``) is b's wrapper output ``out_b``."""
        if ra in self.absorbed:  # recorded again: the index forgets the earlier output, as ``absorbed`` does
            old = self.absorbed[ra][0]
            self.absorbed_below[self.root_b(old)].remove(old)
        self.absorbed[ra] = (out_b, act)
        self.absorbed_below.setdefault(self.root_b(out_b), []).append(out_b)

    def pair_nodes(self, na: str, nb: str, conf: float, evidence: str) -> None:
        self.node_a2b[na], self.node_b2a[nb] = nb, na
        self.node_conf[na] = (conf, evidence)

    def root_a(self, name: str) -> str:
        """Root of tensor ``name`` of stage a (itself when no wrapper produces it)."""
        return self.va.root.get(name, name)

    def root_b(self, name: str) -> str:
        """Root of tensor ``name`` of stage b (itself when no wrapper produces it)."""
        return self.vb.root.get(name, name)
