"""The run's job: everything an executor (a stage process, the simulator) derives from the config, identically.

It is the run plan's centre: both executors, the runtime's stage processes and the simulator,
run the job this module builds, so neither re-derives the partition or the stream. Building a
:class:`Job` validates the whole run (space, system, stage count, partition
costs) before anything is spawned or written, so bad input fails fast with one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from naspipe import systems
from naspipe.config import Config
from naspipe.errors import UsageError
from naspipe.partition import Partition, balanced_partition
from naspipe.profile.costs import check_profile_fits, layer_costs_from_profile, position_means
from naspipe.profile.rows import read_profile_csv
from naspipe.runplan.subnet_file import check_subnet
from naspipe.scheduling import POLICY_NAMES, PipelinePlan, PolicyOptions
from naspipe.space.structure import SpaceStructure
from naspipe.subnet import FixedSubnetStream, SubnetStream

if TYPE_CHECKING:
    from naspipe.space import SearchSpace
    from naspipe.space.shape import SpaceShape

S = TypeVar("S", bound="SpaceShape")


@dataclass
class Job:
    config: Config
    space: SearchSpace
    stream: SubnetStream
    partition: Partition
    plan: PipelinePlan

    @property
    def policy_options(self) -> PolicyOptions:
        return policy_options(self.config)

    def __reduce__(self) -> tuple[Any, ...]:
        """The job is sent whole to spawned stage processes, which then neither build the space nor partition
        again. The plan's lookup caches do not pickle: it is rejoined from its parts (no search runs)."""
        return _rejoin, (self.config, self.space, self.stream, self.partition, self.plan.layer_costs)

    def stage_layer_ids(self, stage: int) -> list[int]:
        """Every layer (all candidates of its blocks) that lives on ``stage``: its home layers, and with
        per-subnet partitions also every layer a subnet of the run places there (built from (seed, id))."""
        home = {lid for lid in range(self.space.structure.num_layers) if self.plan.stage_of_layer(lid) == stage}
        if self.plan.mirrored:
            for subnet in range(self.config.steps):
                home.update(self.plan.stage_layers(subnet, stage))
        return sorted(home)


def _rejoin(config: Config, space: SearchSpace, stream: SubnetStream, partition: Partition,
            layer_costs: Sequence[float] | None) -> Job:
    return Job(config, space, stream, partition, PipelinePlan(space.structure, partition, stream, layer_costs))


def policy_options(config: Config) -> PolicyOptions:
    """What the scheduling policies take from the config."""
    return PolicyOptions(max_inflight=config.inflight_limit, bulk_size=config.bulk,
                         shared_window=config.shared_window, micro_batches=config.micro_batches,
                         split_backward=config.split_backward, priority=config.priority,
                         one_holder=config.cache.enabled, replicas=config.replicas)


def build_space(config: Config) -> SearchSpace:
    """The run's space, once the system and the stage count are known to fit it (no layer is built).

    The space's classes are torch modules: importing this plan loads no torch, building a space does; the
    simulator and the planners build the space's shape instead (:func:`build_shape`)."""
    from naspipe.space import make_space

    return _fitted(config, make_space)


def build_shape(config: Config) -> SpaceShape:
    """The run's space without its layers (no torch): options, structure, costs, sizes; checked as
    :func:`build_space` checks the space."""
    from naspipe.space.registry import make_shape

    return _fitted(config, make_shape)


def _fitted(config: Config, make: Callable[[str, dict[str, Any], str], S]) -> S:
    if config.system not in POLICY_NAMES:
        raise UsageError(f"unknown system {config.system!r}; choose one of {', '.join(POLICY_NAMES)}")
    space = make(config.space_name, config.space_options, config.shared_policy)
    structure = space.structure
    if config.stages > structure.num_positions:
        raise UsageError(
            f"--stages {config.stages} exceeds the {structure.num_positions} layers of a subnet of space {space.name!r}"
        )
    return space


def build_job(config: Config, space: SearchSpace | None = None, layer_seconds: Sequence[float] | None = None) -> Job:
    """The whole run, checked. ``space``: the run's space when the caller built it already (:func:`build_space`).
    ``layer_seconds``: one cost per layer to partition by instead of ``partition_costs`` (the simulator's modelled
    compute, what a profile of the simulated machine would give); a ``partition_file`` still wins. The partition
    is computed once, from whichever costs apply."""
    space = build_space(config) if space is None else space
    plan = build_plan(config, space, layer_seconds)
    return Job(config, space, plan.stream, plan.partition, plan)


