"""The micro-batched predictor's run ahead, a subnet at a time, answers what the part-by-part run ahead answers.

:func:`naspipe.scheduling.micro_predictor._run_ahead` takes a stage's long stretches of arrivals and
forwards a subnet at a time (:meth:`MicroCSP.arrivals_ahead`, :meth:`MicroCSP.forwards_ahead`). The
reference below is the rule of the module docstring run literally, one part per step, on the policy's
clone. Both are asked before every task of whole pipeline runs (irregular durations, so stages sit idle
at random points; stage counts, parts, split or whole backwards, priorities, the one-holder rule, in-flight
limits, crowded and sparse spaces), for several horizons and stream ends, and must agree; the stretches
taken a subnet at a time are counted, so the test cannot pass without them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest

from naspipe.scheduling.driver import drive
from naspipe.scheduling.micro_predictor import _run_ahead, predict_parts
from naspipe.scheduling.policies import PolicyOptions, make_policy
from naspipe.scheduling.policies.base import StagePolicy
from naspipe.scheduling.policies.micro import MicroCSP, as_plain
from naspipe.scheduling.task import FORWARD, Kind, MicroTask, Task
from tests.conftest import make_plan


def reference_run_ahead(policy: MicroCSP, horizon: int, end: int, running: MicroTask | None) -> list[Task]:
    """The part-by-part run ahead (the module docstring's rules, one arrival and one task per step)."""
    sim = policy.clone()
    arrivals = policy.pending_parts(end)
    pending = policy.awaiting_parts()
    depth = (policy.plan.num_stages - 1 - policy.stage) * policy.micro_batches
    out: list[Task] = []

    def complete(task: MicroTask) -> None:
        sim.completed(task)
        if task.kind is FORWARD:
            if sim.is_last:
                sim.backward_arrived(task.subnet, task.micro)
            else:
                pending.append((task.subnet, task.micro))

    if running is not None:
        complete(running)
    arrival = next(arrivals, None)
    while len(out) < horizon:
        task = sim.next_task()
        if task is not None:
            plain = as_plain(task)
            if not out or out[-1] != plain:
                out.append(plain)
            complete(task)
            continue
        can_arrive = arrival is not None and (not sim.is_first or sim.may_admit(arrival[0]))
        if pending and (len(pending) >= depth or not can_arrive):
            lowest = min(pending)
            pending.remove(lowest)
            sim.backward_arrived(*lowest)
            continue
        if not can_arrive:
            break
        assert arrival is not None
        subnet, micro = arrival
        if sim.is_first:  # an admission, part by part
            sim.admitted += 1
            for j in range(sim.micro_batches):
                sim.forward_arrived(subnet, j)
            while arrival is not None and arrival[0] == subnet:
                arrival = next(arrivals, None)
        else:
            sim.forward_arrived(subnet, micro)
            arrival = next(arrivals, None)
    return out


def durations(seed: int, m: int) -> Callable[[MicroTask], float]:
    """Irregular, deterministic part times (a part asked twice gets one time)."""
    rng = random.Random(seed)
    table: dict[MicroTask, float] = {}

    def duration(task: MicroTask) -> float:
        if task not in table:
            base = {Kind.FORWARD: 1.0, Kind.BACKWARD: 2.0, Kind.WEIGHT: 1.0, Kind.UPDATE: 0.3}[task.kind]
            table[task] = base * rng.uniform(0.2, 3.0) / m
        return table[task]

    return duration


class Batched:
    """Counts the subnet-at-a-time stretches the run aheads took, and those that ended in lazy arrivals."""

    def __init__(self) -> None:
        self.arrivals = 0
        self.admissions = 0
        self.lazy = 0


def _compare(stages: int, m: int, split: bool, priority: str, inflight: int, candidates: int, seed: int,
             one_holder: bool = False, n: int = 24) -> Batched:
    plan = make_plan(blocks=8, candidates=candidates, stages=stages, seed=seed)
    options = PolicyOptions(max_inflight=inflight, micro_batches=m, split_backward=split, priority=priority,
                            one_holder=one_holder)
    batched = Batched()
    arrive, admit = MicroCSP.arrivals_ahead, MicroCSP.forwards_ahead

    def arrive_counted(self: MicroCSP, arrival: tuple[int, int], runs: Iterator[tuple[int, int]],
                       limit: int, end: int) -> tuple[int, int, int, tuple[int, int] | None]:
        batched.arrivals += 1
        answer = arrive(self, arrival, runs, limit, end)
        batched.lazy += self._lazy is not None
        return answer

    def admit_counted(self: MicroCSP, subnet: int) -> int:
        ran = admit(self, subnet)
        batched.admissions += ran > 0
        return ran

    def look(task: MicroTask, policy: StagePolicy) -> None:
        assert isinstance(policy, MicroCSP)
        for horizon in (1, 3, 8):
            for end in (n, n + 3):
                assert _run_ahead(policy, horizon, end, task) == reference_run_ahead(policy, horizon, end, task), (
                    str(task), horizon, end)
        predict_parts(policy, 8, n, running=task)  # the memo, as the cache keeps it

    policies = [make_policy("csp", k, plan, options) for k in range(stages)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MicroCSP, "arrivals_ahead", arrive_counted)
        patch.setattr(MicroCSP, "forwards_ahead", admit_counted)
        drive(plan, "csp", n, options, duration=durations(seed, m), policies=policies,  # type: ignore[arg-type]
              on_start=look)  # type: ignore[arg-type]
    return batched


@pytest.mark.parametrize("stages", [1, 2, 4, 6])
@pytest.mark.parametrize(("m", "split"), [(1, True), (3, False), (4, True)])
def test_the_batched_run_ahead_answers_as_part_by_part(stages: int, m: int, split: bool) -> None:
    batched = _compare(stages, m, split, "critical", inflight=2 * stages, candidates=3, seed=stages + m)
    if stages > 2:
        assert batched.arrivals > 0
    if stages > 1:
        assert batched.admissions > 0


@pytest.mark.parametrize(("stages", "candidates"), [(5, 2), (3, 4)])
def test_lazy_arrivals_answer_as_the_stretch_would(stages: int, candidates: int) -> None:
    """Long streams: middle stages' stretches end with every later subnet blocked (lazy arrivals); looking for
    that after every blocked arrival, writes in the run ahead then often unblock a lazy subnet (registered
    first, up to it)."""
    from naspipe.scheduling.policies import micro

    made = 0
    original = MicroCSP._materialize_for

    def counted(self: MicroCSP, writer: int) -> None:
        nonlocal made
        lazy = self._lazy
        original(self, writer)
        made += self._lazy != lazy

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MicroCSP, "_materialize_for", counted)
        patch.setattr(micro, "_LAZY_CHECK", 1)
        batched = _compare(stages, 2, True, "critical", inflight=8, candidates=candidates, seed=4, n=120)
    assert batched.lazy > 0 and made > 0


@pytest.mark.parametrize("candidates", [2, 12])
def test_fifo_one_holder_crowded_and_sparse_spaces_agree(candidates: int) -> None:
    for priority, one_holder in (("fifo", False), ("critical", True)):
        batched = _compare(4, 4, True, priority, inflight=6, candidates=candidates, seed=candidates,
                           one_holder=one_holder)
        assert batched.arrivals > 0 and batched.admissions > 0


def test_a_narrow_pipeline_agrees() -> None:
    """One subnet in flight: the run ahead meets the admission limit and releases gradients early."""
    batched = _compare(5, 3, True, "critical", inflight=1, candidates=3, seed=9)
    assert batched.arrivals > 0
