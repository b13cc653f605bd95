"""The predictor: the stage's own policy run ahead on a copy of its state."""

from __future__ import annotations

import pytest

from naspipe.scheduling import Kind, Task
from naspipe.scheduling.driver import drive
from naspipe.scheduling.policies.base import StagePolicy
from naspipe.scheduling.predictor import layer_uses, predict, task_layers
from tests.conftest import make_plan


def test_one_stage_prediction_is_exactly_what_runs_next() -> None:
    plan = make_plan(blocks=4, candidates=3, stages=1, seed=2)
    n, horizon = 24, 6
    predicted: list[list[Task]] = []

    def look(task: Task, policy: StagePolicy) -> None:
        predicted.append(predict(policy, horizon, n, running=task))

    actual = drive(plan, "csp", n, on_start=look).tasks(0)
    for i, guess in enumerate(predicted):
        assert guess == actual[i + 1 : i + 1 + horizon]


@pytest.mark.parametrize("system", ["csp", "csp-no-scheduler", "gpipe", "pipedream"])
def test_predicting_never_changes_what_the_live_policy_decides(system: str) -> None:
    plan = make_plan(blocks=6, candidates=2, stages=3, seed=1)
    n = 16
    plain = drive(plan, system, n)
    lengths: list[int] = []

    def look(task: Task, policy: StagePolicy) -> None:
        tasks = predict(policy, 8, n, running=task)
        assert all(t.stage == policy.stage and t.subnet < n for t in tasks)
        lengths.append(len(tasks))

    watched = drive(plan, system, n, on_start=look)
    assert watched.stages == plain.stages
    assert max(lengths) == 8 and lengths[-1] == 0  # the last task has no future


@pytest.mark.parametrize(("stages", "floor"), [(2, 0.85), (4, 0.5)])
def test_csp_pipeline_prediction_mostly_names_the_next_layers(stages: int, floor: float) -> None:
    """Arrival times are unknown to the copy, so a pipeline's prediction is not exact; but the
    layers of the next four tasks (what the cache needs) are right most of the time. Virtual
    time makes the fraction deterministic, so the floor is a regression guard, not a timing."""
    plan = make_plan(blocks=8, candidates=4, stages=stages, seed=3)
    n, horizon = 60, 4
    guesses: dict[int, list[list[Task]]] = {k: [] for k in range(stages)}

    def look(task: Task, policy: StagePolicy) -> None:
        guesses[policy.stage].append(predict(policy, horizon, n, running=task))

    timeline = drive(plan, "csp", n, on_start=look)
    right = total = 0
    for stage, seen in guesses.items():
        actual = timeline.tasks(stage)
        for i, guess in enumerate(seen):
            assert all(t in actual[i + 1 :] for t in guess)  # a predicted task does run later
            want = {lid for lids in layer_uses(plan, actual[i + 1 : i + 1 + horizon]) for lid in lids}
            right += {lid for lids in layer_uses(plan, guess) for lid in lids} == want
            total += 1
    assert right / total >= floor


def test_layers_of_a_task() -> None:
    plan = make_plan(blocks=4, candidates=2, stages=2, seed=0, shared_policy="frozen")
    forward = Task(Kind.FORWARD, 3, 0)
    update = Task(Kind.UPDATE, 3, 0)
    assert task_layers(plan, forward) == plan.stage_layers(3, 0)
    assert task_layers(plan, update) == plan.trainable_layers(3, 0)
    assert layer_uses(plan, [forward, update]) == [plan.stage_layers(3, 0), plan.trainable_layers(3, 0)]


def test_zero_horizon_predicts_nothing() -> None:
    plan = make_plan(blocks=4, candidates=2, stages=2)
    seen: list[list[Task]] = []
    drive(plan, "csp", 4, on_start=lambda task, policy: seen.append(predict(policy, 0, 4, task)))
    assert seen and all(not s for s in seen)
