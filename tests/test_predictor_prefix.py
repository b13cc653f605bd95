"""The prefix property the predictor's shift rests on: a run-ahead of ``h`` tasks is the first ``h`` of a longer one.

:meth:`CSPLookahead.answer` keeps a run-ahead a few tasks longer than asked and later answers with
a slice of it, so the first ``h`` tasks of a run of ``H > h`` must be the run of ``h``. For the
reference (:func:`predict_by_copy`) it holds by construction (the loop's decisions never read the
horizon); :class:`CSPLookahead`'s run-ahead reads it once, in the arrivals-only tail's condition
``len(pending) + horizon - len(out) <= depth``: a short horizon takes the tail where a long one
goes step by step. Both are checked here at states drawn from random pipelines, and the tail is
counted on both sides of that condition so the test cannot pass without comparing the two.
"""

from __future__ import annotations

import random

import pytest

from naspipe.scheduling import PipelinePlan, predictor
from naspipe.scheduling.driver import drive
from naspipe.scheduling.policies import PolicyOptions, make_policy
from naspipe.scheduling.policies.base import StagePolicy
from naspipe.scheduling.predictor import CSPLookahead, predict_by_copy
from naspipe.scheduling.task import Task
from tests.conftest import irregular_durations, make_plan

HORIZONS = (1, 2, 3, 5, 8, 13)
LONGEST = 24


def _random_pipeline(seed: int) -> tuple[PipelinePlan, int, PolicyOptions]:
    """A plan (1-9 stages, crowded or sparse), a stream length and an in-flight limit, drawn from ``seed``."""
    rng = random.Random(seed)
    stages = rng.randint(1, 9)
    plan = make_plan(blocks=rng.randint(stages, 14), candidates=rng.randint(2, 6), stages=stages, seed=seed)
    return plan, rng.randint(24, 48), PolicyOptions(max_inflight=rng.randint(1, 10))



def test_a_short_run_ahead_is_the_start_of_a_long_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """At every task of eight random pipelines and a deep one, both stream ends: the copy's and the
    lookahead's runs of each horizon are the first tasks of the copy's run of :data:`LONGEST`."""
    tails: dict[int, int] = {}  # horizon asked of the run-ahead -> arrivals-only tails it took in full
    short = [0]  # tails with fewer ready arrivals than asked: the run-ahead went on after them
    asked = [0]
    original = CSPLookahead._ready_arrivals

    def counted(self: CSPLookahead, need: int, *args: object) -> list[int]:
        tail = original(self, need, *args)  # type: ignore[arg-type]
        if len(tail) == need:
            tails[asked[0]] = tails.get(asked[0], 0) + 1
        else:
            short[0] += 1
        return tail

    monkeypatch.setattr(CSPLookahead, "_ready_arrivals", counted)
    pipelines = [(*_random_pipeline(seed), seed) for seed in range(8)]
    deep = make_plan(blocks=14, candidates=4, stages=12, seed=3)
    pipelines.append((deep, 40, PolicyOptions(max_inflight=12), 3))
    for plan, n, options, seed in pipelines:
        checked = 0

        def look(task: Task, policy: StagePolicy) -> None:
            nonlocal checked
            lookahead = predictor._fast_lookahead(policy)
            assert lookahead is not None
            for end in (n, n + 2):  # noqa: B023 - used while this pipeline runs
                full = predict_by_copy(policy, LONGEST, end, running=task)
                asked[0] = LONGEST
                assert lookahead._run_ahead(policy, LONGEST, end, task, {}) == full
                for horizon in HORIZONS:
                    assert predict_by_copy(policy, horizon, end, running=task) == full[:horizon], (str(task), horizon)
                    asked[0] = horizon
                    assert lookahead._run_ahead(policy, horizon, end, task, {}) == full[:horizon], (str(task), horizon)
            checked += 1

        policies = [make_policy("csp", k, plan, options) for k in range(plan.num_stages)]
        drive(plan, "csp", n, options, duration=irregular_durations(seed), policies=policies, on_start=look)
        assert checked == 3 * n * plan.num_stages
    # the tail was taken at short horizons where the longest run went step by step over the same tasks
    assert sum(tails.get(h, 0) for h in HORIZONS) > 0
    assert sum(tails.get(h, 0) for h in HORIZONS) > tails.get(LONGEST, 0)
    assert short[0] > 0  # and tails that ran short of ready arrivals, the rest of the run compared too
