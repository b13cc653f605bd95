"""A lower bound on any schedule's makespan: the physical limit a scheduler is measured against.

``makespan >= max(W, P)``: ``W`` is the busiest stage's total work (a stage runs one task at
a time) and ``P`` the longest path through the task graph with unlimited overlap: each
subnet's chain F(stage 0) -> ... -> F(D-1) -> B(D-1) -> ... -> B(0), with the message
times between stages, each stage's update after its backward, and, for the systems whose
semantics are causal (sequential, csp, csp-no-scheduler), the edge from a subnet's update of
a layer to the next user's first access of it (the CSP rule). Bulk synchronous and
asynchronous systems (gpipe, vpipe, pipedream) do not order subnets by layer, so their
path is the single-subnet chain. Copies are left out: a perfect cache hides them.

Windowed shared layers (:mod:`naspipe.scheduling.windows`) are outside the per-layer edge;
for the systems that keep the window rule, a subnet's forward on a stage holding them starts
after the updates there of every subnet of the windows before last (``< rW`` with ``r`` its
read version): the window's edge.
"""

from __future__ import annotations

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies import POLICIES
from naspipe.scheduling.windows import SharedWindow
from naspipe.sim.costs import CostModel, backward_s, forward_s, update_s
from naspipe.sim.layout import StageSlices, SubnetLayers

CAUSAL_SYSTEMS = frozenset({"sequential", "csp", "csp-no-scheduler"})


def longest_path(plan: PipelinePlan, system: str, num_subnets: int, costs: CostModel, recompute: bool,
                 shared_window: int = 8) -> float:
    d = plan.num_stages
    causal = system in CAUSAL_SYSTEMS
    written: dict[int, float] = {}  # layer -> when its latest update ended
    longest = 0.0
    layout = SubnetLayers(plan)
    window = _WindowEdges(plan, shared_window) if causal and plan.windowed and POLICIES[system].windowed_shared \
        else None
    for y in range(num_subnets):
        t = 0.0
        slices, trainables = layout.all(y), layout.trainable(y)
        for k in range(d):
            if window is not None:
                t = max(t, window.ready(y, k))
            if causal:
                t = max([t, *(written.get(lid, 0.0) for lid in trainables[k] if lid not in plan.windowed)])
            t += forward_s(costs, slices[k]) + (_message(costs, slices, k, k + 1) if k < d - 1 else 0.0)
        for k in range(d - 1, -1, -1):
            r, b = backward_s(costs, slices[k], recompute)
            t += r + b
            trainable = trainables[k]
            done = t + update_s(costs, trainable)
            longest = max(longest, done)
            if causal:
                for lid in trainable:
                    written[lid] = done
            if window is not None:
                window.updated(y, k, done)
            if k > 0:
                t += _message(costs, slices, k, k - 1)
    return longest


class _WindowEdges:
    """Per stage holding windowed layers, the latest update end among subnets ``0 .. x`` (a prefix max)."""

    def __init__(self, plan: PipelinePlan, size: int) -> None:
        self.rule = SharedWindow(size)
        self.done: dict[int, list[float]] = {k: [] for k in plan.windowed_stages}

    def ready(self, subnet: int, stage: int) -> float:
        """When the version ``subnet`` reads is on ``stage`` (its windows before last applied there)."""
        version = self.rule.read_version(subnet)
        if stage not in self.done or version == 0:
            return 0.0
        return self.done[stage][self.rule.last_writer(version)]

    def updated(self, subnet: int, stage: int, end: float) -> None:
        if stage in self.done:
            prefix = self.done[stage]
            prefix.append(max(end, prefix[-1]) if prefix else end)


def _message(costs: CostModel, slices: StageSlices, src: int, dst: int) -> float:
    if costs.free_io:
        return 0.0
    boundary = slices[min(src, dst)][-1]
    return costs.hardware.transfer_s(src, dst, costs.boundary_bytes(boundary))


def lower_bound(busiest_stage_work: float, path: float) -> float:
    return max(busiest_stage_work, path)
