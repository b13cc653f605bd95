"""Which layers each subnet runs on each stage: structure + partition + subnet stream."""

from __future__ import annotations

from functools import lru_cache

from naspipe.partition import Partition
from naspipe.space.structure import SpaceStructure
from naspipe.subnet import SubnetStream


class PipelinePlan:
    """Maps (subnet id, stage) to the layers that stage runs for it, in execution order."""

    def __init__(self, structure: SpaceStructure, partition: Partition, stream: SubnetStream) -> None:
        if partition.bounds[-1] != structure.num_positions:
            raise ValueError(
                f"partition covers {partition.bounds[-1]} positions, space has {structure.num_positions}"
            )
        self.structure = structure
        self.partition = partition
        self.stream = stream
        self.subnet_layers = lru_cache(maxsize=1 << 12)(self._subnet_layers)  # one pass per subnet, not per stage
        self.stage_layers = lru_cache(maxsize=1 << 16)(self._stage_layers)
        self.trainable_layers = lru_cache(maxsize=1 << 16)(self._trainable_layers)

    @property
    def num_stages(self) -> int:
        return self.partition.num_stages

    def _subnet_layers(self, subnet: int) -> tuple[int, ...]:
        return self.structure.position_layers(self.stream[subnet])

    def _stage_layers(self, subnet: int, stage: int) -> tuple[int, ...]:
        layers = self.subnet_layers(subnet)
        positions = self.partition.positions(stage)
        return layers[positions.start : positions.stop]

    def _trainable_layers(self, subnet: int, stage: int) -> tuple[int, ...]:
        return tuple(lid for lid in self.stage_layers(subnet, stage) if self.structure.is_trainable(lid))

    def stage_of_layer(self, layer: int) -> int:
        return self.partition.stage_of_position(self.structure.position_of(layer))
