"""Where a stage's parameters live, priced on a copy engine: the seam for cache decisions.

Before a task computes, its layers' parameters must be on the device; after it, some
may go back to the host. A :class:`Residency` answers both in simulated time on one copy
engine per stage (a queue of host-device copies that runs alongside compute), and counts
hits, misses and bytes. Two implementations follow the runtime's policies:

- :class:`Resident`: the stage's whole slice stays on the device (gpipe, pipedream,
  sequential), no copies. Also stands in for csp's context cache when no cache model is
  plugged in: a cache large enough that every use hits.
- :class:`SynchronousSwap`: VPipe (``swap_parameters``): a task's layers are fetched on
  demand right before it runs and written back around the update, the stage waiting on
  each copy, as :mod:`naspipe.scheduling.policies.vpipe` documents.

The context manager's cache (issue 9) plugs in here: any object with these methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from naspipe.scheduling.task import Kind, Task
from naspipe.sim.costs import CostModel


@dataclass
class CopyStats:
    hits: int = 0
    misses: int = 0
    in_bytes: float = 0.0
    out_bytes: float = 0.0
    wait_s: float = 0.0

    @property
    def hit_rate(self) -> float:
        uses = self.hits + self.misses
        return self.hits / uses if uses else 1.0


class Residency(Protocol):
    stats: CopyStats

    def acquire(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        """When ``task``'s parameters are on the device (>= ``now``)."""

    def release(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        """When the stage may start its next task after ``task`` ended at ``now``."""


class Resident:
    """Every layer of the stage stays on the device: each use is a hit, nothing is copied."""

    def __init__(self) -> None:
        self.stats = CopyStats()

    def acquire(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        self.stats.hits += len(layers)
        return now

    def release(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        return now


class SynchronousSwap:
    """VPipe: fetch a task's layers right before it runs, write back around the update; the stage waits."""

    def __init__(self, costs: CostModel, trainable: frozenset[int]) -> None:
        self.stats = CopyStats()
        self.costs, self.trainable = costs, trainable

    def _bytes(self, layers: tuple[int, ...], per_param: int) -> float:
        return sum(self.costs.param_bytes(lid) for lid in layers if lid in self.trainable) * per_param

    def acquire(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        self.stats.misses += len(layers)
        # parameters; at the update also the optimizer state and the subnet's stashed gradient
        per_param = 1 if task.kind is not Kind.UPDATE else 2 + self.costs.optimizer_states
        return self._copy(self._bytes(layers, per_param), now, inbound=True)

    def release(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        if task.kind is Kind.FORWARD:
            return now  # unchanged parameters are dropped, not copied back
        per_param = 1 if task.kind is Kind.BACKWARD else 1 + self.costs.optimizer_states  # gradient / new state
        return self._copy(self._bytes(layers, per_param), now, inbound=False)

    def _copy(self, nbytes: float, now: float, inbound: bool) -> float:
        if inbound:
            self.stats.in_bytes += nbytes
        else:
            self.stats.out_bytes += nbytes
        seconds = 0.0 if self.costs.free_io else self.costs.hardware.copy_s(nbytes)
        self.stats.wait_s += seconds
        return now + seconds
