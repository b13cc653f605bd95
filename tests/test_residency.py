"""The simulator's context-cache residency: its memo of the predicted tasks' layer lists."""

from __future__ import annotations

from dataclasses import replace

import pytest

from naspipe.config import CacheConfig
from naspipe.scheduling import PolicyOptions
from naspipe.scheduling.predictor import task_layers
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, Task
from naspipe.sim import run
from naspipe.sim.costs import LayerInfo, analytic_costs
from naspipe.sim.hardware import load_hardware
from naspipe.sim.residency import ContextCache, _TaskLayers
from naspipe.sim.run import SimSetup, simulate_run
from tests.conftest import make_plan


def test_task_layers_memo_answers_as_task_layers_and_forgets_a_subnet_at_its_update() -> None:
    """Answered from the plan's caches directly, it must equal :func:`task_layers` for every kind (an update's
    are the trainable layers only) on every stage; an update drops the subnet's three entries there."""
    plan = make_plan(6, 3, 3)
    differ = 0  # updates whose layers are not the forward's (the frozen shared layers of the end stages)
    for stage in range(plan.num_stages):
        memo = _TaskLayers(plan)
        tasks = [Task(kind, subnet, stage) for subnet in range(5) for kind in (FORWARD, BACKWARD, UPDATE)]
        assert [memo[task] for task in tasks] == [task_layers(plan, task) for task in tasks]
        differ += sum(memo[Task(UPDATE, s, stage)] != memo[Task(FORWARD, s, stage)] for s in range(5))
        memo.forget(Task(UPDATE, 2, stage))
        assert set(memo) == {task for task in tasks if task.subnet != 2}
    assert differ


def test_copies_that_landed_are_arrived_in_the_device_cache_at_every_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slow copies (analytic costs): a task starts while some copies have landed and the last one has not, so
    :meth:`ContextCache._land` lands only those due. At every task, each layer the device cache holds is
    resident (arrived) exactly when its copy is no longer on its way, and every copy due has landed."""
    partial = [0]

    class Checked(ContextCache):
        def acquire(self, task: Task, layers: tuple[int, ...], now: float) -> float:
            if self.landing and self._last_lands > now and any(t <= now for t in self.landing.values()):
                partial[0] += 1
            ready = super().acquire(task, layers, now)
            held = [lid for lid in range(len(self.cache.sizes)) if self.cache.holds(lid)]
            assert all(self.cache.is_resident(lid) == (lid not in self.landing) for lid in held)
            return ready

        def _land(self, now: float) -> None:
            super()._land(now)
            assert all(lands > now for lands in self.landing.values())  # those due have landed

    monkeypatch.setattr(run, "ContextCache", Checked)
    plan = make_plan(6, 3, 3)
    info = [LayerInfo(1_000_000 * (1 + lid % 5), 1e6 * (1 + lid % 3), 4096.0, 16384.0)
            for lid in range(plan.structure.num_layers)]
    costs = analytic_costs(info, load_hardware("rtx2080ti-pcie3-40gbe"), 8, 1)
    setup = SimSetup(plan, "csp", 40, PolicyOptions(max_inflight=3, bulk_size=3), costs, True,
                     cache=CacheConfig(enabled=True, budget="1.5x", horizon=8))
    metrics, _ = simulate_run(setup)
    assert partial[0] > 0 and 0 < metrics["cache_hit_rate"] < 1
    assert simulate_run(replace(setup, cache=None))[0]["cache_hit_rate"] == 1