def build_plan(config: Config, space: SpaceShape, layer_seconds: Sequence[float] | None = None) -> PipelinePlan:
    """The run's partition, subnet stream and plan (what :func:`build_job` builds, with a space's shape: what
    the simulator runs, without torch)."""
    structure = space.structure
    check_bulk_boundary(config, "checkpoint_every", config.checkpoint_every)
    seconds = list(layer_seconds) if layer_seconds is not None and not config.partition_file else None
    if seconds is None:
        partition = _partition(config, space)
    else:
        partition = partition_by_layer_costs(structure, seconds, config.stages)
    stream = _stream(config, structure.choices_per_block)
    if config.partition_mode == "per-subnet":
        costs = seconds if seconds is not None else layer_costs(space, config.partition_costs)
        plan = PipelinePlan.per_subnet(structure, partition, stream, costs)
    else:
        plan = PipelinePlan(structure, partition, stream)
    return plan


def partition_by_layer_costs(structure: SpaceStructure, costs: Sequence[float], stages: int) -> Partition:
    """The balanced partition of per-layer ``costs``: each position weighs its candidates' mean (as a profile's
    rows are read), so every subnet splits alike."""
    return balanced_partition(position_means(structure, costs.__getitem__), stages)


def layer_costs(space: SpaceShape, source: str) -> list[float]:
    """One cost per layer for per-subnet partitions: 'params' gives each candidate its own; otherwise
    (uniform, a profile) each layer gets its position's cost, so every subnet splits alike."""
    structure = space.structure
    if source == "params":
        return [float(space.layer_cost(lid)) for lid in range(structure.num_layers)]
    per_position = position_costs(space, source)
    return [per_position[structure.position_of(lid)] for lid in range(structure.num_layers)]


def _stream(config: Config, choices_per_block: tuple[int, ...]) -> SubnetStream:
    """SPOS uniform sampling, or one fixed architecture every step (config key ``subnet``)."""
    if not config.subnet:
        return SubnetStream(choices_per_block, config.seed)
    return FixedSubnetStream(choices_per_block, check_subnet(list(config.subnet), choices_per_block,
                                                             "config key 'subnet'"))


def _partition(config: Config, space: SpaceShape) -> Partition:
    """The bounds of ``partition_file`` when given (checked against this run), else balanced over the costs."""
    if config.partition_file:
        from naspipe.partition_file import partition_for_run

        return partition_for_run(Path(config.partition_file), space.name, config.stages, space.structure.num_positions)
    return balanced_partition(position_costs(space, config.partition_costs), config.stages)


def check_bulk_boundary(config: Config, what: str, step: int) -> None:
    """BSP systems drain (checkpoint, resume) only between bulks."""
    if systems.get(config.system).bulk_synchronous and step % config.bulk:
        raise UsageError(f"system {config.system!r}: {what} ({step}) must be a multiple of the bulk size "
                         f"{config.bulk}: BSP drains (checkpoints, resumes) only at bulk boundaries")


def position_costs(space: SpaceShape, source: str) -> list[float]:
    """One cost per position: a prefix/suffix layer's own, a block's mean over its candidates."""
    structure = space.structure
    if source == "uniform":
        return [1.0] * structure.num_positions
    if source != "params":
        return _profile_costs(space, Path(source))
    cost_of_op = cache(lambda op, layer: space.layer_cost(layer))
    return position_means(structure, lambda lid: cost_of_op(structure.op_name(lid), lid))


def _profile_costs(space: SpaceShape, path: Path) -> list[float]:
    if not path.is_file():
        raise UsageError(
            f"config key 'partition_costs': {str(path)!r} is neither 'params', 'uniform' nor a profile CSV"
        )
    rows = read_profile_csv(path)  # its errors name the file and line
    check_profile_fits(space, rows, str(path))
    try:
        return layer_costs_from_profile(space, rows)
    except UsageError as exc:
        raise UsageError(f"profile {path}: {exc}") from None
