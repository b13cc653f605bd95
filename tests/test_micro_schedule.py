"""Micro-batched schedules in the scheduling core: tasks as data, the version rule per part, the
summation order of the parts' gradients, and what the new schedule buys in virtual time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.scheduling import PolicyOptions
from naspipe.scheduling.driver import Timeline, drive
from naspipe.scheduling.policies import make_policy
from naspipe.scheduling.policies.micro import MicroCSP, MicroSequential
from naspipe.scheduling.task import Kind, MicroTask, format_schedule, parse_micro_schedule
from tests.conftest import FixedStream, make_plan


def micro_durations(m: int):
    """Unit costs split over the parts: a part's forward 1/m, its backward 2/m (1/m + 1/m when split)."""
    def duration(task) -> float:
        return {Kind.FORWARD: 1.0, Kind.BACKWARD: 2.0, Kind.WEIGHT: 1.0, Kind.UPDATE: 0.0}[task.kind] / m
    return duration


def split_durations(m: int):
    def duration(task) -> float:
        return {Kind.FORWARD: 1.0, Kind.BACKWARD: 1.0, Kind.WEIGHT: 1.0, Kind.UPDATE: 0.0}[task.kind] / m
    return duration


def run(plan, system: str, n: int, m: int, split: bool, priority: str = "critical", inflight: int = 4) -> Timeline:
    options = PolicyOptions(max_inflight=inflight, micro_batches=m, split_backward=split, priority=priority)
    durations = split_durations(m) if split else micro_durations(m)
    return drive(plan, system, n, options, durations, on_start=_check_versions)


def _check_versions(task, policy) -> None:
    """Every forward, backward and weight task of a subnet runs on the version CSP gives it."""
    if task.kind is Kind.UPDATE:
        return
    for layer in policy.plan.versioned_slices(task.subnet)[policy.stage]:
        assert policy.versions.may_access(task.subnet, layer), f"{task} touched layer {layer} at a stale version"


def check_part_order(plan, timeline: Timeline, m: int, split: bool) -> None:
    """On each stage, a subnet's gradient-summing tasks run in part order, each part once, then its update."""
    summing = Kind.WEIGHT if split else Kind.BACKWARD
    for k in range(plan.num_stages):
        parts: dict[int, list[int]] = {}
        for task in timeline.tasks(k):
            if task.kind is summing:
                parts.setdefault(task.subnet, []).append(task.micro)
            elif task.kind is Kind.UPDATE:
                assert parts.get(task.subnet) == list(range(m)), (k, task, parts.get(task.subnet))


def test_micro_task_round_trip():
    text = "2F5.1 1B3.0 1W3.0 0U7"
    tasks = parse_micro_schedule(text)
    assert tasks == [MicroTask(Kind.FORWARD, 5, 2, 1), MicroTask(Kind.BACKWARD, 3, 1, 0),
                     MicroTask(Kind.WEIGHT, 3, 1, 0), MicroTask(Kind.UPDATE, 7, 0)]
    assert format_schedule(tasks) == text
    for bad in ("2F5", "2U5.1", "2X5.0", "W3.0"):
        with pytest.raises(ValueError, match="micro-batch task"):
            MicroTask.parse(bad)


