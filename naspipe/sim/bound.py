"""A lower bound on any schedule's makespan: the physical limit a scheduler is measured against.

``makespan >= max(W, P)``: ``W`` is the busiest stage's total work (a stage runs one task at
a time) and ``P`` the longest path through the task graph with unlimited overlap: each
subnet's chain F(stage 0) -> ... -> F(D-1) -> B(D-1) -> ... -> B(0), with the message
times between stages, each stage's update after its backward, and, for the systems whose
semantics are causal (sequential, csp, csp-no-scheduler), the edge from a subnet's update of
a layer to the next user's first access of it (the CSP rule). Bulk synchronous and
asynchronous systems (gpipe, vpipe, pipedream) do not order subnets by layer, so their
path is the single-subnet chain. Copies are left out: a perfect cache hides them.
"""

from __future__ import annotations

from naspipe.scheduling.plan import PipelinePlan
from naspipe.sim.costs import CostModel, backward_s, forward_s, update_s
from naspipe.sim.layout import StageSlices, SubnetLayers

CAUSAL_SYSTEMS = frozenset({"sequential", "csp", "csp-no-scheduler"})


def longest_path(plan: PipelinePlan, system: str, num_subnets: int, costs: CostModel, recompute: bool) -> float:
    d = plan.num_stages
    causal = system in CAUSAL_SYSTEMS
    written: dict[int, float] = {}  # layer -> when its latest update ended
    longest = 0.0
    layout = SubnetLayers(plan)
    for y in range(num_subnets):
        t = 0.0
        slices, trainables = layout.all(y), layout.trainable(y)
        for k in range(d):
            if causal:
                t = max([t, *(written.get(lid, 0.0) for lid in trainables[k])])
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
            if k > 0:
                t += _message(costs, slices, k, k - 1)
    return longest


def _message(costs: CostModel, slices: StageSlices, src: int, dst: int) -> float:
    if costs.free_io:
        return 0.0
    boundary = slices[min(src, dst)][-1]
    return costs.hardware.transfer_s(src, dst, costs.boundary_bytes(boundary))


def lower_bound(busiest_stage_work: float, path: float) -> float:
    return max(busiest_stage_work, path)
