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
