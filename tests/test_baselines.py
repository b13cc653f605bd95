"""Baseline policies in the scheduling core (virtual time): GPipe, PipeDream, VPipe, CSP w/o scheduler."""

from __future__ import annotations

import importlib
import random

import pytest

from naspipe.scheduling import Kind, PolicyOptions, format_schedule
from naspipe.scheduling.driver import DeadlockError, Timeline, drive
from naspipe.scheduling.policies import POLICIES, POLICY_NAMES
from tests.conftest import FixedStream, make_plan

BASELINES = ("gpipe", "pipedream", "vpipe", "csp-no-scheduler")


def run(plan, system: str, n: int, bulk: int = 1, duration=None) -> Timeline:
    options = PolicyOptions(max_inflight=2 * plan.num_stages, bulk_size=bulk)
    kwargs = {"duration": duration} if duration is not None else {}
    return drive(plan, system, n, options, **kwargs)


def schedules(timeline: Timeline) -> list[str]:
    return [format_schedule(timeline.tasks(k)) for k in range(len(timeline.stages))]


def test_registry_and_docstrings():
    assert set(BASELINES) <= set(POLICY_NAMES)
    for name in BASELINES:
        text = importlib.import_module(POLICIES[name].__module__).__doc__
        assert "update semantics" in text.lower()
        assert "section" in text  # which paper section / system it follows


def test_gpipe_runs_forwards_then_backwards_then_flush():
    plan = make_plan(4, 3, 2)
    assert schedules(run(plan, "gpipe", 4, bulk=2)) == [
        "0F0 0F1 0B1 0B0 0U0 0U1 0F2 0F3 0B3 0B2 0U2 0U3",
        "1F0 1F1 1B1 1B0 1U0 1U1 1F2 1F3 1B3 1B2 1U2 1U3",
    ]


