"""The fast predictor answers exactly what the policy's clone answers, at every task.

:func:`naspipe.scheduling.predictor.predict` takes :class:`CSPLookahead` (no copy of the
state, predecessors registered ahead once) where it applies; :func:`predict_by_copy` is the
reference (the policy cloned and run ahead). Both are called before every task of whole
pipeline runs (irregular durations, so forwards overtake and stages sit idle at random
points; several stage counts, in-flight limits, horizons, plans, resumed runs) and must
agree; the cases on which the fast path applies are counted, so the test cannot pass by
falling back everywhere.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Callable

import pytest

from naspipe.partition import balanced_partition
from naspipe.scheduling import PipelinePlan, predictor
from naspipe.scheduling.driver import drive
from naspipe.scheduling.policies import PolicyOptions, make_policy
from naspipe.scheduling.policies.base import StagePolicy
from naspipe.scheduling.policies.csp import CSP
from naspipe.scheduling.predictor import CSPLookahead, predict, predict_by_copy
from naspipe.scheduling.task import Task
from naspipe.subnet import SubnetStream
from tests.conftest import irregular_durations, make_plan, make_structure


class Counts:
    """What :func:`_compare` saw: tasks whose stage took :class:`CSPLookahead`, and answers it shifted."""

    def __init__(self) -> None:
        self.fast = 0
        self.reused = 0


def _compare(plan: PipelinePlan, system: str, n: int, horizons: tuple[int, ...], seed: int,
             options: PolicyOptions | None = None, resume: int = 0, counts: Counts | None = None) -> int:
    """Drive a run, comparing both predictions before every task; returns how many used the fast path.

    Every horizon and two stream ends are compared on a fresh run-ahead (:meth:`CSPLookahead._run_ahead`,
    which keeps nothing), then one public :func:`predict` call per task, of a horizon drawn at random, is
    compared too: it is the stage's only kept answer, so consecutive tasks exercise the shift
    (:meth:`CSPLookahead.answer`) as an executor does, with horizons that change from call to call."""
    options = options or PolicyOptions()
    counts = counts if counts is not None else Counts()
    rng = random.Random(seed)

    def look(task: Task, policy: StagePolicy) -> None:
        lookahead = predictor._fast_lookahead(policy)
        for horizon in horizons:
            for end in (n, n + 3):
                want = predict_by_copy(policy, horizon, end, running=task)
                if lookahead is None:
                    got = predict(policy, horizon, end, running=task)
                else:
                    got = lookahead._run_ahead(policy, horizon, end, task, {})
                assert got == want, (str(task), horizon, end)
                assert all(type(t) is Task for t in got)  # the lookahead's memoised forwards are tasks too
        horizon = rng.choice(horizons)
        before = lookahead.reused if lookahead is not None else 0
        assert predict(policy, horizon, n, running=task) == predict_by_copy(policy, horizon, n, task), str(task)
        if lookahead is not None:
            counts.fast += 1
            counts.reused += lookahead.reused - before

    policies = [make_policy(system, k, plan, options) for k in range(plan.num_stages)]
    if resume:
        for policy in policies:
            policy.resume_at(resume)
    drive(plan, system, n, options, duration=irregular_durations(seed), policies=policies, on_start=look)
    return counts.fast


@pytest.mark.parametrize("stages", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("inflight", [1, 4, 9])
def test_csp_static_plans_agree_at_every_task(stages: int, inflight: int) -> None:
    plan = make_plan(blocks=10, candidates=3, stages=stages, seed=stages + inflight)
    counts = Counts()
    fast = _compare(plan, "csp", 40, (1, 3, 8, 20), seed=stages, options=PolicyOptions(max_inflight=inflight),
                    counts=counts)
    assert fast == 3 * 40 * stages  # every task of every stage went through CSPLookahead
    assert counts.reused > fast // 5  # and many answers were the last one shifted (about half at this size)


@pytest.mark.parametrize("shared", ["frozen", "causal"])
def test_crowded_and_sparse_spaces_agree(shared: str) -> None:
    """Two candidates (nearly every pair of subnets conflicts) and twelve (few do); causal shared layers."""
    for candidates in (2, 12):
        plan = make_plan(blocks=8, candidates=candidates, stages=4, seed=candidates, shared_policy=shared)
        assert _compare(plan, "csp", 48, (4, 8), seed=candidates, options=PolicyOptions(max_inflight=6)) > 0


def test_resumed_run_agrees() -> None:
    plan = make_plan(blocks=6, candidates=3, stages=4, seed=5)
    assert _compare(plan, "csp", 50, (8,), seed=1, resume=17) == 3 * (50 - 17) * 4


@pytest.mark.parametrize("system", ["csp-no-scheduler", "csp-artifact", "sequential", "gpipe", "pipedream"])
def test_other_policies_take_the_copy_and_agree(system: str) -> None:
    plan = make_plan(blocks=8, candidates=3, stages=1 if system == "sequential" else 3, seed=2)
    assert _compare(plan, system, 24, (8,), seed=3) == 0


def test_per_subnet_and_windowed_plans_take_the_copy_and_agree() -> None:
    structure = make_structure(8, 3)
    stream = SubnetStream(structure.choices_per_block, 4)
    costs = [1.0 + (lid % 5) for lid in range(structure.num_layers)]
    partition = balanced_partition([1.0] * structure.num_positions, 3)
    mirrored = PipelinePlan.per_subnet(structure, partition, stream, costs)
    assert _compare(mirrored, "csp", 24, (8,), seed=4) == 0
    windowed = make_plan(blocks=8, candidates=3, stages=3, seed=4, shared_policy="windowed")
    assert _compare(windowed, "csp", 24, (8,), seed=5, options=PolicyOptions(shared_window=3)) == 0


def test_agree_when_registrations_are_pruned_and_extended_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small chunks: the predecessor lists are dropped and registered ahead many times per run."""
    monkeypatch.setattr(CSPLookahead, "_PRUNE_EVERY", 5)
    monkeypatch.setattr(CSPLookahead, "_AHEAD", 1)
    plan = make_plan(blocks=10, candidates=4, stages=6, seed=9)
    assert _compare(plan, "csp", 60, (2, 8), seed=9, options=PolicyOptions(max_inflight=5)) == 3 * 60 * 6


