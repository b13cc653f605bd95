"""The simulator's context-cache residency: its memo of the predicted tasks' layer lists."""

from __future__ import annotations

from naspipe.scheduling.predictor import task_layers
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, Task
from naspipe.sim.residency import _TaskLayers
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
