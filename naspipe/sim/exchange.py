"""What the replicas' ordered sum of a subnet's gradients costs on one stage, in simulated seconds and bytes.

The simulator runs one replica of a D x R layout: each of its stages runs m / R of a subnet's m parts (each part
priced at its share of the batch, as without replicas), and the replicas, doing the same work at the same
times, are taken to finish a subnet's parts on a stage together. The update then waits for the exchange of
:mod:`naspipe.runtime.exchange`: R - 1 hops of the stage's gradients up the chain (replica r adds its m / R
parts onto what it received, then sends it on), then the total sent from the last replica to each other one in
turn; the replica that gets it last waits for all R - 1 sends, and the simulated replica is priced as that one
(the pipeline runs at its slowest replica's pace). Each transfer is :meth:`Hardware.transfer_s` between the
processes' hosts: process ``replica * D + stage``, ``gpus_per_host`` processes per host, so a stage's replicas
share a host only when D is below ``gpus_per_host``. Each hop's additions read two tensors and write one per
part, at the device's memory bandwidth.

Left out: the batch norms' statistics (a few numbers per channel beside the gradients), and contention between
the exchange and the pipeline's own messages on a shared network link.
"""

from __future__ import annotations

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.replicas import ProcessGrid
from naspipe.sim.costs import CostModel


class ReplicaExchange:
    """The exchange's cost per (subnet, stage), for ``replicas`` replicas each summing ``parts_here`` parts."""

    def __init__(self, plan: PipelinePlan, costs: CostModel, replicas: int, parts_here: int) -> None:
        self.plan, self.costs, self.parts_here = plan, costs, parts_here
        self.grid = ProcessGrid(plan.num_stages, replicas)

    def cost(self, subnet: int, stage: int) -> tuple[float, float]:
        """Seconds from the simulated replica's last part to the total's arrival there, and the bytes it sends."""
        nbytes = sum(self.costs.param_bytes(lid) for lid in self.plan.trainable_layers(subnet, stage))
        return self.seconds(stage, nbytes), nbytes

    def seconds(self, stage: int, nbytes: float) -> float:
        """The chain's hops with their additions, then the total's sends from the last replica, in turn."""
        hardware, grid = self.costs.hardware, self.grid
        last = grid.replicas - 1
        add_s = 3 * nbytes * self.parts_here / hardware.memory_bandwidth
        chain = sum(hardware.transfer_s(grid.rank(stage, r), grid.rank(stage, r + 1), nbytes) + add_s
                    for r in range(last))
        total = sum(hardware.transfer_s(grid.rank(stage, last), grid.rank(stage, r), nbytes) for r in range(last))
        return chain + total
