"""The run's partition from the simulated task costs: what a profile on the simulated hardware would give.

``naspipe train`` partitions by ``partition_costs``: parameter counts by default, or a profile
measured on the machine (``naspipe profile``), which is what the paper's systems balance
(torchgpipe's ``balance`` by time, NASPipe's partitioner by profiled compute). A simulated
machine has no profile, but its cost model is one: ``--partition-by costs`` rebuilds the
plan from each layer's simulated compute (forward, recompute when the system recomputes,
backward), as the run would with a profile CSV of those seconds. Static plans balance each
position's mean over its candidates (:func:`naspipe.profile.costs.position_means`, as training does);
per-subnet plans give each candidate its own cost. A ``partition_file`` still wins.
"""

from __future__ import annotations

from naspipe.runplan.job import partition_by_layer_costs
from naspipe.scheduling.plan import PipelinePlan
from naspipe.sim.costs import CostModel


def layer_seconds(costs: CostModel, recompute: bool) -> list[float]:
    """Each layer's simulated compute: forward, backward, and the recompute when the system recomputes
    (what :func:`naspipe.runplan.job.build_job` partitions by under ``--partition-by costs``)."""
    return [c.forward_s + c.backward_s + (c.recompute_s if recompute else 0.0) for c in costs.layers]


def plan_by_costs(plan: PipelinePlan, costs: CostModel, recompute: bool) -> PipelinePlan:
    """``plan``'s structure, stream and mode, split by the simulated seconds of each layer."""
    structure = plan.structure
    seconds = layer_seconds(costs, recompute)
    partition = partition_by_layer_costs(structure, seconds, plan.num_stages)
    if plan.mirrored:
        return PipelinePlan.per_subnet(structure, partition, plan.stream, seconds)
    return PipelinePlan(structure, partition, plan.stream)
