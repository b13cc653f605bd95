"""Balanced contiguous partition of a supernet's positions over pipeline stages.

A static partition assigns each position (prefix layers, choice blocks, suffix layers) to
one stage, contiguously, so that the slowest stage is as fast as possible. The cost of a
block is the mean cost of its candidates, so the partition is balanced for the average
subnet. This is the exact linear-partition problem, solved by dynamic programming in
O(D * P^2) for P positions, which is microseconds at paper scale (P = 50, D = 16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Partition:
    """``bounds[k]`` is the first position of stage ``k``; ``bounds[D]`` is the end."""

    bounds: tuple[int, ...]

    @property
    def num_stages(self) -> int:
        return len(self.bounds) - 1

    def stage_of_position(self, position: int) -> int:
        for stage in range(self.num_stages):
            if position < self.bounds[stage + 1]:
                return stage
        raise IndexError(f"position {position} is past the last stage (end {self.bounds[-1]})")

    def positions(self, stage: int) -> range:
        return range(self.bounds[stage], self.bounds[stage + 1])

    def __str__(self) -> str:
        return "|".join(str(self.bounds[k + 1] - self.bounds[k]) for k in range(self.num_stages))


def balanced_partition(costs: Sequence[float], num_stages: int) -> Partition:
    """Split ``costs`` into ``num_stages`` non-empty contiguous runs minimising the largest sum.

    Ties are broken towards earlier cuts, so the result is deterministic.
    """
    n = len(costs)
    if not 1 <= num_stages <= n:
        raise ValueError(f"cannot split {n} positions over {num_stages} stages")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + float(c))
    inf = float("inf")
    # best[k][i]: smallest max-stage cost of putting positions [0, i) on k stages.
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0.0
    for k in range(1, num_stages + 1):
        for i in range(k, n - (num_stages - k) + 1):
            for j in range(k - 1, i):
                value = max(best[k - 1][j], prefix[i] - prefix[j])
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    bounds = [n]
    for k in range(num_stages, 0, -1):
        bounds.append(cut[k][bounds[-1]])
    return Partition(tuple(reversed(bounds)))
