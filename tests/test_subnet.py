"""The subnet stream: a pure function of the seed, random access in any order, bounded memory."""

from __future__ import annotations

import random

from naspipe.seeding import derive_seed
from naspipe.subnet import Subnet, SubnetStream

CHOICES = (4, 24, 24, 3)


def drawn_in_order(count: int, seed: int) -> list[Subnet]:
    """The definition: one generator seeded by (seed, "subnets"), drawn in stream order."""
    rng = random.Random(derive_seed(seed, "subnets"))
    return [Subnet(tuple(rng.randrange(n) for n in CHOICES)) for _ in range(count)]


def test_the_stream_is_the_in_order_draw_whatever_order_it_is_read_in():
    count = 5 * SubnetStream.BLOCK + 17
    expected = drawn_in_order(count, seed=7)
    order = list(range(count))
    random.Random(1).shuffle(order)
    stream = SubnetStream(CHOICES, 7)
    assert [stream[i] for i in order] == [expected[i] for i in order]
    assert [s for _, s in SubnetStream(CHOICES, 7).iterate(0, count)] == expected


def test_memory_is_bounded_however_far_the_stream_is_read():
    stream = SubnetStream(CHOICES, 0)
    far = (SubnetStream.CACHED_BLOCKS + 20) * SubnetStream.BLOCK
    for i in range(0, far, 97):
        stream[i]
    assert len(stream._blocks) == SubnetStream.CACHED_BLOCKS
    assert stream[3] == drawn_in_order(4, 0)[3]  # an evicted early block is redrawn identically


def test_seeds_give_different_streams():
    assert [SubnetStream(CHOICES, 0)[i] for i in range(50)] != [SubnetStream(CHOICES, 1)[i] for i in range(50)]


def test_the_stream_draws_what_randrange_draws_for_any_number_of_candidates():
    """The stream inlines randrange(n) (k-bit draws until one is below n): the same values and
    the same generator state after them, for one candidate, powers of two and the sizes between."""
    choices = (1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 24, 31, 33, 1000)
    rng = random.Random(derive_seed(3, "subnets"))
    expected = [Subnet(tuple(rng.randrange(n) for n in choices)) for _ in range(2 * SubnetStream.BLOCK + 1)]
    stream = SubnetStream(choices, 3)
    assert [stream[i] for i in range(len(expected))] == expected
