"""The scheduling core: tasks as data, the version rule, CSP vs the paper's Algorithm 2."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.scheduling import Kind, PolicyOptions, Task, VersionTable, format_schedule, parse_schedule
from naspipe.scheduling.driver import DeadlockError, Timeline, drive
from naspipe.scheduling.policies.base import StagePolicy
from tests.conftest import FixedStream, make_plan


class LiteralAlgorithm2(StagePolicy):
    """The paper's Algorithm 2, written literally: rescan every earlier unfinished subnet.

    Backward (then its update) first; otherwise scan the arrived forwards in id order and run
    the first one that shares no layer on this stage with any earlier subnet that has not
    finished (written its update) on this stage.
    """

    name = "literal"

    def __init__(self, stage, plan, options):
        super().__init__(stage, plan, options)
        self.arrived: list[int] = []
        self.backward: list[int] = []
        self.update: list[int] = []
        self.unfinished: list[int] = []  # registered here, update not yet written, in id order

    def may_admit(self, subnet: int) -> bool:
        return self.inflight < self.options.max_inflight

    def _on_register(self, subnet: int) -> None:
        self.unfinished.append(subnet)

    def _on_forward(self, subnet: int) -> None:
        self.arrived.append(subnet)

    def _on_backward(self, subnet: int) -> None:
        heapq.heappush(self.backward, subnet)

    def _on_completed(self, task: Task) -> None:
        if task.kind is Kind.BACKWARD:
            heapq.heappush(self.update, task.subnet)
        elif task.kind is Kind.UPDATE:
            self.unfinished.remove(task.subnet)

    def next_task(self) -> Task | None:
        if self.update:
            return self.task(Kind.UPDATE, heapq.heappop(self.update))
        if self.backward:
            return self.task(Kind.BACKWARD, heapq.heappop(self.backward))
        for subnet in sorted(self.arrived):
            mine = set(self.plan.trainable_layers(subnet, self.stage))
            earlier = (x for x in self.unfinished if x < subnet)
            if all(not mine & set(self.plan.trainable_layers(x, self.stage)) for x in earlier):
                self.arrived.remove(subnet)
                return self.task(Kind.FORWARD, subnet)
        return None


def timelines(plan, n: int, options: PolicyOptions) -> tuple[Timeline, Timeline]:
    csp = drive(plan, "csp", n, options)
    literals = [LiteralAlgorithm2(k, plan, options) for k in range(plan.num_stages)]
    literal = drive(plan, "csp", n, options, policies=literals)
    return csp, literal


def check_version_rule(plan, timeline: Timeline) -> None:
    """No F/B of y touches a layer before every earlier user wrote it, nor after a later one did."""
    for stage, slots in enumerate(timeline.stages):
        updates = {s.task.subnet: s for s in slots if s.task.kind is Kind.UPDATE}
        for slot in slots:
            y = slot.task.subnet
            if slot.task.kind is Kind.UPDATE:
                continue
            mine = set(plan.trainable_layers(y, stage))
            for x, update in updates.items():
                if x == y or not mine & set(plan.trainable_layers(x, stage)):
                    continue
                if x < y:
                    assert update.end <= slot.start, f"{slot.task} ran before {update.task} wrote a shared layer"
                else:
                    assert update.start >= slot.end, f"{slot.task} ran after later {update.task} wrote a shared layer"


def test_task_round_trip():
    text = "0F0 0F1 1F0 1B0 1U0 0B0 12U345"
    assert format_schedule(parse_schedule(text)) == text
    assert Task.parse("2F5") == Task(Kind.FORWARD, 5, 2)
    with pytest.raises(ValueError, match="not a task"):
        Task.parse("F5")


def test_version_table_orders_writers():
    table = VersionTable()
    assert table.register(0, [10, 11]) == 0
    assert table.register(1, [11, 12]) == 1  # waits on 0 for layer 11
    assert table.register(2, [11]) == 1
    assert table.may_access(0, 11) and not table.may_access(1, 11)
    assert table.write(0, 11) == 1  # the next user of 11 is unblocked
    assert table.may_access(1, 11) and not table.may_access(2, 11)
    with pytest.raises(RuntimeError, match="wrote layer 11"):
        table.write(2, 11)
    assert table.version(11) == 1 and table.required(2, 11) == 2


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 8])
def test_csp_matches_literal_algorithm2(stages):
    for seed in range(5):
        plan = make_plan(blocks=8, candidates=3, stages=stages, seed=seed)
        csp, literal = timelines(plan, 40, PolicyOptions(max_inflight=2 * stages))
        for k in range(stages):
            assert format_schedule(csp.tasks(k)) == format_schedule(literal.tasks(k))


@settings(max_examples=60, deadline=None)
@given(
    blocks=st.integers(2, 10),
    candidates=st.integers(1, 4),
    stages=st.integers(1, 6),
    inflight=st.integers(1, 12),
    seed=st.integers(0, 10_000),
    fwd=st.integers(1, 3),
    bwd=st.integers(1, 4),
)
def test_random_streams_match_literal_and_keep_the_version_rule(blocks, candidates, stages, inflight, seed, fwd, bwd):
    stages = min(stages, blocks + 2)
    plan = make_plan(blocks, candidates, stages, seed)
    options = PolicyOptions(max_inflight=inflight)
    durations = {Kind.FORWARD: float(fwd), Kind.BACKWARD: float(bwd), Kind.UPDATE: 0.5}
    csp = drive(plan, "csp", 30, options, duration=lambda t: durations[t.kind])
    literal = drive(plan, "csp", 30, options, duration=lambda t: durations[t.kind],
                    policies=[LiteralAlgorithm2(k, plan, options) for k in range(stages)])
    for k in range(stages):
        assert csp.tasks(k) == literal.tasks(k)
    check_version_rule(plan, csp)


@pytest.mark.parametrize(
    "subnets",
    [
        [(0, 0, 0, 0)] * 24,  # every subnet identical: fully serialised, must not deadlock
        [(i % 6,) * 4 for i in range(24)],  # disjoint within any window of 6
        [((i * 7) % 6, (i * 5) % 6, i % 6, (i // 6) % 6) for i in range(24)],
    ],
    ids=["identical", "disjoint", "mixed"],
)
@pytest.mark.parametrize("system", ["csp", "sequential"])
def test_adversarial_streams_finish(subnets, system):
    for stages in (1, 2, 3, 6):
        plan = make_plan(4, 6, stages, stream=FixedStream(subnets))
        timeline = drive(plan, system, len(subnets), PolicyOptions(max_inflight=8))
        check_version_rule(plan, timeline)
        assert all(sum(s.task.kind is Kind.UPDATE for s in slots) == len(subnets) for slots in timeline.stages)


def test_disjoint_subnets_overlap_and_identical_ones_serialise():
    disjoint = make_plan(4, 6, 3, stream=FixedStream([(i % 6,) * 4 for i in range(12)]))
    identical = make_plan(4, 6, 3, stream=FixedStream([(0,) * 4] * 12))
    seq = drive(disjoint, "sequential", 12).makespan
    assert drive(disjoint, "csp", 12, PolicyOptions(max_inflight=6)).makespan < 0.6 * seq
    assert drive(identical, "csp", 12, PolicyOptions(max_inflight=6)).makespan == pytest.approx(seq)


def test_sequential_runs_one_subnet_at_a_time():
    plan = make_plan(6, 3, 3, seed=1)
    timeline = drive(plan, "sequential", 5)
    order = [(s.start, s.task.subnet) for slots in timeline.stages for s in slots]
    subnets_in_time_order = [y for _, y in sorted(order)]
    assert subnets_in_time_order == sorted(subnets_in_time_order)


def test_causal_shared_layers_serialise_the_pipeline():
    plan = make_plan(6, 4, 3, seed=2, shared_policy="causal")
    timeline = drive(plan, "csp", 10, PolicyOptions(max_inflight=6))
    check_version_rule(plan, timeline)
    # Everyone uses the embedding on stage 0: forwards of y+1 wait for y's update there.
    stage0 = timeline.stages[0]
    updates = {s.task.subnet: s.end for s in stage0 if s.task.kind is Kind.UPDATE}
    for slot in stage0:
        if slot.task.kind is Kind.FORWARD and slot.task.subnet > 0:
            assert slot.start >= updates[slot.task.subnet - 1]


def test_deadlock_is_reported():
    class Stubborn(LiteralAlgorithm2):
        def next_task(self):
            return None

    plan = make_plan(2, 2, 1)
    with pytest.raises(DeadlockError, match="stalled"):
        drive(plan, "csp", 3, policies=[Stubborn(0, plan, PolicyOptions())])