@pytest.mark.parametrize("system", ["gpipe", "vpipe"])
@pytest.mark.parametrize(("stages", "bulk", "n"), [(1, 3, 7), (2, 2, 9), (3, 3, 9), (4, 2, 11), (4, 4, 8), (3, 5, 12)])
def test_bsp_bulk_reads_one_version_and_updates_in_subnet_order(system, stages, bulk, n):
    plan = make_plan(6, 3, stages, seed=stages * 10 + bulk)
    timeline = run(plan, system, n, bulk=bulk)
    for slots in timeline.stages:
        assert sum(s.task.kind is Kind.UPDATE for s in slots) == n
        updates = [s for s in slots if s.task.kind is Kind.UPDATE]
        assert [s.task.subnet for s in updates] == list(range(n))  # flush in subnet order
        for slot in slots:
            if slot.task.kind is Kind.UPDATE:
                continue
            b = slot.task.subnet // bulk
            # after every update of the previous bulk, before any update of its own bulk
            assert all(u.end <= slot.start for u in updates if u.task.subnet // bulk < b)
            assert all(u.start >= slot.end for u in updates if u.task.subnet // bulk == b)


def test_bsp_without_the_stream_end_needs_whole_bulks():
    plan = make_plan(6, 3, 3)
    options = PolicyOptions(bulk_size=3)
    whole = drive(plan, "gpipe", 9, options, announce_end=False)  # 3 whole bulks: no hint needed
    assert whole.makespan == drive(plan, "gpipe", 9, options).makespan
    assert all(sum(s.task.kind is Kind.UPDATE for s in slots) == 9 for slots in whole.stages)
    # the control: a cut-short last bulk is never flushed unless the end is announced
    with pytest.raises(DeadlockError, match="stalled"):
        drive(plan, "gpipe", 8, options, announce_end=False)
    assert all(sum(s.task.kind is Kind.UPDATE for s in slots) == 8 for slots in drive(plan, "gpipe", 8, options).stages)


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("bulk", [1, 2, 4, 8])
def test_gpipe_bubble_is_exactly_the_formula_in_virtual_time(stages, bulk):
    plan = make_plan(6, 3, stages, seed=1)
    for fwd, bwd in ((1.0, 2.0), (1.0, 3.0), (2.0, 2.0)):
        durations = {Kind.FORWARD: fwd, Kind.BACKWARD: bwd, Kind.UPDATE: 0.0}
        timeline = run(plan, "gpipe", 3 * bulk, bulk=bulk, duration=lambda t, d=durations: d[t.kind])
        assert timeline.bubble_ratio() == pytest.approx((stages - 1) / (bulk + stages - 1), abs=1e-12)


def test_pipedream_is_1f1b_with_warmup():
    plan = make_plan(6, 3, 3)
    assert schedules(run(plan, "pipedream", 6)) == [
        "0F0 0F1 0F2 0B0 0U0 0F3 0B1 0U1 0F4 0B2 0U2 0F5 0B3 0U3 0B4 0U4 0B5 0U5",
        "1F0 1F1 1B0 1U0 1F2 1B1 1U1 1F3 1B2 1U2 1F4 1B3 1U3 1F5 1B4 1U4 1B5 1U5",
        "2F0 2B0 2U0 2F1 2B1 2U1 2F2 2B2 2U2 2F3 2B3 2U3 2F4 2B4 2U4 2F5 2B5 2U5",
    ]


@pytest.mark.parametrize("stages", [1, 2, 3, 5])
def test_pipedream_shape_holds_at_any_depth_and_timing(stages):
    """Warm-up of D-1-k forwards, strict alternation, U right after B, at most D-k in flight;
    and with the stream's end known, the per-stage order does not depend on task durations."""
    plan = make_plan(6, 3, stages, seed=3)
    n = 13
    reference = schedules(run(plan, "pipedream", n))
    for seed in range(5):
        rng = random.Random(seed)
        durations = {}

        def duration(task, durations=durations, rng=rng):
            return durations.setdefault(task, rng.uniform(0.1, 3.0))

        assert schedules(run(plan, "pipedream", n, duration=duration)) == reference
    for k, text in enumerate(reference):
        tasks = text.split()
        fb = [t for t in tasks if "U" not in t]
        warm = stages - 1 - k
        assert all("F" in t for t in fb[: warm + 1])
        steady = fb[warm:]
        kinds = "".join("F" if "F" in t else "B" for t in steady)
        forwards_left = n - warm
        assert kinds == "FB" * forwards_left + "B" * warm
        for i, t in enumerate(tasks):
            if "B" in t:
                assert tasks[i + 1] == t.replace("B", "U")


@pytest.mark.parametrize("bwd", [1.0, 2.0, 3.0])
def test_pipedream_without_the_stream_end_does_not_stall(bwd):
    durations = {Kind.FORWARD: 1.0, Kind.BACKWARD: bwd, Kind.UPDATE: 0.0}
    for stages in (2, 3, 4):
        plan = make_plan(6, 3, stages)
        timeline = drive(plan, "pipedream", 7, duration=lambda t, d=durations: d[t.kind], announce_end=False)
        assert all(sum(s.task.kind is Kind.UPDATE for s in slots) == 7 for slots in timeline.stages)
        assert all(sum(s.task.kind is Kind.FORWARD for s in slots) == 7 for slots in timeline.stages)


def test_csp_without_scheduler_runs_one_subnet_at_a_time():
    disjoint = make_plan(4, 6, 3, stream=FixedStream([(i % 6,) * 4 for i in range(12)]))
    options = PolicyOptions(max_inflight=6)
    ablation = drive(disjoint, "csp-no-scheduler", 12, options)
    order = [(s.start, s.task.subnet) for slots in ablation.stages for s in slots]
    in_time = [y for _, y in sorted(order)]
    assert in_time == sorted(in_time)
    assert ablation.makespan == pytest.approx(drive(disjoint, "sequential", 12).makespan)
    assert drive(disjoint, "csp", 12, options).makespan < 0.6 * ablation.makespan


@pytest.mark.parametrize(
    "subnets",
    [[(0, 0, 0, 0)] * 12, [(i % 6,) * 4 for i in range(12)], [((i * 7) % 6, (i * 5) % 6, i % 6, 0) for i in range(11)]],
    ids=["identical", "disjoint", "mixed"],
)
@pytest.mark.parametrize("system", BASELINES)
def test_baselines_finish_adversarial_streams(subnets, system):
    for stages in (1, 2, 3, 6):
        plan = make_plan(4, 6, stages, stream=FixedStream(subnets))
        timeline = run(plan, system, len(subnets), bulk=stages)
        assert all(sum(s.task.kind is Kind.UPDATE for s in slots) == len(subnets) for slots in timeline.stages)
