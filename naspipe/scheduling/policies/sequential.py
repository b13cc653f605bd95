"""The sequential reference: one subnet at a time, in stream order.

Update semantics: for i = 0, 1, ...: forward SN_i on batch i, backward, update the layers
it used; the next subnet enters only after the previous one's last update on stage 0. This
is what the exploration algorithm assumes (paper section 2) and what every other policy is
judged against. Over D stages it runs the same per-layer computations as on one stage, so
its results do not depend on D either. Windowed shared layers follow
:mod:`naspipe.scheduling.windows` (the executor applies it; one subnet at a time already
reads and accumulates in subnet order).
"""

from __future__ import annotations

from collections import deque

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import PolicyOptions, StagePolicy
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, Task


class Sequential(StagePolicy):
    name = "sequential"
    label = "sequential reference"
    report_order = 0
    uses_cache = True  # for a supernet too large for one device; still bitwise the reference
    causal = True
    windowed_shared = True  # one subnet at a time: the window rule's order holds by itself

    def __init__(self, stage: int, plan: PipelinePlan, options: PolicyOptions) -> None:
        super().__init__(stage, plan, options)
        self._ready: deque[Task] = deque()

    def may_admit(self, subnet: int) -> bool:
        return self.inflight == 0

    def next_task(self) -> Task | None:
        return self._ready.popleft() if self._ready else None

    def _on_forward(self, subnet: int) -> None:
        self._ready.append(self.task(FORWARD, subnet))

    def _on_backward(self, subnet: int) -> None:
        self._ready.append(self.task(BACKWARD, subnet))

    def _on_completed(self, task: Task) -> None:
        if task.kind is BACKWARD:
            self._ready.append(self.task(UPDATE, task.subnet))
