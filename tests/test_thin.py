"""The thinning of a long list of tensor pairs (graphaudit.numeric.thin): counts, order, no aliasing with blocks."""

from __future__ import annotations

from dataclasses import dataclass

from graphaudit.numeric.thin import thin


@dataclass
class _Pair:
    order: int
    block_pos: int
    is_output: bool = False


def _blocks(n_blocks: int, per_block: int = 3) -> list[_Pair]:
    return [_Pair(b * per_block + p, p) for b in range(n_blocks) for p in range(per_block)]


def test_short_lists_come_back_whole():
    pairs = _blocks(10)
    assert thin(pairs, cap=30) is pairs


def test_every_position_of_a_repeated_block_is_kept_in_proportion():
    # 2,500 blocks of 3 pairs (a Conv, a Relu absorbed by quantization, an Add per block) thinned to 5,000: a fixed
    # stride of 7,500 / 5,000 = 1.5 keeps positions 0 and 1 of every block and never position 2.
    pairs = _blocks(2500)
    kept = thin(pairs, cap=5000)
    assert len(kept) == 5000
    counts = [sum(1 for p in kept if p.block_pos == k) for k in range(3)]
    # each position is a third of the pairs: kept in proportion 5000/3 each, within a few percent
    assert all(abs(c - 5000 / 3) < 0.1 * 5000 / 3 for c in counts), counts


def test_outputs_kept_order_kept_and_gaps_bounded():
    pairs = _blocks(20000, per_block=1)
    pairs[-1].is_output = True
    pairs[7].is_output = True
    kept = thin(pairs, cap=1000)
    assert len(kept) == 1000
    assert pairs[-1] in kept and pairs[7] in kept
    orders = [p.order for p in kept]
    assert orders == sorted(orders)
    # 998 of 19,998 drawn uniformly: the mean gap is ~20 positions; the largest of 998 exponential-like gaps is
    # about 20 * ln(998) ~ 140, and a gap of 20 * 15 = 300 has probability ~998 * e^-15 ~ 3e-4
    assert max(b - a for a, b in zip(orders, orders[1:])) < 300


def test_the_same_list_thins_the_same_way():
    a, b = thin(_blocks(4000), cap=900), thin(_blocks(4000), cap=900)
    assert [p.order for p in a] == [p.order for p in b]
