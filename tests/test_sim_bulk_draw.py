"""The subnet stream's bulk draw (issue 22, fourth pass): exactly what ``randrange`` per choice draws.

Every simulated and trained run reads the stream, so the draw must give the same subnets and leave the
generator where the draw per choice leaves it (the next block starts there); the golden dump
(``benchmarks/sim_golden.py``) and the runtime's golden runs check it through whole runs too.
"""

from __future__ import annotations

import random

import pytest

from naspipe.seeding import derive_seed
from naspipe.subnet import Subnet, SubnetStream


@pytest.mark.parametrize(("candidates", "seed"), [(1, 0), (2, 1), (5, 2), (24, 3), (256, 4), (1000, 5), (2**32 - 1, 6)])
def test_the_bulk_draw_is_randrange_in_order(candidates, seed):
    """Every block alike: the stream draws the generator's outputs in bulk; the same subnets as
    ``randrange`` per choice, whichever block is read first, and the same generator state after."""
    blocks = 7
    stream = SubnetStream([candidates] * blocks, seed)
    assert stream._alike
    rng = random.Random(derive_seed(seed, "subnets"))
    expected = [Subnet(tuple(rng.randrange(candidates) for _ in range(blocks))) for _ in range(3 * stream.BLOCK)]
    reads = [2 * stream.BLOCK + 5, 3, stream.BLOCK + 1, 3 * stream.BLOCK - 1]
    assert [stream[i] for i in reads] == [expected[i] for i in reads]  # the last block first: walks to it
    in_order = SubnetStream([candidates] * blocks, seed)
    assert [in_order[i] for i in range(len(expected))] == expected
    assert stream._starts[3] == rng.getstate()  # where block 2's draw left the generator: block 3's start


def test_blocks_unalike_or_too_wide_take_the_draw_per_choice():
    assert not SubnetStream([3, 4], 0)._alike
    assert not SubnetStream([2**32 + 1] * 3, 0)._alike
    rng = random.Random(derive_seed(0, "subnets"))
    wide = SubnetStream([2**32 + 1] * 3, 0)
    assert wide[1] == [Subnet(tuple(rng.randrange(2**32 + 1) for _ in range(3))) for _ in range(2)][1]
