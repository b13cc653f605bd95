"""Drive one policy per stage through a pipeline in virtual time.

The same event protocol as the runtime (admit, forward/backward arrival, completion) with
task durations from a function instead of real kernels. Tests use it to check policies
(no stale access, no deadlock, decisions equal to a reference) in microseconds; the
simulator builds on it with profiled durations.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from naspipe.scheduling.mirror import Mirror
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies import PolicyOptions, StagePolicy, make_policy
from naspipe.scheduling.task import AnyTask, Kind

Duration = Callable[[AnyTask], float]
OnStart = Callable[[AnyTask, StagePolicy], None]


class DeadlockError(RuntimeError):
    """No stage can run anything and nothing is in flight, yet subnets are unfinished."""


@dataclass(frozen=True, slots=True)
class Slot:
    start: float
    end: float
    task: AnyTask


@dataclass
class Timeline:
    """What each stage ran, in order, with virtual start and end times."""

    stages: list[list[Slot]] = field(default_factory=list)
    mirrors: list[Mirror] = field(default_factory=list)  # layer states moved between stages, in order

    @property
    def makespan(self) -> float:
        return max((s[-1].end for s in self.stages if s), default=0.0)

    def tasks(self, stage: int) -> list[AnyTask]:
        return [slot.task for slot in self.stages[stage]]

    def busy(self, stage: int) -> float:
        return sum(slot.end - slot.start for slot in self.stages[stage])

    def bubble_ratio(self) -> float:
        span = self.makespan
        if span == 0:
            return 0.0
        return 1.0 - sum(self.busy(k) for k in range(len(self.stages))) / (len(self.stages) * span)


def unit_durations(task: AnyTask) -> float:
    """Forward 1, backward 2 (recompute + backward), update 0; a split backward's weight task 1."""
    return {Kind.FORWARD: 1.0, Kind.BACKWARD: 2.0, Kind.UPDATE: 0.0, Kind.WEIGHT: 1.0}[task.kind]


def drive(
    plan: PipelinePlan,
    system: str,
    num_subnets: int,
    options: PolicyOptions | None = None,
    duration: Duration = unit_durations,
    policies: list[StagePolicy] | None = None,
    on_start: OnStart | None = None,
    announce_end: bool = True,
) -> Timeline:
    """Run ``num_subnets`` subnets through ``plan`` under ``system``; returns the timeline.

    ``on_start`` sees every task as it starts (tests check the version rule there).
    ``announce_end`` False keeps the stream's end from the policies (as the runtime does
    when it does not know it), so tests can check how a policy copes without it.
    """
    options = options or PolicyOptions()
    stages = policies or [make_policy(system, k, plan, options) for k in range(plan.num_stages)]
    if announce_end:
        for policy in stages:
            policy.stream_ends_at(num_subnets)
    return _Driver(stages, num_subnets, duration, on_start).run()


class _Driver:
    def __init__(self, stages: list[StagePolicy], n: int, duration: Duration, on_start: OnStart | None) -> None:
        self.stages, self.n, self.duration, self.on_start = stages, n, duration, on_start
        self.timeline = Timeline([[] for _ in stages])
        self.busy_until = [0.0] * len(stages)
        self.running: list[AnyTask | None] = [None] * len(stages)
        self.events: list[tuple[float, int, int, AnyTask]] = []  # (time, order, stage, finished task)
        self.order = 0
        self.now = 0.0

    def run(self) -> Timeline:
        for policy in self.stages:  # mirrors due from an earlier stream end
            self._deliver(policy)
        while True:
            self._admit()
            for k in range(len(self.stages)):
                self._try_start(k)
            if not self.events:
                break
            self.now, _, k, task = heapq.heappop(self.events)
            self.running[k] = None
            self._finish(k, task)
        unfinished = [p.stage for p in self.stages if p.finished < self.n]
        if unfinished:
            raise DeadlockError(f"stages {unfinished} stalled at t={self.now} with subnets unfinished")
        return self.timeline

    def _admit(self) -> None:
        first = self.stages[0]
        while first.admitted < self.n and first.may_admit(first.admitted):
            first.admit(first.admitted)

    def _try_start(self, k: int) -> None:
        if self.running[k] is not None:
            return
        task = self.stages[k].next_task()
        if task is None:
            return
        if self.on_start is not None:
            self.on_start(task, self.stages[k])
        end = self.now + self.duration(task)
        self.running[k] = task
        self.timeline.stages[k].append(Slot(self.now, end, task))
        self.order += 1
        heapq.heappush(self.events, (end, self.order, k, task))

    def _deliver(self, policy: StagePolicy) -> None:
        for mirror in policy.take_mirrors():  # delivered at once (a transfer time is the simulator's)
            self.timeline.mirrors.append(mirror)
            self.stages[mirror.dst].mirror_arrived(mirror.layer, mirror.version)

    def _finish(self, k: int, task: AnyTask) -> None:
        policy = self.stages[k]
        policy.completed(task)  # type: ignore[arg-type]  # a micro-batched policy takes its MicroTask
        self._deliver(policy)
        awaiting = getattr(policy, "newly_awaiting", None)
        if awaiting:  # replicated stages: the replicas' sum arrives at once (an exchange time is the simulator's)
            for subnet in awaiting:
                policy.reduced(subnet)  # type: ignore[attr-defined]
            awaiting.clear()
        last = len(self.stages) - 1
        micro = task[3:]  # a MicroTask's part, passed on with its messages; () for a Task
        if task.kind is Kind.FORWARD:
            if k == last:
                policy.backward_arrived(task.subnet, *micro)
            else:
                self.stages[k + 1].forward_arrived(task.subnet, *micro)
        elif task.kind is Kind.BACKWARD and k > 0:
            self.stages[k - 1].backward_arrived(task.subnet, *micro)
