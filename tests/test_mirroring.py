"""Per-subnet partitions with mirroring in the scheduling core (virtual time): every task sees
each layer at exactly the version the sequential order gives it, wherever the layer runs."""

from __future__ import annotations

import random

import pytest

from naspipe.partition import balanced_partition
from naspipe.scheduling import PipelinePlan, PolicyOptions, Task
from naspipe.scheduling.driver import drive
from naspipe.scheduling.policies import make_policy
from naspipe.scheduling.policies.base import StagePolicy
from naspipe.subnet import SubnetStream
from tests.conftest import make_structure


def mirrored_plan(stages: int, blocks: int = 8, candidates: int = 4, seed: int = 0) -> PipelinePlan:
    structure = make_structure(blocks, candidates, "frozen")
    rng = random.Random(seed)
    costs = [rng.uniform(0.2, 5.0) for _ in range(structure.num_layers)]
    home = balanced_partition([1.0] * structure.num_positions, stages)
    return PipelinePlan.per_subnet(structure, home, SubnetStream(structure.choices_per_block, seed), costs)


def check_versions(plan: PipelinePlan):
    seen: list[Task] = []

    def on_start(task: Task, policy: StagePolicy) -> None:
        for layer in plan.trainable_layers(task.subnet, task.stage):
            assert policy.versions.version(layer) == plan.users_before(layer, task.subnet), (task, layer)
        seen.append(task)

    return on_start, seen


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_every_task_sees_the_sequential_version_wherever_the_layer_runs(stages: int) -> None:
    plan = mirrored_plan(stages, seed=stages)
    on_start, seen = check_versions(plan)
    n = 40
    timeline = drive(plan, "csp", n, on_start=on_start)
    assert len(seen) == 3 * n * stages
    assert len({plan.partition_of(y) for y in range(n)}) > 1  # subnets really are split differently
    assert timeline.mirrors  # and layers really moved
    for mirror in timeline.mirrors:
        assert mirror.version == plan.users_before(mirror.layer, mirror.writer) + 1
        user = plan.next_user(mirror.layer, mirror.writer, n)
        assert user is not None and plan.stage_of(user, mirror.layer) == mirror.dst != plan.stage_of(
            mirror.writer, mirror.layer)


def test_a_static_plan_never_mirrors_and_decides_as_before() -> None:
    structure = make_structure(8, 4, "frozen")
    home = balanced_partition([1.0] * structure.num_positions, 3)
    plan = PipelinePlan(structure, home, SubnetStream(structure.choices_per_block, 1))
    timeline = drive(plan, "csp", 30)
    assert not timeline.mirrors


def test_a_mirror_past_the_stream_end_waits_for_the_next_end() -> None:
    plan = mirrored_plan(3, seed=5)
    policies = [make_policy("csp", k, plan, PolicyOptions()) for k in range(3)]
    drive(plan, "csp", 12, policies=policies)  # as up to a drain point at 12
    assert all(not p.take_mirrors() for p in policies)
    due = [m for p in policies for m in (p.stream_ends_at(60), p.take_mirrors())[1]]
    assert due and all(m.writer < 12 and m.version == plan.users_before(m.layer, 12) for m in due)


def test_other_policies_refuse_per_subnet_partitions() -> None:
    with pytest.raises(ValueError, match="cannot run per-subnet partitions"):
        make_policy("gpipe", 0, mirrored_plan(2), PolicyOptions())


def test_holder_is_the_stage_of_the_last_writer_or_home() -> None:
    plan = mirrored_plan(3, seed=2)
    for layer in plan.subnet_trainable(0):
        assert plan.holder(layer, 1) == plan.stage_of(0, layer)
    unused = next(lid for lid in range(plan.structure.num_layers)
                  if plan.structure.is_trainable(lid) and plan.users_before(lid, 3) == 0)
    assert plan.holder(unused, 3) == plan.stage_of_layer(unused)


@pytest.mark.parametrize("mirrored", [True, False])
def test_a_subnets_trainable_slices_are_its_per_stage_trainable_layers(mirrored: bool) -> None:
    """CSP reads every stage's slice from one per-subnet pass; it must be the per-stage answer."""
    plan = mirrored_plan(4, seed=5)
    if not mirrored:
        plan = PipelinePlan(plan.structure, plan.partition, plan.stream)
    for y in range(40):
        assert plan.trainable_slices(y) == tuple(plan.trainable_layers(y, k) for k in range(4))
        assert sum(map(len, plan.trainable_slices(y))) == len(plan.subnet_trainable(y))


@pytest.mark.parametrize("shared", ["frozen", "causal"])
@pytest.mark.parametrize("per_subnet", [False, True])
@pytest.mark.parametrize("stages", [1, 3, 7])
def test_trainable_slices_are_each_stages_trainable_layers(shared: str, per_subnet: bool, stages: int) -> None:
    """trainable_slices cuts each stage's slice at the trainable positions (one run of them);
    it must equal filtering the stage's layers one by one, for frozen and trained shared layers."""
    structure = make_structure(8, 3, shared)
    home = balanced_partition([1.0] * structure.num_positions, stages)
    stream = SubnetStream(structure.choices_per_block, stages)
    costs = [1.0 + (lid % 5) for lid in range(structure.num_layers)]
    plan = PipelinePlan.per_subnet(structure, home, stream, costs) if per_subnet else PipelinePlan(structure, home,
                                                                                                  stream)
    for y in range(40):
        expected = tuple(tuple(lid for lid in plan.stage_layers(y, k) if structure.is_trainable(lid))
                         for k in range(stages))
        assert plan.trainable_slices(y) == expected
        assert all(plan.trainable_layers(y, k) == expected[k] for k in range(stages))
    assert any(not structure.is_trainable(lid) for lid in range(structure.num_layers)) == (shared == "frozen")
