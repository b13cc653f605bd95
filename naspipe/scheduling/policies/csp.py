"""Causal synchronous parallel: NASPipe's scheduler (paper section 4.2, Algorithm 2).

Update semantics: every subnet's forward, recompute and backward of a layer see exactly the
writes of all earlier subnets that use that layer and none of the later ones, so training
is bitwise the same as the sequential reference for any number of stages. A subnet's
update (``U``) is applied right after its backward and is what unblocks later users.

Decision: an update first, then a backward, then the lowest-id forward whose layers on
this stage are at the version it needs. Readiness is incremental: each registered subnet
keeps the count of its layers that still wait for an earlier writer, and a write only
decrements the count of that layer's next user (see :class:`VersionTable`).
"""

from __future__ import annotations

import heapq

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import PolicyOptions, StagePolicy
from naspipe.scheduling.task import Kind, Task
from naspipe.scheduling.versions import VersionTable


class CSP(StagePolicy):
    name = "csp"

    def __init__(self, stage: int, plan: PipelinePlan, options: PolicyOptions) -> None:
        super().__init__(stage, plan, options)
        self.versions = VersionTable()
        self._blocked: dict[int, int] = {}  # registered subnet -> layers not yet at its version
        self._waiting: set[int] = set()  # arrived forwards still blocked
        self._ready_f: list[int] = []
        self._ready_b: list[int] = []
        self._ready_u: list[int] = []
        self._queues = ((self._ready_u, Kind.UPDATE), (self._ready_b, Kind.BACKWARD), (self._ready_f, Kind.FORWARD))

    def may_admit(self, subnet: int) -> bool:
        return self.inflight < self.options.max_inflight

    def next_task(self) -> Task | None:
        for heap, kind in self._queues:  # updates, then backwards, then the lowest ready forward
            if heap:
                return Task(kind, heapq.heappop(heap), self.stage)
        return None

    def _on_register(self, subnet: int) -> None:
        self._blocked[subnet] = self.versions.register(subnet, self.plan.trainable_layers(subnet, self.stage))

    def _on_forward(self, subnet: int) -> None:
        if self._blocked[subnet]:
            self._waiting.add(subnet)
        else:
            heapq.heappush(self._ready_f, subnet)

    def _on_backward(self, subnet: int) -> None:
        heapq.heappush(self._ready_b, subnet)

    def _on_completed(self, task: Task) -> None:
        if task.kind is Kind.BACKWARD:
            heapq.heappush(self._ready_u, task.subnet)
        elif task.kind is Kind.UPDATE:
            self._write(task.subnet)

    def _write(self, subnet: int) -> None:
        blocked = self._blocked
        for unblocked in self.versions.write_all(subnet, self.plan.trainable_layers(subnet, self.stage)):
            blocked[unblocked] -= 1
            if not blocked[unblocked] and unblocked in self._waiting:
                self._waiting.remove(unblocked)
                heapq.heappush(self._ready_f, unblocked)
        del blocked[subnet]
