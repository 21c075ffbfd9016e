"""Which tensor pairs of a transition are compared when there are too many to capture them all."""

from __future__ import annotations

import random
from typing import Any

__all__ = ["MAX_COMPARED_TENSORS", "thin"]

#: Tensor pairs compared per transition. Each is an extra output of both sessions (onnxruntime's session set-up grows
#: with them) and an error accumulator; real stage models have a few thousand (a 5,000-node graph about 2,500). A
#: longer list (a 50,000-node graph) keeps every graph output and a uniform sample of the others, in order, so the
#: first divergence is found to within a few nodes; ``tensors_compared`` reports the number kept.
MAX_COMPARED_TENSORS = 5000


def thin(pairs: list[Any], cap: int = MAX_COMPARED_TENSORS) -> list[Any]:
    """At most ``cap`` of ``pairs`` (``TensorError`` sorted by order; ``is_output`` read): every graph output, then a
    uniform sample of the others (a generator seeded with the list's length, so a run repeats), in their order. A
    fixed stride would alias with a graph made of repeated blocks (3 pairs per block thinned at a stride of 1.5 never
    keeps the third pair of a block, e.g. every Add output of a Conv-Relu-Add chain), and so would one pick per
    stratum when strata are shorter than two pairs. Fewer than ``cap`` pairs come back as given."""
    if len(pairs) <= cap:
        return pairs
    outs = [te for te in pairs if te.is_output]
    rest = [te for te in pairs if not te.is_output]
    room = max(cap - len(outs), 0)
    keep = {id(rest[k]) for k in random.Random(len(pairs)).sample(range(len(rest)), room)}
    return [te for te in pairs if te.is_output or id(te) in keep]
