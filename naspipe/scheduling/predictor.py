"""The predictor (paper Algorithm 3): which tasks a stage runs next, hence which layers it needs.

Public API (stable; the simulator reuses it):

- :func:`predict` ``(policy, horizon, end, running=None) -> list[Task]``: the next ``horizon``
  tasks the stage's own policy would run, found by running that policy forward on a *copy*
  of its state. The live policy is never touched.
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

from collections.abc import Iterable, Iterator

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
    return _Lookahead(policy, end, running).take(horizon)


class _Lookahead:
    def __init__(self, policy: StagePolicy, end: int, running: Task | None) -> None:
        self.sim = policy.clone()  # the plan is shared, read-only
        self.end = end
        self.arrivals: Iterator[int] = policy.pending_arrivals(end)
        self.next_arrival = next(self.arrivals, None)
        self.pending: list[int] = policy.awaiting_backward()
        self.depth = policy.plan.num_stages - 1 - policy.stage
        if running is not None:
            self._complete(running)

    def take(self, horizon: int) -> list[Task]:
        """Run the copy: its next task (completed as :meth:`_complete` does), or when it has none,
        the next message it can expect (the module docstring's rules); stop when none can come.
        One loop with locals: it is most of a prediction's cost."""
        sim, pending, depth = self.sim, self.pending, self.depth
        next_task, completed, backward_arrived = sim.next_task, sim.completed, sim.backward_arrived
        is_first, is_last = sim.is_first, sim.is_last
        arrive = sim.admit if is_first else sim.forward_arrived
        out: list[Task] = []
        while len(out) < horizon:
            task = next_task()
            if task is not None:
                out.append(task)
                completed(task)
                if task[0] is FORWARD:
                    if is_last:
                        backward_arrived(task[1])
                    else:
                        pending.append(task[1])
                continue
            subnet = self.next_arrival  # no task: release a pending backward or the next arrival
            arrival = subnet is not None and (not is_first or sim.may_admit(subnet))
            if pending and (len(pending) >= depth or not arrival):
                lowest = min(pending)
                pending.remove(lowest)
                backward_arrived(lowest)
                continue
            if not arrival:
                break
            assert subnet is not None
            self.next_arrival = next(self.arrivals, None)
            arrive(subnet)
        return out

    def _complete(self, task: Task) -> None:
        self.sim.completed(task)
        if task.kind is Kind.FORWARD:
            if self.sim.is_last:
                self.sim.backward_arrived(task.subnet)
            else:
                self.pending.append(task.subnet)
