"""PipeDream: asynchronous parallel (ASP) 1F1B with weight stashing (Narayanan et al., SOSP'19).

NASPipe section 2.2 / Table 3 baseline "ASP", as in PipeDream's runtime for a straight
pipeline of ``D`` stages (one replica per stage): stage ``k`` runs ``D-1-k`` warm-up
forwards, then strictly alternates one forward and one backward (1F1B), then the cool-down
backwards; so at most ``D-k`` subnets are between forward and backward on stage ``k``
(``D`` on stage 0: PipeDream's NOAM). Forwards and backwards each run in subnet order.

Update semantics: there is no dependency check. A subnet's update ``U`` is applied on a
stage as soon as its backward there finishes, so a forward reads whatever version its
stage holds at that moment: the writes of the subnets whose backward already ran there,
which depends on ``D`` (and, on different stages, on different sets of earlier subnets).
Weight stashing: a subnet's backward uses the parameter version its forward read (the
runtime keeps a detached copy of the version per in-flight subnet, runs the forward on it,
and applies the resulting gradient to the live parameters at ``U``). No vertical sync.

Runtime needs (read by the stage worker): weight stash and per-subnet gradients;
activation recomputation is off whatever the config says (PipeDream keeps activations; the
NASPipe paper compares against it that way); the effective setting is recorded per stage
in metrics.json (``stage_extra[k]["recompute"]``). ``max_inflight`` and ``bulk_size`` are
ignored: 1F1B fixes the in-flight count.

The cool-down needs to know where the stream ends (:meth:`stream_ends_at`, called by the
runtime, also at checkpoint drain points). Without that knowledge a stage that waits for
its next forward runs an already arrived backward instead of waiting, so it never stalls.

Shared layers (``shared_policy``): under ``causal`` they are ordinary trainable layers here:
each subnet's update of them lands right after its backward on their stage, and a forward
reads whatever version is there then (timing and ``D`` decide it); weight stashing keeps
forward and backward on one version. Under ``windowed`` PipeDream keeps the window rule
(:mod:`naspipe.scheduling.windows`) as sequential and CSP do: the version a subnet reads is
fixed by its index and its gradient joins the window's sum in subnet order, so shared layers
get one step per window (PipeDream at D=1 is bitwise sequential). 1F1B never waits on it: at
most ``D`` subnets are between forward and backward on a stage and the config requires
``shared_window`` >= ``D``. ``frozen`` keeps them at their seeded init.
"""

from __future__ import annotations

from collections import deque
from typing import ClassVar

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import PolicyOptions, StagePolicy
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, Task, new_task


class PipeDream(StagePolicy):
    name = "pipedream"
    label = "ASP (PipeDream)"
    report_order = 6

    stash_gradients: ClassVar[bool] = True
    stash_weights: ClassVar[bool] = True
    recompute: ClassVar[bool | None] = False  # forced off
    swap_parameters: ClassVar[bool] = False
    bulk_synchronous: ClassVar[bool] = False
    windowed_shared: ClassVar[bool] = True  # windowed shared layers: one step per window, as sequential

    def __init__(self, stage: int, plan: PipelinePlan, options: PolicyOptions) -> None:
        super().__init__(stage, plan, options)
        self.depth = plan.num_stages - stage  # most subnets between F and B here
        self._end: int | None = None
        self._arrived_f: set[int] = set()
        self._arrived_b: set[int] = set()
        self._active: deque[int] = deque()  # forward done, backward not yet, in order
        self._next_f = 0  # the next subnet to run forward here
        self._pending_u: deque[int] = deque()
        self._backwards = 0  # stage 0: subnets whose backward ran (admission)

    def resume_at(self, start: int) -> None:
        super().resume_at(start)
        self._next_f = self._backwards = start

    def stream_ends_at(self, total: int) -> None:
        """Subnets ``>= total`` do not come (for now: a later call may move the end)."""
        self._end = total

    def may_admit(self, subnet: int) -> bool:
        return self.admitted - self._backwards < self.depth

    def next_task(self) -> Task | None:
        if self._pending_u:
            return new_task((UPDATE, self._pending_u.popleft(), self.stage))
        forwards_left = self._end is None or self._next_f < self._end
        if len(self._active) < self.depth and forwards_left:
            if self._next_f in self._arrived_f:
                self._arrived_f.remove(self._next_f)
                return new_task((FORWARD, self._next_f, self.stage))
            if self._end is not None or not self._active or self._active[0] not in self._arrived_b:
                return None  # 1F1B: the next forward is due; wait for it
        if self._active and self._active[0] in self._arrived_b:
            self._arrived_b.remove(self._active[0])
            return new_task((BACKWARD, self._active[0], self.stage))
        return None

    def _on_forward(self, subnet: int) -> None:
        self._arrived_f.add(subnet)

    def _on_backward(self, subnet: int) -> None:
        self._arrived_b.add(subnet)

    def _on_completed(self, task: Task) -> None:
        if task.kind is FORWARD:
            self._active.append(task.subnet)
            self._next_f += 1
        elif task.kind is BACKWARD:
            self._active.popleft()
            self._backwards += 1
            self._pending_u.append(task.subnet)
