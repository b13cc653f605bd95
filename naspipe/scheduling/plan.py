"""Which layers each subnet runs on each stage: structure + partition(s) + subnet stream.

Two kinds of plan. *Static*: one partition of the positions for every subnet (balanced for
the average subnet), so every layer has one stage. *Per subnet* (:meth:`PipelinePlan.per_subnet`):
each subnet's own layer costs get their own exact balanced split
(:func:`naspipe.partition.bottleneck_partition`), so a layer may run on different stages for
different subnets; its newest state then has to follow it (*mirroring*, see
:mod:`naspipe.scheduling.policies.csp`), and version counting becomes global: the version
subnet ``y`` needs for layer ``l`` is the number of earlier subnets, on any stage, that use it.
The static partition stays the layers' *home*: where a never-written layer is checkpointed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from naspipe.partition import Partition, bottleneck_partition
from naspipe.space.structure import SpaceStructure
from naspipe.subnet import SubnetStream


class PipelinePlan:
    """Maps (subnet id, stage) to the layers that stage runs for it, in execution order."""

    def __init__(self, structure: SpaceStructure, partition: Partition, stream: SubnetStream,
                 layer_costs: Sequence[float] | None = None) -> None:
        if partition.bounds[-1] != structure.num_positions:
            raise ValueError(
                f"partition covers {partition.bounds[-1]} positions, space has {structure.num_positions}"
            )
        if layer_costs is not None and len(layer_costs) != structure.num_layers:
            raise ValueError(f"{len(layer_costs)} layer costs for a space of {structure.num_layers} layers")
        self.structure = structure
        self.partition = partition
        self.stream = stream
        self.layer_costs = None if layer_costs is None else tuple(float(c) for c in layer_costs)
        self._trainable = tuple(structure.is_trainable(lid) for lid in range(structure.num_layers))  # hot: per task
        self._trainable_span = _trainable_span(structure, self._trainable)
        self._static_cuts = self._cuts(partition.bounds)
        self.subnet_layers = lru_cache(maxsize=1 << 12)(self._subnet_layers)  # one pass per subnet, not per stage
        self.stage_layers = lru_cache(maxsize=1 << 16)(self._stage_layers)
        self.trainable_layers = lru_cache(maxsize=1 << 16)(self._trainable_layers)
        self.trainable_slices = lru_cache(maxsize=1 << 12)(self._trainable_slices)
        self.partition_of = lru_cache(maxsize=1 << 14)(self._partition_of)
        self.subnet_trainable = lru_cache(maxsize=1 << 14)(self._subnet_trainable)
        self.windowed = frozenset(lid for lid in range(structure.num_layers) if structure.is_windowed(lid))
        self.windowed_stages = self._windowed_stages()
        if self.windowed:  # the CSP version rule leaves windowed layers to the window rule
            self.versioned_slices = lru_cache(maxsize=1 << 12)(self._versioned_slices)
            self.subnet_versioned = lru_cache(maxsize=1 << 14)(self._subnet_versioned)
        else:  # the same objects: no filtering on the hot path of the existing policies
            self.versioned_slices = self.trainable_slices
            self.subnet_versioned = self.subnet_trainable

    @classmethod
    def per_subnet(cls, structure: SpaceStructure, partition: Partition, stream: SubnetStream,
                   layer_costs: Sequence[float]) -> PipelinePlan:
        """Each subnet split by its own ``layer_costs``; ``partition`` stays the layers' home."""
        return cls(structure, partition, stream, layer_costs)

    @property
    def num_stages(self) -> int:
        return self.partition.num_stages

    @property
    def mirrored(self) -> bool:
        """Per-subnet partitions: a layer may run on several stages."""
        return self.layer_costs is not None

    def _subnet_layers(self, subnet: int) -> tuple[int, ...]:
        return self.structure.position_layers(self.stream[subnet])

    def _partition_of(self, subnet: int) -> Partition:
        if self.layer_costs is None:
            return self.partition
        costs = [self.layer_costs[lid] for lid in self.subnet_layers(subnet)]
        return bottleneck_partition(costs, self.num_stages)

    def _stage_layers(self, subnet: int, stage: int) -> tuple[int, ...]:
        layers = self.subnet_layers(subnet)
        if self.layer_costs is None:  # static: no per-subnet partition to look up
            bounds = self.partition.bounds
            return layers[bounds[stage] : bounds[stage + 1]]
        positions = self.partition_of(subnet).positions(stage)
        return layers[positions.start : positions.stop]

    def _trainable_layers(self, subnet: int, stage: int) -> tuple[int, ...]:
        keep = self._trainable
        return tuple([lid for lid in self.stage_layers(subnet, stage) if keep[lid]])

    def _trainable_slices(self, subnet: int) -> tuple[tuple[int, ...], ...]:
        """:meth:`trainable_layers` of every stage, in one pass per subnet (a scheduler asks once per task)."""
        layers = self.subnet_layers(subnet)
        cuts = self._static_cuts if self.layer_costs is None else self._cuts(self.partition_of(subnet).bounds)
        if cuts is not None:  # each stage's trainable layers are one run of positions: a slice
            return tuple([layers[start:stop] for start, stop in cuts])
        keep, bounds = self._trainable, self.partition_of(subnet).bounds
        return tuple(tuple([lid for lid in layers[bounds[k] : bounds[k + 1]] if keep[lid]])
                     for k in range(len(bounds) - 1))

    def _cuts(self, bounds: Sequence[int]) -> list[tuple[int, int]] | None:
        """Each stage's trainable positions as ``(start, stop)`` (empty when start >= stop), if they
        form one run (:func:`_trainable_span`), else None."""
        if self._trainable_span is None:
            return None
        low, high = self._trainable_span
        return [(max(bounds[k], low), min(bounds[k + 1], high)) for k in range(len(bounds) - 1)]

    def _subnet_trainable(self, subnet: int) -> tuple[int, ...]:
        """Every trainable layer of the subnet, on every stage."""
        keep = self._trainable
        return tuple([lid for lid in self.subnet_layers(subnet) if keep[lid]])

    def _versioned_slices(self, subnet: int) -> tuple[tuple[int, ...], ...]:
        """:meth:`trainable_slices` without the windowed shared layers (what the CSP version rule orders)."""
        skip = self.windowed
        return tuple(tuple([lid for lid in here if lid not in skip]) for here in self.trainable_slices(subnet))

    def _subnet_versioned(self, subnet: int) -> tuple[int, ...]:
        skip = self.windowed
        return tuple([lid for lid in self.subnet_trainable(subnet) if lid not in skip])

    def _windowed_stages(self) -> frozenset[int]:
        """The stages holding windowed shared layers, the same for every subnet.

        Per-subnet partitions never leave a stage empty, so the first position stays on stage 0
        and the last on the last stage; other shared positions could move between stages, and
        the window's accumulator cannot follow a layer around: refused.
        """
        last = self.structure.num_positions - 1
        stages = set()
        for lid in self.windowed:
            position = self.structure.position_of(lid)
            if self.mirrored and position not in (0, last):
                raise ValueError(f"windowed shared layer {lid} at position {position} may move between stages "
                                 "under per-subnet partitions (only the first and last positions stay put)")
            stages.add(self.stage_of_layer(lid))
        return frozenset(stages)

    def stage_of_layer(self, layer: int) -> int:
        """The layer's home stage (the static partition's)."""
        return self.partition.stage_of_position(self.structure.position_of(layer))

    def stage_of(self, subnet: int, layer: int) -> int:
        """Where ``subnet`` runs ``layer`` (it must use it)."""
        return self.partition_of(subnet).stage_of_position(self.structure.position_of(layer))

    def uses(self, subnet: int, layer: int) -> bool:
        return layer in self.structure.position_layers(self.stream[subnet])

    def next_user(self, layer: int, after: int, end: int) -> int | None:
        """The first subnet in ``(after, end)`` that uses ``layer``, or None."""
        position = self.structure.position_of(layer)
        for subnet in range(after + 1, end):
            if self.structure.position_layers(self.stream[subnet])[position] == layer:
                return subnet
        return None

    def holder(self, layer: int, boundary: int) -> int:
        """The stage holding ``layer``'s newest state once subnets ``< boundary`` are done: the stage
        of its last user before ``boundary``, or its home stage if none used it (checkpoints)."""
        position = self.structure.position_of(layer)
        for subnet in range(boundary - 1, -1, -1):
            if self.structure.position_layers(self.stream[subnet])[position] == layer:
                return self.stage_of(subnet, layer)
        return self.stage_of_layer(layer)

    def holders(self, layers: Iterable[int], boundary: int) -> dict[int, int]:
        """:meth:`holder` of many layers in one backward pass over the stream."""
        if not self.mirrored:
            return {layer: self.stage_of_layer(layer) for layer in layers}
        want = set(layers)
        found: dict[int, int] = {}
        for subnet in range(boundary - 1, -1, -1):
            if len(found) == len(want):
                break
            for layer in self.structure.position_layers(self.stream[subnet]):
                if layer in want and layer not in found:
                    found[layer] = self.stage_of(subnet, layer)
        return {layer: found.get(layer, self.stage_of_layer(layer)) for layer in want}

    def largest_share(self, stage: int, end: int, sizes: Mapping[int, int]) -> int:
        """The most ``sizes`` bytes any subnet ``< end`` runs on ``stage``: the smallest device cache
        that fits every task of the run there (a stage may hold layers none of them runs there)."""
        return max((sum(sizes[lid] for lid in self.stage_layers(y, stage)) for y in range(end)), default=0)

    def users_before(self, layer: int, boundary: int) -> int:
        """How many subnets ``< boundary`` use ``layer`` (its version once they are done)."""
        position = self.structure.position_of(layer)
        return sum(self.structure.position_layers(self.stream[s])[position] == layer for s in range(boundary))


def _trainable_span(structure: SpaceStructure, keep: Sequence[bool]) -> tuple[int, int] | None:
    """``(low, high)`` when the positions whose layers train are exactly ``low .. high - 1`` (all
    candidates of a position alike): the shared prefix and suffix may be frozen, the blocks never
    are. None otherwise (then trainable layers are filtered one by one)."""
    by_position: dict[int, set[bool]] = {}
    for lid, trains in enumerate(keep):
        by_position.setdefault(structure.position_of(lid), set()).add(trains)
    if any(len(kinds) != 1 for kinds in by_position.values()):
        return None
    trained = [p for p in range(structure.num_positions) if True in by_position[p]]
    if not trained:
        return 0, 0
    low, high = trained[0], trained[-1] + 1
    return (low, high) if len(trained) == high - low else None
