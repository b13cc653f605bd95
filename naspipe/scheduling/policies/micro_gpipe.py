"""Micro-batched GPipe and VPipe: the bulk synchronous baselines with each subnet's batch in parts.

Why: the paper's GPipe runs each subnet as one indivisible micro-batch, so a bulk of ``B``
subnets fills a D-stage pipeline only when ``B`` is near D, and its flush bubble is the whole
pipeline's depth per bulk. torchgpipe and GPipe itself cut every mini-batch into ``m``
micro-batches; this is that form, so that NASPipe is compared with the strongest synchronous
pipeline, not only with the paper's.

Update semantics (as :class:`~naspipe.scheduling.policies.gpipe.GPipe`, part by part): a bulk
of ``B`` consecutive subnets reads the parameter version from before the bulk. Each subnet's
batch is cut into ``m`` fixed parts (:mod:`naspipe.scheduling.policies.micro`'s split); each
part runs forward and backward; the parts' weight gradients of a subnet are summed in part order
(part 0 first) into that subnet's own stash (``stash_gradients``: two subnets of a bulk that
share a layer never mix their gradients); the flush then applies one optimizer step per subnet
and layer, in subnet order. With ``B = 1`` this is exactly what
:class:`~naspipe.scheduling.policies.micro.MicroSequential` computes (same ``m``, same split); with
``B > 1`` a later subnet of the bulk reads a version without an earlier one's writes, so the result
depends on ``B`` (hence on the GPU count when ``B = D``), as BSP does.

Schedule on a stage (tasks are :class:`~naspipe.scheduling.task.MicroTask`): a ready backward first,
last subnet first and, within a subnet, in part order (the order its gradients are summed in); else
the bulk's next forward part in (subnet, part) order; with a split backward, ``W(y, j)`` after
``B(y, j)``, run when nothing else is ready or when more than ``m`` wait (each keeps its part's
activations); after the bulk's last gradient task, the flush ``U`` in subnet order. The next bulk
enters after stage 0's flush; no stage runs a forward of the next bulk before its own flush. The last
stage runs each part's backward right after its forward, as every micro-batched schedule here does
(the part's activations are kept for it instead of recomputed), rather than GPipe's drain after the
last forward, which would keep the whole bulk's activations there: the same bits, less memory and no
longer a makespan, so the baseline is at its strongest.
"""

from __future__ import annotations

from heapq import heappop, heappush

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import PolicyOptions
from naspipe.scheduling.policies.gpipe import GPipe
from naspipe.scheduling.policies.vpipe import VPipe
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, WEIGHT, MicroTask, Task

Part = tuple[int, int]  # (subnet, micro-batch)


class MicroGPipe(GPipe):
    """GPipe over micro-batch tasks (module docstring).

    GPipe's own: its name and capabilities (the registry reads GPipe's), the bulk (``bulk_members``,
    ``current_bulk``), admission and the stream's end. Its own queues are per part."""

    def __init__(self, stage: int, plan: PipelinePlan, options: PolicyOptions) -> None:
        super().__init__(stage, plan, options)
        self.micro_batches = options.micro_batches
        self.split = options.split_backward
        self._parts_f: list[Part] = []
        self._parts_b: list[Part] = []  # keyed (-subnet, part): last subnet first, its parts in order
        self._parts_w: list[Part] = []
        self._gradients_done = 0  # gradient-summing parts (B unsplit, W split) of the current bulk done here

    # -- events -------------------------------------------------------------
    def admit(self, subnet: int) -> None:
        """All of ``subnet``'s parts enter the pipeline (stage 0 splits its batch)."""
        if not self.is_first or subnet != self.admitted:
            raise RuntimeError(f"stage {self.stage}: cannot admit subnet {subnet} (next is {self.admitted})")
        self.admitted += 1
        for micro in range(self.micro_batches):
            self.forward_arrived(subnet, micro)

    def forward_arrived(self, subnet: int, micro: int = 0) -> None:
        self.messages += 1
        if micro == 0:
            self._register_through(subnet)
            self._note_arrival(subnet)
        heappush(self._parts_f, (subnet, micro))

    def backward_arrived(self, subnet: int, micro: int = 0) -> None:
        self.messages += 1
        heappush(self._parts_b, (-subnet, micro))

    def completed(self, task: Task | MicroTask) -> None:
        kind, subnet, _, micro = task  # type: ignore[misc]
        if kind is FORWARD:
            return
        if kind is BACKWARD and self.split:
            heappush(self._parts_w, (subnet, micro))
        elif kind is UPDATE:
            if not self._ready_u:  # the bulk's last update: the next bulk may start here
                self._gradients_done = 0
            self.finished += 1
        else:  # an unsplit backward or a weight task: the part's gradients are in its subnet's stash
            self._gradients_done += 1
            members = self.bulk_members(self.current_bulk)
            if self._gradients_done == len(members) * self.micro_batches:  # the flush
                for y in members:
                    heappush(self._ready_u, y)

    # -- decisions ----------------------------------------------------------
    def next_task(self) -> MicroTask | None:  # type: ignore[override]
        stage = self.stage
        if self._ready_u:
            return MicroTask(UPDATE, heappop(self._ready_u), stage)
        if len(self._parts_w) > self.micro_batches:  # their activations wait too
            return self._weight()
        if self._parts_b:
            y, j = heappop(self._parts_b)
            return MicroTask(BACKWARD, -y, stage, j)
        if self._parts_f and self._parts_f[0][0] in self.bulk_members(self.current_bulk):
            y, j = heappop(self._parts_f)
            return MicroTask(FORWARD, y, stage, j)
        if self._parts_w:
            return self._weight()
        return None

    def _weight(self) -> MicroTask:
        y, j = heappop(self._parts_w)
        return MicroTask(WEIGHT, y, self.stage, j)


class MicroVPipe(MicroGPipe, VPipe):
    """VPipe's parameter swapping over :class:`MicroGPipe`'s schedule (same bits as it); VPipe's name and
    capabilities come from :class:`VPipe`, next in the method order."""


__all__ = ["MicroGPipe", "MicroVPipe"]
