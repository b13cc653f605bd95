"""Each subnet's layers per stage, computed once per subnet: the simulator's hot path.

:class:`~naspipe.scheduling.plan.PipelinePlan` answers (subnet, stage) queries by rebuilding
the subnet's whole layer list each time, fine for a runtime doing real work per task but
O(D x positions) per subnet here. This view computes every stage's slice in one pass and
caches the most recent subnets (a pipeline only touches the few in flight); the answers are
the plan's own (a test compares them).
"""

from __future__ import annotations

from functools import lru_cache

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
        b = self._bounds
        return tuple(layers[b[k]:b[k + 1]] for k in range(len(b) - 1))

    def _trainable_slices(self, subnet: int) -> StageSlices:
        keep = self._trainable
        return tuple(tuple(lid for lid in stage if keep[lid]) for stage in self.all(subnet))
