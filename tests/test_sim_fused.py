"""``completed_then_next`` decides exactly as ``completed`` then ``next_task`` (issue 22, fifth pass).

The simulator's engine calls the fused method after every task of a stage other than stage 0 (not
after a last-stage forward nor a mirrored update); the runtime keeps the two calls. CSP overrides it
with one pass. Before every completion of whole pipeline runs, two copies of the live policy take
the two routes; their answers and their whole state must agree.
"""

from __future__ import annotations

import pytest

from naspipe.partition import balanced_partition
from naspipe.scheduling import PolicyOptions
from naspipe.scheduling.driver import drive
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies import POLICIES, StagePolicy
from naspipe.scheduling.policies.csp import CSP
from naspipe.scheduling.task import Kind, Task
from tests.conftest import make_plan, make_structure

CHECKED = {"count": 0}


def _state(policy: StagePolicy) -> dict[str, object]:
    """Everything a decision may read or change (CSP's queues, counters, version table)."""
    keep = {}
    for name, value in vars(policy).items():
        if name == "versions":
            value = (dict(value._version), {k: list(q) for k, q in value._waiting.items() if q},
                     dict(value._required), {k: list(v) for k, v in value._local.items()})
        elif name in ("plan", "options", "_rows", "_chunks", "_window"):
            continue
        keep[name] = value if isinstance(value, (int, bool, type(None))) else repr(value)
    return keep


def _checking(cls: type[StagePolicy]) -> type[StagePolicy]:
    class Checked(cls):  # type: ignore[valid-type, misc]
        def completed(self, task: Task) -> None:
            if self.speculative:  # one of the two copies below
                cls.completed(self, task)
                return
            fused, plain = self.clone(), self.clone()
            got = cls.completed_then_next(fused, task)
            cls.completed(plain, task)
            assert got == plain.next_task(), (task, got)
            assert _state(fused) == _state(plain), task
            CHECKED["count"] += 1
            super().completed(task)

    Checked.name = cls.name
    return Checked


def _plans() -> list[tuple[str, PipelinePlan]]:
    plans = [(f"static-{s}-{policy}", make_plan(9, c, s, seed=s + c, shared_policy=policy))
             for s, c, policy in [(1, 2, "frozen"), (3, 2, "causal"), (4, 3, "windowed"), (8, 5, "frozen")]]
    structure = make_structure(8, 3)
    base = make_plan(8, 3, 3, seed=5)
    plans.append(("per-subnet-3", PipelinePlan.per_subnet(structure, balanced_partition(
        [1.0] * structure.num_positions, 3), base.stream, [1.0 + (lid % 4) for lid in range(structure.num_layers)])))
    return plans


@pytest.mark.parametrize("system", ["csp", "csp-no-scheduler", "csp-artifact", "gpipe", "pipedream", "sequential"])
@pytest.mark.parametrize(("label", "plan"), _plans(), ids=[label for label, _ in _plans()])
def test_fused_completion_decides_as_the_two_calls(system, label, plan, monkeypatch):
    cls = POLICIES[system]
    if plan.mirrored and not cls.mirroring:
        pytest.skip("per-subnet plans need mirroring")
    if plan.windowed and not cls.windowed_shared:
        pytest.skip("windowed shared layers need the window rule")
    monkeypatch.setitem(POLICIES, system, _checking(cls))
    before = CHECKED["count"]

    def irregular(task: Task) -> float:  # forwards overtake, stages idle at random points
        return {Kind.FORWARD: 1.0 + (task.subnet * 7 + task.stage) % 3, Kind.BACKWARD: 2.0 + task.subnet % 2,
                Kind.UPDATE: 0.0}[task.kind]

    drive(plan, system, 40, PolicyOptions(max_inflight=2 * plan.num_stages, bulk_size=plan.num_stages), irregular)
    assert CHECKED["count"] - before >= 40 * plan.num_stages  # every completion was checked


def test_a_subclass_that_changes_a_part_gets_the_two_calls():
    class Other(CSP):
        def next_task(self) -> Task | None:
            return super().next_task()

    class Own(CSP):
        def completed(self, task: Task) -> None:
            super().completed(task)

        def completed_then_next(self, task: Task) -> Task | None:
            return super().completed_then_next(task)

    assert Other.completed_then_next is StagePolicy.completed_then_next
    assert CSP.completed_then_next is not StagePolicy.completed_then_next
    assert Own.__dict__["completed_then_next"] is not StagePolicy.completed_then_next
