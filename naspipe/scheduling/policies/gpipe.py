"""GPipe: bulk synchronous parallel (BSP) with a pipeline flush per bulk (Huang et al. 2019).

NASPipe section 2.2 / Table 3 baseline "BSP", as in GPipe and torchgpipe: the subnet stream
is cut into bulks of ``B`` consecutive subnets (``bulk_size``; the config's default is
``B = D``), bulk ``b`` being subnets ``[bB, (b+1)B)``, one micro-batch each.

Update semantics: every subnet of a bulk reads the parameter version from before the bulk
(the forward, the recompute and the backward of all of them run before any update of the
bulk). Each stage runs all forwards of the bulk (in subnet order), then all backwards (in
reverse subnet order, as in GPipe's schedule: the last micro-batch's backward starts right
after its forward), then the flush: the updates ``U`` in subnet order. A layer used by two
subnets of a bulk gets two separate optimizer steps, in subnet order, each with that
subnet's own gradient (the runtime stashes each subnet's per-layer gradients after its
backward and applies them at its ``U``; gradients are never summed in ``.grad``). The next
bulk enters stage 0 only after stage 0's flush, and a stage runs no forward of bulk ``b+1``
before its own flush of bulk ``b``. So results depend on ``B`` (hence on the number of GPUs)
unless no two subnets of a bulk share a trainable layer, in which case they equal the
sequential reference.

Runtime needs (read by the stage worker): per-subnet gradient stash; activation
recomputation as configured (on by default, as in GPipe); the whole stage slice of the
supernet stays on the device (static partition, no swapping). ``max_inflight`` is ignored:
exactly one bulk is in flight.

The bulk that the stream's end cuts short is flushed when its last subnet is done; a policy
learns where the stream ends from :meth:`stream_ends_at` (the runtime calls it; without it a
stream whose length is not a multiple of ``B`` never flushes its last bulk).

Shared layers (``shared_policy``): under ``causal`` they are ordinary trainable layers here:
every subnet of a bulk reads the version from before the bulk, and each subnet's gradient gets
its own optimizer step at the flush, in subnet order. Under ``windowed`` GPipe keeps the window
rule (:mod:`naspipe.scheduling.windows`) as sequential and CSP do: each subnet reads the version
its index fixes and its gradient joins the window's sum at its update, so shared layers get one
step per window whatever the bulk (GPipe at D=1 is bitwise sequential). A bulk never waits on it:
the config requires ``shared_window`` >= the bulk, so every version a bulk reads was applied by
an earlier flush. ``frozen`` keeps them at their seeded init.
"""

from __future__ import annotations

import heapq
from typing import ClassVar

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import PolicyOptions, StagePolicy
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, Task, new_task


class GPipe(StagePolicy):
    name = "gpipe"
    label = "BSP (GPipe)"
    report_order = 4

    # What the runtime must do for this policy (the core stays free of torch).
    stash_gradients: ClassVar[bool] = True  # each subnet's gradients kept apart until its U
    stash_weights: ClassVar[bool] = False
    recompute: ClassVar[bool | None] = None  # None: as configured
    swap_parameters: ClassVar[bool] = False
    bulk_synchronous: ClassVar[bool] = True  # checkpoints and resumes must fall on bulk boundaries
    windowed_shared: ClassVar[bool] = True  # windowed shared layers: one step per window, as sequential

    def __init__(self, stage: int, plan: PipelinePlan, options: PolicyOptions) -> None:
        super().__init__(stage, plan, options)
        self.bulk = options.bulk_size
        self._end: int | None = None
        self._ready_f: list[int] = []
        self._ready_b: list[int] = []  # max-heap (negated ids): backwards in reverse order
        self._ready_u: list[int] = []
        self._forwards_done = 0  # of the current bulk, on this stage
        self._backwards_done = 0

    def stream_ends_at(self, total: int) -> None:
        """Subnets ``>= total`` never come (a later call may move the end further)."""
        self._end = total

    @property
    def current_bulk(self) -> int:
        """The bulk this stage has not flushed yet (``finished`` counts updates)."""
        return self.finished // self.bulk

    def bulk_members(self, bulk: int) -> range:
        start = bulk * self.bulk
        stop = start + self.bulk
        if self._end is not None:
            stop = min(stop, self._end)
        return range(start, stop)

    def may_admit(self, subnet: int) -> bool:
        return subnet // self.bulk == self.current_bulk

    def next_task(self) -> Task | None:
        if self._ready_u:
            return new_task((UPDATE, heapq.heappop(self._ready_u), self.stage))
        start = self.finished // self.bulk * self.bulk  # bulk_members(current_bulk) is [start, stop), inlined
        stop = start + self.bulk
        if self._end is not None and self._end < stop:
            stop = self._end
        if self._ready_b and (not self.is_last or self._forwards_done == (stop - start if stop > start else 0)):
            return new_task((BACKWARD, -heapq.heappop(self._ready_b), self.stage))
        if self._ready_f and start <= self._ready_f[0] < stop:
            return new_task((FORWARD, heapq.heappop(self._ready_f), self.stage))
        return None

    def completed(self, task: Task) -> None:
        """:meth:`StagePolicy.completed`, whole (once per task): count the bulk's forwards and
        backwards, flush after its last backward, start the next bulk after its last update."""
        kind = task[0]
        if kind is FORWARD:
            if not self.is_last:
                self._awaiting_backward[task[1]] = None
            self._forwards_done += 1
        elif kind is BACKWARD:
            self._backwards_done += 1
            start = self.finished // self.bulk * self.bulk  # bulk_members(current_bulk) is [start, stop), inlined
            stop = start + self.bulk
            if self._end is not None and self._end < stop:
                stop = self._end
            if self._backwards_done == (stop - start if stop > start else 0):  # the flush: updates in subnet order
                for subnet in range(start, stop):
                    heapq.heappush(self._ready_u, subnet)
        else:
            if not self._ready_u:  # the bulk's last update: the next bulk may start here
                self._forwards_done = self._backwards_done = 0
            self.finished += 1  # the update, GPipe's final kind

    def _on_forward(self, subnet: int) -> None:
        heapq.heappush(self._ready_f, subnet)

    def _on_backward(self, subnet: int) -> None:
        heapq.heappush(self._ready_b, -subnet)
