"""The artifact's relaxed dependency check (csp-artifact) against hand-made streams."""

from __future__ import annotations

import pytest

from naspipe.scheduling import Kind, PolicyOptions
from naspipe.scheduling.driver import drive
from naspipe.scheduling.policies import make_policy
from naspipe.scheduling.policies.csp_artifact import ARTIFACT_BOUNDS, compared_blocks
from tests.conftest import FixedStream, make_plan


def first_forward_start(timeline, stage: int, subnet: int) -> float:
    return next(s.start for s in timeline.stages[stage] if s.task.kind is Kind.FORWARD and s.task.subnet == subnet)


def update_end(timeline, stage: int, subnet: int) -> float:
    return next(s.end for s in timeline.stages[stage] if s.task.kind is Kind.UPDATE and s.task.subnet == subnet)


def test_compared_blocks_are_the_artifacts_ranges_and_scale_to_other_block_counts():
    assert [compared_blocks(k, 48) for k in range(4)] == [range(0, 4), range(4, 10), range(10, 16), range(16, 22)]
    assert sum(len(compared_blocks(k, 48)) for k in range(4)) == 22  # at 4 GPUs, 26 of 48 blocks are never compared
    assert [b for k in range(8) for b in compared_blocks(k, 48)] == list(range(48))  # 8 stages: every block
    assert compared_blocks(8, 48) == range(0) and ARTIFACT_BOUNDS[-1] == 48
    assert [compared_blocks(k, 24) for k in (0, 1)] == [range(0, 2), range(2, 5)]


# 48 blocks, 2 candidates, 2 stages (blocks 0-23 on stage 0, 24-47 on stage 1). Stage 0 compares blocks
# 0-3, stage 1 blocks 4-9 (both run on stage 0). Subnet 1 shares exactly one block with subnet 0.
def stream(shared_block: int) -> FixedStream:
    s0 = (0,) * 48
    s1 = tuple(0 if b == shared_block else 1 for b in range(48))
    return FixedStream([s0, s1])


def second_runs_before_first_writes(system: str, stage: int, shared: int) -> bool:
    """On ``stage``: subnets 0 and 1 arrive, 0's forward runs; may 1's forward run before 0's update?"""
    plan = make_plan(48, 2, 2, stream=stream(shared))
    policy = make_policy(system, stage, plan, PolicyOptions(max_inflight=2))
    for y in (0, 1):
        policy.admit(y) if stage == 0 else policy.forward_arrived(y)
    first = policy.next_task()
    assert first is not None and (first.kind, first.subnet) == (Kind.FORWARD, 0)
    policy.completed(first)
    second = policy.next_task()
    return second is not None and (second.kind, second.subnet) == (Kind.FORWARD, 1)


@pytest.mark.parametrize("shared", [2, 5, 12, 30])
def test_the_artifact_waits_only_on_its_compared_blocks(shared):
    for stage in (0, 1):
        runs_here = (shared < 24) == (stage == 0)
        # CSP: 1 waits exactly where the shared layer runs
        assert second_runs_before_first_writes("csp", stage, shared) == (not runs_here)
        # the artifact: 1 waits exactly where the shared block is compared, wherever it runs
        assert second_runs_before_first_writes("csp-artifact", stage, shared) == (
            shared not in compared_blocks(stage, 48))


def test_the_race_csp_prevents_happens_under_the_artifacts_check():
    """3 stages: block 24 runs on the middle stage and is compared nowhere (blocks 0-15 are): subnet 1
    reads it there before subnet 0 writes it; CSP makes it wait."""
    plan = make_plan(48, 2, 3, stream=stream(24))
    assert plan.stage_of_layer(plan.structure.layer_id(24, 0)) == 1
    csp, art = (drive(plan, s, 2, PolicyOptions(max_inflight=2)) for s in ("csp", "csp-artifact"))
    assert first_forward_start(csp, 1, 1) >= update_end(csp, 1, 0)
    assert first_forward_start(art, 1, 1) < update_end(art, 1, 0)


def test_identical_to_csp_when_nothing_is_shared_and_no_other_policy_changes():
    disjoint = FixedStream([tuple((i + b) % 2 for b in range(48)) for i in range(2)])
    plan = make_plan(48, 2, 2, stream=disjoint)
    options = PolicyOptions(max_inflight=2)
    csp, art = drive(plan, "csp", 2, options), drive(plan, "csp-artifact", 2, options)
    assert [csp.tasks(k) for k in range(2)] == [art.tasks(k) for k in range(2)]


def test_per_subnet_partitions_are_refused():
    plan = make_plan(8, 2, 2)
    per_subnet = type(plan).per_subnet(plan.structure, plan.partition, plan.stream, [1.0] * plan.structure.num_layers)
    with pytest.raises(ValueError, match="per-subnet"):
        make_policy("csp-artifact", 0, per_subnet, PolicyOptions())


def test_the_artifact_still_waits_for_the_shared_window_it_reads():
    """Windowed shared layers: the relaxed check compares fewer blocks, but a stage holds only the two newest
    windows, so every forward and backward must find the version it reads (the runtime raises otherwise)."""
    import random

    from naspipe.partition import balanced_partition
    from naspipe.scheduling.plan import PipelinePlan
    from naspipe.scheduling.windows import SharedWindow
    from naspipe.subnet import SubnetStream
    from tests.conftest import make_structure

    structure = make_structure(8, 3, "windowed")
    plan = PipelinePlan(structure, balanced_partition([1.0] * structure.num_positions, 4),
                        SubnetStream(structure.choices_per_block, 0))
    rule, rng = SharedWindow(1), random.Random(1)
    applied, done, reads = dict.fromkeys(plan.windowed, 0), {lid: set() for lid in plan.windowed}, 0
    durations: dict = {}

    def on_start(task, policy) -> None:
        nonlocal reads
        for layer in set(plan.stage_layers(task.subnet, task.stage)) & plan.windowed:
            if task.kind is Kind.UPDATE:  # the executor applies the windows in subnet order
                done[layer].add(task.subnet)
                while applied[layer] in done[layer]:
                    applied[layer] += 1  # W = 1: every update closes a window
                continue
            assert applied[layer] in (rule.read_version(task.subnet), rule.read_version(task.subnet) + 1), task
            reads += 1

    drive(plan, "csp-artifact", 30, PolicyOptions(max_inflight=8, shared_window=1), on_start=on_start,
          duration=lambda task: durations.setdefault(task, rng.uniform(0.1, 3.0)))
    assert reads > 0
