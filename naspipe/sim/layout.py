"""Each subnet's layers per stage, computed once per subnet: the simulator's hot path.

:class:`~naspipe.scheduling.plan.PipelinePlan` answers (subnet, stage) queries by rebuilding
the subnet's whole layer list each time, fine for a runtime doing real work per task but
O(D x positions) per subnet here. This view computes every stage's slice in one pass and
caches the most recent subnets (a pipeline only touches the few in flight); the answers are
the plan's own (a test compares them), for static plans and for per-subnet ones (each
subnet cut by its own partition, :meth:`PipelinePlan.partition_of`).

:func:`stage_layer_ids` is the other question the memory model asks: which layers a stage
builds and keeps at all, which with per-subnet partitions includes the mirrored copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from naspipe.profile.costs import position_layer_ids
from naspipe.scheduling.plan import PipelinePlan

StageSlices = tuple[tuple[int, ...], ...]


class SubnetLayers:
    def __init__(self, plan: PipelinePlan) -> None:
        s = plan.structure
        self.plan = plan
        self._prefix = tuple(range(len(s.prefix)))
        self._offsets = tuple(s.layer_id(b, 0) for b in range(len(s.blocks)))
        self._suffix = tuple(range(s.num_layers - len(s.suffix), s.num_layers))
        self._bounds = plan.partition.bounds
        self._trainable = [s.is_trainable(lid) for lid in range(s.num_layers)]
        self.all = lru_cache(maxsize=1 << 12)(self._all)
        self.trainable = lru_cache(maxsize=1 << 12)(self._trainable_slices)

    def _all(self, subnet: int) -> StageSlices:
        choices = self.plan.stream[subnet].choices
        layers = self._prefix + tuple(o + c for o, c in zip(self._offsets, choices, strict=True)) + self._suffix
        b = self.plan.partition_of(subnet).bounds if self.plan.mirrored else self._bounds
        return tuple(layers[b[k]:b[k + 1]] for k in range(len(b) - 1))

    def _trainable_slices(self, subnet: int) -> StageSlices:
        keep = self._trainable
        return tuple(tuple(lid for lid in stage if keep[lid]) for stage in self.all(subnet))


def stage_layer_ids(plan: PipelinePlan, stage: int, subnets: int) -> list[int]:
    """Every layer ``stage`` builds and keeps: all candidates of its home positions (the static
    partition), and with per-subnet partitions every layer one of the first ``subnets`` subnets
    runs there (a mirrored copy). The runtime's :meth:`naspipe.runplan.job.Job.stage_layer_ids`,
    without torch (a test compares them)."""
    return stage_layer_sets(plan, subnets, (stage,))[0]


def stage_layer_sets(plan: PipelinePlan, subnets: int, stages: Sequence[int] | None = None) -> list[list[int]]:
    """:func:`stage_layer_ids` of each of ``stages`` (default: every stage), walking the subnets
    once for all of them: each subnet's slices are cut once, not once per stage."""
    wanted = range(plan.num_stages) if stages is None else stages
    held = [{lid for p in plan.partition.positions(k) for lid in position_layer_ids(plan.structure, p)}
            for k in wanted]
    if plan.mirrored:
        layout = SubnetLayers(plan)
        for subnet in range(subnets):
            slices = layout.all(subnet)
            for home, k in zip(held, wanted, strict=True):
                home.update(slices[k])
    return [sorted(home) for home in held]