def test_make_policy_picks_the_micro_schedule_and_refuses_it_elsewhere():
    plan = make_plan(4, 3, 2)
    assert type(make_policy("csp", 0, plan, PolicyOptions(micro_batches=2))) is MicroCSP
    assert type(make_policy("sequential", 0, plan, PolicyOptions(split_backward=True))) is MicroSequential
    assert type(make_policy("csp", 0, plan, PolicyOptions())).__name__ == "CSP"
    with pytest.raises(ValueError, match="no micro-batched schedule"):
        make_policy("pipedream", 0, plan, PolicyOptions(micro_batches=2))
    with pytest.raises(ValueError, match="micro_batches must be >= 1"):
        PolicyOptions(micro_batches=0)
    with pytest.raises(ValueError, match="priority must be one of"):
        PolicyOptions(priority="random")


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("m", [1, 2, 4])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_every_part_runs_once_in_order_on_its_version(stages, m, split):
    if m == 1 and not split:
        pytest.skip("the paper's schedule (CSP itself)")
    plan = make_plan(6, 3, stages, seed=3)
    n = 24
    timeline = run(plan, "csp", n, m, split)
    per_part = (2 + split) * m  # forwards, backwards (and weight tasks) of each part
    for k in range(stages):
        tasks = timeline.tasks(k)
        assert len(tasks) == n * (per_part + 1)
        assert len(set(tasks)) == len(tasks)
    check_part_order(plan, timeline, m, split)


@settings(max_examples=40, deadline=None)
@given(blocks=st.integers(4, 6), candidates=st.integers(1, 3), stages=st.integers(1, 5), m=st.integers(1, 4),
       split=st.booleans(), inflight=st.integers(1, 6), seed=st.integers(0, 50),
       priority=st.sampled_from(["critical", "fifo"]))
def test_random_streams_keep_the_version_rule_and_part_order(blocks, candidates, stages, m, split, inflight, seed,
                                                            priority):
    if m == 1 and not split:
        split = True
    plan = make_plan(blocks, candidates, stages, seed=seed)
    timeline = run(plan, "csp", 16, m, split, priority, inflight)
    check_part_order(plan, timeline, m, split)


@pytest.mark.parametrize("subnets", [[(0, 0, 0)] * 8, [(i % 2, i % 2, i % 2) for i in range(8)]])
def test_adversarial_streams_finish(subnets):
    plan = make_plan(3, 2, 3, stream=FixedStream(subnets))
    for split in (False, True):
        timeline = run(plan, "csp", len(subnets), 3, split)
        check_part_order(plan, timeline, 3, split)


def test_sequential_keeps_one_subnet_in_the_pipeline():
    plan = make_plan(4, 2, 3)
    timeline = run(plan, "sequential", 6, 2, True)
    slots = sorted((slot for k in range(3) for slot in timeline.stages[k]), key=lambda s: s.start)
    seen_done: set[int] = set()
    for slot in slots:  # a subnet's first task starts only after the previous subnet's last update
        y = slot.task.subnet
        assert all(x in seen_done for x in range(y)) or any(s.task.subnet == y for s in slots if s.end <= slot.start)
        if slot.task.kind is Kind.UPDATE and slot.task.stage == 0:
            seen_done.add(y)
    stage0 = [t for t in timeline.tasks(0)]
    assert [t.subnet for t in stage0] == sorted(t.subnet for t in stage0)


def test_one_subnet_fills_the_pipeline_with_parts():
    """A stream whose subnets all share every layer: m = 1 runs them one stage at a time, m = D
    pipelines each subnet's parts (GPipe's fill and drain)."""
    d = 4
    plan = make_plan(4, 1, d, stream=FixedStream([(0, 0, 0, 0)] * 8))
    whole = drive(plan, "csp", 8, PolicyOptions(), on_start=_check_versions).makespan
    parts = run(plan, "csp", 8, d, False).makespan
    # with parts: at most a GPipe fill and drain per subnet, (m + D - 1) part-slots of 3/m each
    assert parts <= 8 * (d + d - 1) * 3 / d
    assert parts < whole / 2


def test_split_backward_and_critical_priority_shorten_a_causal_chain():
    """Half the consecutive pairs share a layer: the split backward and the critical order each help."""
    plan = make_plan(12, 2, 8, seed=7)
    fifo = run(plan, "csp", 48, 8, False, "fifo", inflight=16).makespan
    split_fifo = run(plan, "csp", 48, 8, True, "fifo", inflight=16).makespan
    split_critical = run(plan, "csp", 48, 8, True, "critical", inflight=16).makespan
    assert split_critical <= split_fifo <= fifo
