"""The predictor (paper Algorithm 3): which tasks a stage runs next, hence which layers it needs.

Public API (stable; the simulator reuses it):

- :func:`predict` ``(policy, horizon, end, running=None) -> list[Task]``: the next ``horizon``
  tasks the stage's own policy would run, found by running that policy forward on a *copy*
  of its state. The live policy is never touched.
- :class:`Predictor` ``(policy, horizon, end)``: ``predict(running)`` answers as :func:`predict`
  does, keeping its copy between calls while the live policy's events (logged by the caller in
  ``heard``) are those the copy assumed (the simulator's; at scale it saves most of the run-ahead).
- :func:`task_layers` ``(plan, task) -> tuple[int, ...]``: the layers a task uses on its stage
  (forward and backward: all of the subnet's layers there; update: the trainable ones).
- :func:`layer_uses` ``(plan, tasks) -> list[tuple[int, ...]]``: the same for a list of tasks,
  the ``upcoming`` argument of :class:`naspipe.context.cache.DeviceCache`.

Why a copy of the policy and not a separate model: the prediction is then exactly the
decision rule the stage will apply (CSP, or any other policy), with no second implementation
to drift. What the copy cannot know is when messages will arrive, so it assumes:

- the running task (if any) completes first;
- a forward the copy runs on the last stage produces its own backward at once; on another
  stage it leaves a *pending backward* (the gradient will come back from downstream), after
  those the live stage already awaits (:meth:`StagePolicy.awaiting_backward`);
- when the copy has nothing to run it releases the lowest-id pending backward (downstream
  stages favour earlier subnets too) once
  as many are pending as there are stages downstream (the pipeline's depth below it), or
  when no new forward can come; otherwise the next forward that has not arrived yet arrives
  (on stage 0: is admitted, if the policy admits it). Subnets ``>= end`` never come.

The offline optimum needs no code here: given the stage's true future uses (from a recorded
run) instead of predicted ones, the cache's victim rule (furthest next use) is Belady's.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import cast

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import StagePolicy
from naspipe.scheduling.task import FORWARD, UPDATE, Kind, Task


def task_layers(plan: PipelinePlan, task: Task) -> tuple[int, ...]:
    """The layers ``task`` touches on its stage (an update touches only trainable ones)."""
    if task.kind is Kind.UPDATE:
        return plan.trainable_layers(task.subnet, task.stage)
    return plan.stage_layers(task.subnet, task.stage)


def layer_uses(plan: PipelinePlan, tasks: Iterable[Task]) -> list[tuple[int, ...]]:
    """:func:`task_layers` of each task (inlined: once per predicted task)."""
    trainable_layers, stage_layers = plan.trainable_layers, plan.stage_layers
    return [trainable_layers(subnet, stage) if kind is UPDATE else stage_layers(subnet, stage)
            for kind, subnet, stage in tasks]


def predict(policy: StagePolicy, horizon: int, end: int, running: Task | None = None) -> list[Task]:
    """The next ``horizon`` tasks of ``policy``'s stage (fewer when the stream ends first)."""
    if horizon <= 0:
        return []
    return _Lookahead(policy, end, running).tasks(0, horizon)


Event = tuple[str, object]
"""What a policy was told or did, as the predictor logs it: ``("C", task)`` completed, ``("B", subnet)``
backward arrived, ``("A", subnet)`` forward arrived (admitted, on stage 0), ``("N", task)`` task taken;
anything else (``("M", layer)``: a mirror arrived) never matches a prediction."""


