"""The balanced contiguous partition is optimal and deterministic."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.partition import balanced_partition


def brute_force(costs: list[float], stages: int) -> float:
    best = float("inf")
    for cuts in itertools.combinations(range(1, len(costs)), stages - 1):
        bounds = (0, *cuts, len(costs))
        best = min(best, max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


@settings(max_examples=80, deadline=None)
@given(costs=st.lists(st.integers(1, 50), min_size=1, max_size=9), stages=st.integers(1, 9))
def test_partition_is_optimal(costs, stages):
    stages = min(stages, len(costs))
    part = balanced_partition([float(c) for c in costs], stages)
    assert part.num_stages == stages and part.bounds[0] == 0 and part.bounds[-1] == len(costs)
    assert all(part.bounds[k] < part.bounds[k + 1] for k in range(stages))
    slowest = max(sum(costs[part.bounds[k]:part.bounds[k + 1]]) for k in range(stages))
    assert slowest == pytest.approx(brute_force([float(c) for c in costs], stages))


def test_partition_rejects_too_many_stages():
    with pytest.raises(ValueError, match="cannot split 3 positions over 4 stages"):
        balanced_partition([1.0, 1.0, 1.0], 4)


def test_uniform_partition_is_even():
    assert str(balanced_partition([1.0] * 10, 5)) == "2|2|2|2|2"


@settings(max_examples=150, deadline=None)
@given(costs=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=40), stages=st.integers(1, 16))
def test_bottleneck_partition_reaches_the_dp_optimum(costs, stages):
    from naspipe.partition import bottleneck_partition

    stages = min(stages, len(costs))
    fast = bottleneck_partition(costs, stages)
    assert fast.num_stages == stages and fast.bounds[0] == 0 and fast.bounds[-1] == len(costs)
    assert all(fast.bounds[k] < fast.bounds[k + 1] for k in range(stages))
    dp = balanced_partition(costs, stages)

    def slowest(part):
        return max(sum(costs[part.bounds[k]:part.bounds[k + 1]]) for k in range(stages))

    assert slowest(fast) == pytest.approx(slowest(dp), rel=1e-12)


def test_bottleneck_partition_respects_a_memory_cap():
    from naspipe.partition import bottleneck_partition

    costs, sizes = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [5.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert bottleneck_partition(costs, 2).bounds == (0, 3, 6)
    assert bottleneck_partition(costs, 2, sizes, cap=6.0).bounds == (0, 2, 6)  # slowest 4 instead of 3
    with pytest.raises(ValueError, match="within 4.0"):
        bottleneck_partition(costs, 2, sizes, cap=4.0)
