"""Micro-batched GPipe and VPipe in the scheduling core: bulk synchronous over parts.

What the runtime's bits rest on: every part runs once; a subnet's gradient-summing tasks run in
part order before its update; the bulk reads one version (no update of a bulk before its last
gradient task, no forward of the next bulk before the flush); and the bulk fills the pipeline."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.scheduling import PolicyOptions
from naspipe.scheduling.driver import Timeline, drive
from naspipe.scheduling.policies import make_policy, supports_micro_batches
from naspipe.scheduling.policies.micro_gpipe import MicroGPipe, MicroVPipe
from naspipe.scheduling.task import Kind
from tests.conftest import make_plan
from tests.test_micro_schedule import check_part_order, micro_durations, split_durations


def run(stages: int, n: int, m: int, split: bool, bulk: int, system: str = "gpipe") -> Timeline:
    plan = make_plan(6, 3, stages, seed=3)
    options = PolicyOptions(bulk_size=bulk, micro_batches=m, split_backward=split)
    return drive(plan, system, n, options, split_durations(m) if split else micro_durations(m))


def check_bulks(timeline: Timeline, stages: int, n: int, m: int, split: bool, bulk: int) -> None:
    """On every stage: each bulk's parts all run before its flush, the flush is its updates in subnet order,
    and nothing of the next bulk runs before that flush ends."""
    per_part = 3 if split else 2  # F, B (and W)
    for k in range(stages):
        tasks = timeline.tasks(k)
        assert len(tasks) == n * (m * per_part + 1)
        position = 0
        for start in range(0, n, bulk):
            members = range(start, min(start + bulk, n))
            work = len(members) * m * per_part
            body, flush = tasks[position:position + work], tasks[position + work:position + work + len(members)]
            assert {t.subnet for t in body} <= set(members), (k, start)
            assert all(t.kind is not Kind.UPDATE for t in body)
            assert [(t.kind, t.subnet) for t in flush] == [(Kind.UPDATE, y) for y in members]
            position += work + len(members)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize(("stages", "m", "bulk"), [(1, 2, 1), (2, 2, 2), (3, 4, 2), (4, 3, 4), (4, 1, 3)])
def test_bulks_flush_in_order_with_parts_summed_in_order(stages, m, bulk, split):
    if m == 1 and not split:
        pytest.skip("m = 1 without a split is the paper's GPipe")
    timeline = run(stages, 7, m, split, bulk)
    check_bulks(timeline, stages, 7, m, split, bulk)
    check_part_order(make_plan(6, 3, stages, seed=3), timeline, m, split)


@settings(max_examples=40, deadline=None)
@given(stages=st.integers(1, 5), m=st.integers(1, 4), bulk=st.integers(1, 5), n=st.integers(1, 9),
       split=st.booleans())
def test_any_bulk_and_part_count_finishes_in_order(stages, m, bulk, n, split):
    if m == 1 and not split:
        return
    timeline = run(stages, n, m, split, bulk)
    check_bulks(timeline, stages, n, m, split, bulk)


def test_the_last_stage_runs_each_parts_backward_after_its_forward():
    """It keeps a part's activations for its backward, not the bulk's: F then B, part after part."""
    timeline = run(3, 4, 2, False, 4)
    last = [(t.kind, t.subnet, t.micro) for t in timeline.tasks(2) if t.kind is not Kind.UPDATE]
    assert last[:4] == [(Kind.FORWARD, 0, 0), (Kind.BACKWARD, 0, 0), (Kind.FORWARD, 0, 1), (Kind.BACKWARD, 0, 1)]


def test_parts_fill_the_pipeline_faster_than_whole_subnets():
    """The point of the form: a bulk of D subnets in m parts has a shorter flush bubble than unsplit."""
    whole = drive(make_plan(8, 3, 4, seed=3), "gpipe", 8, PolicyOptions(bulk_size=4))
    parts = run(4, 8, 4, False, 4)
    assert parts.bubble_ratio() < whole.bubble_ratio()


def test_registry_gives_gpipe_and_vpipe_their_micro_forms():
    plan = make_plan(4, 3, 2)
    options = PolicyOptions(micro_batches=2, bulk_size=2)
    assert type(make_policy("gpipe", 0, plan, options)) is MicroGPipe
    assert type(make_policy("vpipe", 1, plan, options)) is MicroVPipe
    assert MicroVPipe.swap_parameters and MicroGPipe.stash_gradients and MicroGPipe.bulk_synchronous
    assert supports_micro_batches("gpipe") and not supports_micro_batches("pipedream")
