"""The messages a run-ahead says it assumed before each task are the copy's, position by position.

:meth:`CSPLookahead.answer` shifts the kept run-ahead only when the messages that reached the policy since
the last call are exactly those the run-ahead assumed before the task now running (``heard``: none, one,
or 2 for "two or more"). A wrong entry there makes a later shift inexact, but only in rare interleavings
(a forward overtaking a blocked one on its way here, then a write freeing the blocked one within the
horizon), so comparing answers alone let planted bugs through (an arrivals-only tail claiming one message
everywhere, a short tail's "two or more" entry dropped).
Here every entry is compared with what the reference clone (:class:`predictor._Lookahead`) assumed: it
is run one task at a time and its policy's message count read between tasks. The tail positions preceded
by blocked arrivals are counted, so the test cannot pass without checking them; planted bugs (mutated
copies of :meth:`CSPLookahead._run_ahead`) are caught.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable

import pytest

from naspipe.scheduling import PipelinePlan, predictor
from naspipe.scheduling.driver import drive
from naspipe.scheduling.policies import PolicyOptions, make_policy
from naspipe.scheduling.policies.base import StagePolicy
from naspipe.scheduling.policies.csp import CSP
from naspipe.scheduling.predictor import CSPLookahead
from naspipe.scheduling.task import Kind, Task
from tests.conftest import irregular_durations, make_plan


def assumed_messages(policy: StagePolicy, horizon: int, end: int, running: Task) -> tuple[list[Task], list[int]]:
    """The copy's next ``horizon`` tasks and, for each, the messages it assumed since the previous one
    (or since ``running``): the clone's message count read between single steps of its run (a run of
    ``h`` tasks is the first ``h`` of a longer one, so stepping changes no decision). A forward completed
    on the last stage brings its own gradient at once: that message counts before the next task, as in
    :meth:`CSPLookahead._run_ahead`."""
    look = predictor._Lookahead(policy, end, running)
    own = int(running.kind is Kind.FORWARD and policy.is_last)  # the running forward's own gradient
    before = look.sim.messages - own  # the count before the running task completed
    tasks: list[Task] = []
    counts: list[int] = []
    while len(tasks) < horizon:
        step = look.take(1)
        if not step:
            break
        (task,) = step
        own = int(task.kind is Kind.FORWARD and policy.is_last)  # bumped by take(1) after the task
        popped = look.sim.messages - own  # the count when the task was popped
        tasks.append(task)
        counts.append(popped - before)
        before = popped
    return tasks, counts


class Seen:
    """Positions whose task followed one assumed message, and two or more (blocked arrivals first)."""

    def __init__(self) -> None:
        self.one = 0
        self.several = 0
        self.lazy = 0  # run-aheads whose full tail's entries are computed on demand (predictor._heard_at)


def _check(plan: PipelinePlan, n: int, horizons: tuple[int, ...], seed: int, options: PolicyOptions,
           seen: Seen) -> None:
    """Before every task of a driven run, every horizon: the run-ahead's tasks and its ``heard`` entries
    (capped at 2) equal the copy's tasks and assumed messages."""

    def look(task: Task, policy: StagePolicy) -> None:
        lookahead = predictor._fast_lookahead(policy)
        assert lookahead is not None and isinstance(policy, CSP)
        for horizon in horizons:
            want, counts = assumed_messages(policy, horizon, n, task)
            heard: dict[int, int] = {}
            got = lookahead._run_ahead(policy, horizon, n, task, heard)
            assert got == want, (str(task), horizon)
            claimed = [min(predictor._heard_at(got, heard, i), 2) for i in range(len(got))]
            seen.lazy += predictor._TAIL in heard
            assert claimed == [min(c, 2) for c in counts], (str(task), horizon, claimed, counts)
            seen.one += counts.count(1)
            seen.several += sum(c >= 2 for c in counts)

    policies = [make_policy("csp", k, plan, options) for k in range(plan.num_stages)]
    drive(plan, "csp", n, options, duration=irregular_durations(seed), policies=policies, on_start=look)


PIPELINES = ((2, 6, 50), (3, 9, 50), (4, 5, 40), (6, 12, 40))  # candidates, stages, subnets: deep and crowded


def _check_all(seen: Seen) -> None:
    for candidates, stages, n in PIPELINES:
        plan = make_plan(blocks=2 * stages, candidates=candidates, stages=stages, seed=stages)
        _check(plan, n, (3, 8, 12), stages, PolicyOptions(max_inflight=stages), seen)


def test_heard_is_the_copys_assumed_messages() -> None:
    seen = Seen()
    _check_all(seen)
    assert seen.one > 100 and seen.several > 100, (seen.one, seen.several)  # "two or more": the untested entries
    assert seen.lazy > 100, seen.lazy


def _mutated(function: Callable[..., object], old: str, new: str) -> Callable[..., object]:
    """A copy of ``function`` (of :mod:`naspipe.scheduling.predictor`) with one line of its source replaced
    (a planted bug)."""
    source = textwrap.dedent(inspect.getsource(function))
    assert source.count(old) == 1, old  # the line to mutate is still there, once
    scope: dict[str, object] = {}
    exec(compile(source.replace(old, new), "<planted bug>", "exec"), vars(predictor), scope)  # noqa: S102
    mutant = scope[function.__name__]
    assert callable(mutant)
    return mutant


PLANTS: dict[str, tuple[Callable[..., object], str, str]] = {
    # an arrivals-only tail (one with forwards overtaken: its entries stored) claims one message everywhere
    "tail says one": (CSPLookahead._run_ahead, "heard[at] = 1 if subnet == next_arrival else 2", "heard[at] = 1"),
    # the same for a tail whose entries are computed on demand
    "lazy tail says one": (predictor._heard_at, "return 1 if answer[i][1] == expected else 2", "return 1"),
    # the tail's start not recorded: no message assumed anywhere in it
    "lazy tail lost": (CSPLookahead._run_ahead, "heard[_TAIL], heard[_FIRST] = at, next_arrival", "pass"),
    # after a short tail, the blocked arrivals assumed before the next task are not recorded
    "short tail's blocked arrivals dropped": (CSPLookahead._run_ahead, "heard[at] = heard.get(at, 0) + 2", "pass"),
    # a run of blocked arrivals skipped in one step counts as one message
    "skipped arrivals say one": (CSPLookahead._run_ahead, "(1 if found == next_arrival else 2)", "1"),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_wrong_heard_entry_is_caught(monkeypatch: pytest.MonkeyPatch, plant: str) -> None:
    function, old, new = PLANTS[plant]
    owner = CSPLookahead if function.__name__ == "_run_ahead" else predictor
    monkeypatch.setattr(owner, function.__name__, _mutated(function, old, new))
    with pytest.raises(AssertionError):
        _check_all(Seen())