class Predictor:
    """:func:`predict` for one live policy, called at every task it starts: the same answers, the
    run-ahead kept between calls.

    A prediction runs a copy of the policy ahead and logs every event it feeds the copy. The
    caller logs what the live policy is told between two calls (:attr:`heard`: completions and
    arrivals, in order; the task it then takes is the ``running`` of the next call). If that
    is exactly what the copy assumed next (same events, same order), the live policy is now in
    the copy's state at that point of its log (a policy's decisions are a function of its
    events; asking it for a task when it has none changes nothing), and a fresh prediction
    would run the same copy on from there: the answer is the copy's next tasks, extended as
    needed. Otherwise a fresh copy is made, as :func:`predict` does. A stage whose messages
    come as the copy expects (the common case in a long pipeline) pays for one new task per
    call, not for ``horizon`` tasks and a copy of its state.
    """

    def __init__(self, policy: StagePolicy, horizon: int, end: int) -> None:
        self.policy, self.horizon, self.end = policy, horizon, end
        self.heard: list[Event] = []  # the live policy's events since the last call (the caller appends)
        self._ahead: _Lookahead | None = None
        self._pos = 0  # events of the copy's log the live policy has been through
        self.reused = 0  # calls answered from the kept copy (for benchmarks)
        self.calls = 0

    def predict(self, running: Task) -> list[Task]:
        """The next ``horizon`` tasks once ``running`` (the task the live policy just took) completes."""
        self.calls += 1
        if self.horizon <= 0:
            self.heard.clear()
            return []
        ahead = self._ahead
        if ahead is not None and self._follows(ahead, running):
            self.reused += 1
        else:
            ahead = self._ahead = _Lookahead(self.policy, self.end, running)
            self._pos = 0
        self.heard.clear()
        if self._pos > 4096:  # the matched past is never read again
            ahead.forget(self._pos)
            self._pos = 0
        return ahead.tasks(self._pos, self.horizon)

    def _follows(self, ahead: _Lookahead, running: Task) -> bool:
        """Whether the live policy's events since the last call, then taking ``running``, are the
        copy's next logged events (moves :attr:`_pos` past them if so)."""
        log, pos = ahead.log, self._pos
        for event in (*self.heard, ("N", running)):
            while pos >= len(log):
                if not ahead.step():
                    return False
            if log[pos] != event:
                return False
            pos += 1
        self._pos = pos
        return True


class _Lookahead:
    """A copy of a policy run ahead one move at a time (:meth:`step`), every event it is fed logged."""

    def __init__(self, policy: StagePolicy, end: int, running: Task | None) -> None:
        self.sim = policy.clone()  # the plan is shared, read-only
        self.end = end
        self.next_arrival = next(self.sim.pending_arrivals(end), None)
        self.pending: list[int] = policy.awaiting_backward()
        self.depth = policy.plan.num_stages - 1 - policy.stage
        self.log: list[Event] = []
        self.taken: list[int] = []  # where the log's tasks are (its ``("N", task)`` events)
        self.exhausted = False  # no move can come (the copy's state never changes after)
        if running is not None:
            self._complete(running)

    def tasks(self, pos: int, horizon: int) -> list[Task]:
        """The first ``horizon`` tasks taken at or after ``pos`` in the log, running ahead as needed."""
        taken = self.taken
        first = bisect_left(taken, pos)
        while len(taken) - first < horizon and self.step():
            pass
        log = self.log
        return [cast(Task, log[at][1]) for at in taken[first:first + horizon]]

    def forget(self, pos: int) -> None:
        """Drop the log before ``pos`` (positions shift down by it)."""
        del self.log[:pos]
        self.taken = [at - pos for at in self.taken if at >= pos]

    def step(self) -> bool:
        """One move: the copy's next task (completed as :meth:`_complete` does), or when it has none,
        the next message it can expect (the module docstring's rules); False when none can come."""
        if self.exhausted:
            return False
        sim, pending = self.sim, self.pending
        task = sim.next_task()
        if task is not None:
            self.taken.append(len(self.log))
            self.log.append(("N", task))
            self._complete(task)
            return True
        subnet = self.next_arrival  # no task: release a pending backward or the next arrival
        arrival = subnet is not None and (not sim.is_first or sim.may_admit(subnet))
        if pending and (len(pending) >= self.depth or not arrival):
            lowest = min(pending)
            pending.remove(lowest)
            self.log.append(("B", lowest))
            sim.backward_arrived(lowest)
            return True
        if not arrival:
            self.exhausted = True
            return False
        assert subnet is not None
        self.log.append(("A", subnet))
        (sim.admit if sim.is_first else sim.forward_arrived)(subnet)
        # the lowest forward the copy has not seen: arrivals come in id order, so this is the next one
        # of those pending when the copy was made
        self.next_arrival = next(sim.pending_arrivals(self.end), None)
        return True

    def _complete(self, task: Task) -> None:
        sim = self.sim
        self.log.append(("C", task))
        sim.completed(task)
        if task[0] is FORWARD:
            if sim.is_last:
                self.log.append(("B", task[1]))
                sim.backward_arrived(task[1])
            else:
                self.pending.append(task[1])