def test_a_lookahead_made_mid_run_agrees() -> None:
    """The first prediction on a stage may come late (a cache switched on after a resume, a test):
    the lookahead then starts from the live state, registering from the oldest unwritten subnet."""
    plan = make_plan(blocks=8, candidates=3, stages=4, seed=6)
    n = 40

    def look(task: Task, policy: StagePolicy) -> None:
        if task.subnet >= 11:  # no prediction before: the lookahead is built here
            assert predict(policy, 8, n, running=task) == predict_by_copy(policy, 8, n, running=task)

    drive(plan, "csp", n, duration=irregular_durations(2), on_start=look)


def test_deep_pipelines_skip_blocked_arrivals_and_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many stages, a short horizon, a crowded space: most arrivals are blocked, so the lookahead skips
    runs of them (up to the stream's end, leaving them all waiting) instead of walking them; a later write
    in the same prediction must still release the skipped ones it unblocks. Both skips are counted, so the
    test cannot pass without taking them."""
    calls = {"found": 0, "to the end": 0}
    original = CSPLookahead._next_ready

    def counted(self: CSPLookahead, *args: object) -> int | None:
        found = original(self, *args)  # type: ignore[arg-type]
        calls["found" if found is not None else "to the end"] += 1
        return found

    monkeypatch.setattr(CSPLookahead, "_next_ready", counted)
    for candidates, stages in ((2, 10), (3, 12)):
        plan = make_plan(blocks=12, candidates=candidates, stages=stages, seed=candidates)
        fast = _compare(plan, "csp", 70, (2, 5, 12), seed=candidates, options=PolicyOptions(max_inflight=stages))
        assert fast == 3 * 70 * stages
    assert calls["found"] > 0 and calls["to the end"] > 0


def test_a_stage_keeps_its_lookahead_until_its_policy_dies() -> None:
    """The lookahead is found by the policy's id (no weak reference built per task); a dead policy's
    entry goes with it, so a new policy at a recycled address never inherits its registrations."""
    plan = make_plan(blocks=6, candidates=3, stages=2, seed=1)
    policy = make_policy("csp", 0, plan, PolicyOptions())
    key = id(policy)
    first = predictor._fast_lookahead(policy)
    assert first is not None and predictor._fast_lookahead(policy) is first
    assert predictor._fast_lookahead(make_policy("gpipe", 0, plan, PolicyOptions())) is None
    del policy
    gc.collect()
    assert key not in predictor._FAST


def test_shifted_answers_cover_calls_with_and_without_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both kinds of shift are taken: no message since the last call, and the one message the run-ahead
    assumed (an arrival, a gradient), each checked against the copy by :func:`_compare`."""
    kinds = {"quiet": 0, "one message": 0}
    original = CSPLookahead.answer

    def answer(self: CSPLookahead, live: CSP, horizon: int, end: int, running: Task | None) -> list[Task]:
        before, messages = self.reused, self._messages
        got = original(self, live, horizon, end, running)
        if self.reused > before:
            kinds["quiet" if live.messages == messages else "one message"] += 1
        return got

    monkeypatch.setattr(CSPLookahead, "answer", answer)
    for stages in (1, 4, 7):
        plan = make_plan(blocks=9, candidates=3, stages=stages, seed=stages)
        _compare(plan, "csp", 40, (2, 6), seed=stages, options=PolicyOptions(max_inflight=stages + 1))
    assert kinds["quiet"] > 50 and kinds["one message"] > 50, kinds


def _uncounted_arrivals(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: forward arrivals change the state without counting as messages."""
    original = CSP.forward_arrived

    def forward_arrived(self: CSP, subnet: int) -> None:
        original(self, subnet)
        self.messages -= 1

    monkeypatch.setattr(CSP, "forward_arrived", forward_arrived)


def _one_message_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: the run-ahead claims one assumed message before every task."""
    original = CSPLookahead._run_ahead

    def run_ahead(self: CSPLookahead, live: CSP, horizon: int, end: int, running: Task | None,
                  heard: dict[int, int]) -> list[Task]:
        out = original(self, live, horizon, end, running, {})
        heard.update(dict.fromkeys(range(len(out) + 1), 1))
        return out

    monkeypatch.setattr(CSPLookahead, "_run_ahead", run_ahead)


@pytest.mark.parametrize("plant", [_uncounted_arrivals, _one_message_everywhere])
def test_a_wrong_shift_is_caught(monkeypatch: pytest.MonkeyPatch, plant: Callable[[pytest.MonkeyPatch], None]) -> None:
    """The comparison sees a shift that is not exact: with either planted bug some answer differs. (An
    uncounted arrival often changes nothing: forwards come last and arrive in id order in the run-ahead
    too; a few pipelines are enough for one that does.)"""
    plant(monkeypatch)
    caught = 0
    for stages, inflight in ((2, 4), (3, 4), (8, 9)):
        plan = make_plan(blocks=9, candidates=3, stages=stages, seed=stages)
        try:
            _compare(plan, "csp", 40, (2, 6), seed=stages, options=PolicyOptions(max_inflight=inflight))
        except AssertionError:
            caught += 1
    assert caught > 0


def test_short_arrival_tails_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The arrivals-only tail with fewer ready arrivals than the horizon asks (every other arrival blocked to
    the stream's end): the run-ahead takes them all at once and goes on (releases, the end). Counted, and
    every answer compared with the copy."""
    short = [0]
    original = CSPLookahead._ready_arrivals

    def counted(self: CSPLookahead, need: int, *args: object) -> list[int]:
        tail = original(self, need, *args)  # type: ignore[arg-type]
        short[0] += len(tail) < need
        return tail

    monkeypatch.setattr(CSPLookahead, "_ready_arrivals", counted)
    for candidates, stages in ((2, 6), (3, 9), (6, 12)):
        plan = make_plan(blocks=2 * stages, candidates=candidates, stages=stages, seed=stages)
        assert _compare(plan, "csp", 50, (3, 8, 12), seed=stages, options=PolicyOptions(max_inflight=stages)) > 0
    assert short[0] > 100, short
