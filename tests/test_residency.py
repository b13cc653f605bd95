"""The simulator's context-cache residency: its memo of the predicted tasks' layer lists."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from naspipe.config import CacheConfig
from naspipe.scheduling import PolicyOptions
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.predictor import task_layers
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, Task
from naspipe.sim import run
from naspipe.sim.costs import LayerInfo, analytic_costs
from naspipe.sim.hardware import load_hardware
from naspipe.sim.residency import ContextCache, _TaskLayers
from naspipe.sim.run import SimSetup, simulate_run
from tests.conftest import make_plan


@pytest.mark.parametrize("mirrored", [False, True])
def test_task_layers_memo_answers_as_task_layers(mirrored: bool) -> None:
    """Answered from the plan's caches directly, it must equal :func:`task_layers` for every kind (an update's
    are the trainable layers only) on every stage, on a static plan (slices of the subnet's layers) and with
    per-subnet partitions (the plan's per-stage cache)."""
    plan = make_plan(6, 3, 3)
    if mirrored:  # uneven costs: the subnets' own cuts differ from the home partition's
        costs = [1.0 + (lid * 7) % 5 for lid in range(plan.structure.num_layers)]
        plan = PipelinePlan.per_subnet(plan.structure, plan.partition, plan.stream, costs)
        assert any(plan.partition_of(s).bounds != plan.partition.bounds for s in range(5))
    differ = 0  # updates whose layers are not the forward's (the frozen shared layers of the end stages)
    for stage in range(plan.num_stages):
        memo = _TaskLayers(plan)
        tasks = [Task(kind, subnet, stage) for subnet in range(5) for kind in (FORWARD, BACKWARD, UPDATE)]
        assert [memo[task] for task in tasks] == [task_layers(plan, task) for task in tasks]
        differ += sum(memo[Task(UPDATE, s, stage)] != memo[Task(FORWARD, s, stage)] for s in range(5))
        for kind in (FORWARD, BACKWARD, UPDATE):  # as ContextCache.acquire drops a task's entry when it starts
            memo.pop(Task(kind, 2, stage), None)
        assert set(memo) == {task for task in tasks if task.subnet != 2}
    assert differ


def _slow_copies(subnets: int) -> SimSetup:
    """csp with the context cache on a small plan, copies priced on a real link (analytic costs): slow enough
    that a task often starts before the copies it needs have landed."""
    plan = make_plan(6, 3, 3)
    info = [LayerInfo(1_000_000 * (1 + lid % 5), 1e6 * (1 + lid % 3), 4096.0, 16384.0)
            for lid in range(plan.structure.num_layers)]
    costs = analytic_costs(info, load_hardware("rtx2080ti-pcie3-40gbe"), 8, 1)
    return SimSetup(plan, "csp", subnets, PolicyOptions(max_inflight=3, bulk_size=3), costs, True,
                    cache=CacheConfig(enabled=True, budget="1.5x", horizon=8))


def test_copies_that_landed_are_arrived_in_the_device_cache_at_every_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slow copies (analytic costs): a task starts while some copies have landed and the last one has not, so
    :meth:`ContextCache._land_due` lands only those due. At every task, each layer the device cache holds is
    resident (arrived) exactly when its copy is no longer on its way, and every copy due has landed."""
    partial = [0]

    class Checked(ContextCache):
        def acquire(self, task: Task, layers: tuple[int, ...], now: float) -> float:
            ready = super().acquire(task, layers, now)
            held = [lid for lid in range(len(self.cache.sizes)) if self.cache.holds(lid)]
            assert all(self.cache.is_resident(lid) == (lid not in self.landing) for lid in held)
            assert all(lands > now for lands in self.landing.values())  # those due have landed (new ones later)
            return ready

        def _land_due(self, now: float) -> None:
            partial[0] += any(lands <= now for lands in self.landing.values())
            super()._land_due(now)
            assert all(lands > now for lands in self.landing.values())  # those due have landed

    monkeypatch.setattr(run, "ContextCache", Checked)
    setup = _slow_copies(40)
    metrics, _ = simulate_run(setup)
    assert partial[0] > 0 and 0 < metrics["cache_hit_rate"] < 1
    assert simulate_run(replace(setup, cache=None))[0]["cache_hit_rate"] == 1


@pytest.mark.parametrize("noop", [True, False])
def test_the_engine_calls_release_unless_every_residency_says_it_does_nothing(
        monkeypatch: pytest.MonkeyPatch, noop: bool) -> None:
    """:attr:`ContextCache.release_noop`: the engine skips the call per task (the release is folded into the
    acquire), and makes it, task by task, for a residency that does not say so: the same run either way."""
    released = [0]

    class Counted(ContextCache):
        release_noop = noop

        def release(self, task: Task, layers: tuple[int, ...], now: float) -> float:
            released[0] += 1
            return super().release(task, layers, now)

    setup = replace(_slow_copies(30), trace_max_events=10**6)
    plain = simulate_run(setup)
    monkeypatch.setattr(run, "ContextCache", Counted)
    assert simulate_run(setup) == plain
    assert released[0] == (0 if noop else 3 * 30 * setup.plan.num_stages)


def test_the_layer_list_memo_holds_only_tasks_yet_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's list is dropped when the task starts: at every task the memo holds only tasks that have not
    started, and at the end of the run (every predicted task ran) it is empty on every stage."""
    made: list[ContextCache] = []

    class Watched(ContextCache):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            made.append(self)
            self.ran: set[Task] = set()

        def acquire(self, task: Task, layers: tuple[int, ...], now: float) -> float:
            self.ran.add(task)
            ready = super().acquire(task, layers, now)
            assert self.ran.isdisjoint(self._uses)
            return ready

    monkeypatch.setattr(run, "ContextCache", Watched)
    simulate_run(_slow_copies(40))
    assert made and all(not residency._uses and len(residency.ran) == 3 * 40 for residency in made)
