"""The discrete-event simulation: the runtime's policies, driven in simulated seconds.

Every stage runs its real :class:`~naspipe.scheduling.policies.base.StagePolicy`, fed the
same events as in the runtime (admit, forward/backward arrival, completion), exactly as
the virtual-time driver (:mod:`naspipe.scheduling.driver`) feeds them, so the per-stage
task order is the policy's own decision. What this adds is time:

- a task computes for the sum of its layers' costs (forward; recompute + backward;
  optimizer), after its parameters are on the device (:mod:`naspipe.sim.residency`, the
  copy engine) and before any write-back the policy needs;
- a finished forward sends the activation to the next stage and a finished backward the
  gradient to the previous one, over that link (one message at a time per direction,
  latency + bytes / bandwidth), overlapping the sender's next task; the receiver's policy
  learns of it when it arrives. With ``blocking_send`` (gloo on CPU) the send is its own
  event at the end of the compute: it holds the sender for :meth:`Hardware.send_hold_s`,
  which depends on whether the receiver is computing at that moment, and the message
  arrives a latency after the send began (see :mod:`naspipe.sim.hardware`);
- after each task the stage stays idle for ``task_gap_s`` (the runtime's bookkeeping
  between spans);
- with per-subnet partitions, an update's mirrors (:meth:`StagePolicy.take_mirrors`: the
  layer's parameters and optimizer state for its next user's stage) travel hop by hop over
  the neighbour links, as the runtime relays them, and the receiver's policy and cache
  learn of them on arrival (:meth:`_send_mirrors`). The runtime relays between tasks; here
  a relay does not wait for the relaying stage's task, and a mirror never blocks its sender.

With free messages the events, their order and hence every decision equal the driver's.
Only stages that received an event since they were last asked are asked for a task, in
stage order, so a step costs O(1) and not O(D): 64 stages x 100,000 subnets is ~20 M tasks.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from naspipe.scheduling.driver import DeadlockError
from naspipe.scheduling.mirror import Mirror
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies import PolicyOptions, StagePolicy, make_policy
from naspipe.scheduling.task import Kind, Task
from naspipe.sim.costs import CostModel, backward_s, forward_s, update_s
from naspipe.sim.layout import SubnetLayers
from naspipe.sim.residency import Residency, Resident

CATEGORIES = ("forward", "recompute", "backward", "optimizer", "waiting")
_DONE, _ARRIVE_F, _ARRIVE_B, _SEND, _ARRIVE_M = 0, 1, 2, 3, 4


@dataclass
class StageResult:
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    tasks: int = 0
    end: float = 0.0
    sent_bytes: float = 0.0
    mirror_bytes: float = 0.0  # mirrors this stage sent (relays not counted)
    order: list[Task] = field(default_factory=list)  # only when recorded
    trace: list[dict[str, object]] = field(default_factory=list)
    trace_dropped: int = 0

    @property
    def busy(self) -> float:
        s = self.seconds
        return s["forward"] + s["recompute"] + s["backward"] + s["optimizer"]


@dataclass
class SimResult:
    stages: list[StageResult]
    residency: list[Residency]
    subnets: int

    @property
    def makespan(self) -> float:
        return max((s.end for s in self.stages), default=0.0)


ResidencyFactory = Callable[[int, StagePolicy], Residency]


def simulate(
    plan: PipelinePlan,
    system: str,
    num_subnets: int,
    options: PolicyOptions,
    costs: CostModel,
    recompute: bool,
    residency: ResidencyFactory | None = None,
    record_order: bool = False,
    trace_max_events: int = 0,
) -> SimResult:
    """Simulate ``num_subnets`` subnets of ``plan`` under ``system``; DeadlockError if it stalls."""
    policies = [make_policy(system, k, plan, options) for k in range(plan.num_stages)]
    for policy in policies:
        policy.stream_ends_at(num_subnets)
    copies = [residency(k, policies[k]) if residency else Resident() for k in range(plan.num_stages)]
    engine = _Engine(plan, policies, num_subnets, costs, recompute, copies, record_order, trace_max_events)
    return engine.run()


class _Engine:
    def __init__(self, plan: PipelinePlan, policies: list[StagePolicy], n: int, costs: CostModel, recompute: bool,
                 copies: list[Residency], record_order: bool, trace_max: int) -> None:
        self.plan, self.policies, self.n, self.costs = plan, policies, n, costs
        self.layout = SubnetLayers(plan)
        self.blocking = costs.hardware.blocking_send and not costs.free_io
        self.recompute, self.copies = recompute, copies
        self.record_order, self.trace_left = record_order, [trace_max] * len(policies)
        d = len(policies)
        self.results = [StageResult() for _ in range(d)]
        self.idle = [True] * d
        self.events: list[tuple[float, int, int, int, Task | int | Mirror]] = []
        self.link_free: dict[tuple[int, int], float] = {}
        self.computing_until = [0.0] * d  # when each stage's current compute (not its send) ends
        self.gap = 0.0 if costs.free_io else costs.hardware.task_gap_s
        self.order = 0
        self.now = 0.0
        self.dirty: set[int] = set(range(d))

    def run(self) -> SimResult:
        first = self.policies[0]
        events, pop = self.events, heapq.heappop
        while True:
            while first.admitted < self.n and first.may_admit(first.admitted):
                first.admit(first.admitted)
                self.dirty.add(0)
            if self.dirty:
                for k in sorted(self.dirty):
                    if self.idle[k]:
                        self._try_start(k)
                self.dirty.clear()
            if not events:
                break
            self.now, _, what, k, payload = pop(events)
            self.dirty.add(k)
            if what == _DONE:
                self.idle[k] = True
                self._finish(k, payload)  # type: ignore[arg-type]
            elif what == _SEND:
                self._blocking_send(k, payload)  # type: ignore[arg-type]
            elif what == _ARRIVE_F:
                self.policies[k].forward_arrived(payload)  # type: ignore[arg-type]
            elif what == _ARRIVE_M:
                self._mirror_arrived(k, payload)  # type: ignore[arg-type]
            else:
                self.policies[k].backward_arrived(payload)  # type: ignore[arg-type]
        stalled = [p.stage for p in self.policies if p.finished < self.n]
        if stalled:
            raise DeadlockError(f"stages {stalled} stalled at t={self.now} with subnets unfinished")
        return SimResult(self.results, self.copies, self.n)

    def _push(self, time: float, what: int, stage: int, payload: Task | int | Mirror) -> None:
        self.order += 1
        heapq.heappush(self.events, (time, self.order, what, stage, payload))

    def _try_start(self, k: int) -> None:
        task = self.policies[k].next_task()
        if task is None:
            return
        result = self.results[k]
        if self.record_order:
            result.order.append(task)
        layers = (self.layout.trainable if task.kind is Kind.UPDATE else self.layout.all)(task.subnet)[k]
        start = self.copies[k].acquire(task, layers, self.now)
        if start > self.now:
            self._span(k, "waiting", "copy", self.now, start, task.subnet)
        end = self._compute(k, task, layers, start)
        free = self.copies[k].release(task, layers, end)
        if free > end:
            self._span(k, "waiting", "copy", end, free, task.subnet)
        self.computing_until[k] = end
        result.tasks += 1
        self.idle[k] = False
        if self.blocking and self._destination(k, task) is not None:
            self._push(free, _SEND, k, task)  # how long it holds depends on the receiver then
            return
        result.end = max(result.end, free)
        self._push(free + self.gap, _DONE, k, task)

    def _blocking_send(self, k: int, task: Task) -> None:
        """Stage ``k`` sends ``task``'s message now and is held until gloo lets go; the message
        reaches the receiver's policy a latency after the send began, or when the send ends."""
        dst = self._destination(k, task)
        assert dst is not None
        nbytes = self._message_bytes(k, dst, task.subnet)
        hardware = self.costs.hardware
        sent = self.now + hardware.send_hold_s(k, dst, nbytes, self.computing_until[dst] - self.now)
        self._span(k, "waiting", f"send {task.kind.value}{task.subnet}", self.now, sent, task.subnet)
        arrive = max(sent, self.now + hardware.transfer_s(k, dst, nbytes))
        self._push(arrive, _ARRIVE_F if task.kind is Kind.FORWARD else _ARRIVE_B, dst, task.subnet)
        self.results[k].end = max(self.results[k].end, sent)
        self._push(sent + self.gap, _DONE, k, task)

    def _compute(self, k: int, task: Task, layers: tuple[int, ...], start: float) -> float:
        y = task.subnet
        if task.kind is Kind.FORWARD:
            return self._span(k, "forward", f"F{y}", start, start + forward_s(self.costs, layers), y)
        if task.kind is Kind.UPDATE:
            return self._span(k, "optimizer", f"U{y}", start, start + update_s(self.costs, layers), y)
        r, b = backward_s(self.costs, layers, self.recompute)
        mid = self._span(k, "recompute", f"R{y}", start, start + r, y) if r else start
        return self._span(k, "backward", f"B{y}", mid, mid + b, y)

    def _span(self, k: int, category: str, name: str, start: float, end: float, subnet: int) -> float:
        result = self.results[k]
        result.seconds[category] += end - start
        if self.trace_left[k] > 0:
            self.trace_left[k] -= 1
            result.trace.append({"name": name, "cat": category, "ph": "X", "pid": 0, "tid": k,
                                 "ts": round(start * 1e6, 3), "dur": round((end - start) * 1e6, 3),
                                 "args": {"subnet": subnet}})
        else:
            result.trace_dropped += 1
        return end

    def _destination(self, k: int, task: Task) -> int | None:
        """The stage ``task``'s message goes to, if it sends one."""
        if task.kind is Kind.FORWARD and k < len(self.policies) - 1:
            return k + 1
        if task.kind is Kind.BACKWARD and k > 0:
            return k - 1
        return None

    def _finish(self, k: int, task: Task) -> None:
        self.policies[k].completed(task)
        if task.kind is Kind.UPDATE and self.plan.mirrored:
            self._send_mirrors(k)
        if task.kind is Kind.FORWARD and k == len(self.policies) - 1:
            self.policies[k].backward_arrived(task.subnet)
            return
        dst = self._destination(k, task)
        if dst is None:
            return
        if self.blocking:  # its arrival was scheduled when the send began
            return
        what = _ARRIVE_F if task.kind is Kind.FORWARD else _ARRIVE_B
        if self.costs.free_io:
            deliver = self.policies[dst].forward_arrived if what == _ARRIVE_F else self.policies[dst].backward_arrived
            deliver(task.subnet)
            self.dirty.add(dst)
            return
        self._push(self._transfer(k, dst, task.subnet, self.now), what, dst, task.subnet)

    def _send_mirrors(self, k: int) -> None:
        """Each mirror of ``k``'s update: relayed over neighbours to its stage, or delivered at once (free io)."""
        costs = self.costs
        for mirror in self.policies[k].take_mirrors():
            nbytes = costs.param_bytes(mirror.layer) * (1 + costs.optimizer_states)
            self.results[k].mirror_bytes += nbytes
            if costs.free_io:
                self._mirror_arrived(mirror.dst, mirror)
                continue
            at, step = self.now, 1 if mirror.dst > k else -1
            for src in range(k, mirror.dst, step):
                start = max(at, self.link_free.get((src, src + step), 0.0))
                at = start + costs.hardware.transfer_s(src, src + step, nbytes)
                self.link_free[(src, src + step)] = at
            self._push(at, _ARRIVE_M, mirror.dst, mirror)

    def _mirror_arrived(self, k: int, mirror: Mirror) -> None:
        self.copies[k].replaced(mirror.layer)
        self.policies[k].mirror_arrived(mirror.layer, mirror.version)
        self.dirty.add(k)

    def _transfer(self, src: int, dst: int, subnet: int, now: float) -> float:
        """When the activation after ``src``'s last layer (or its gradient) sent at ``now`` reaches ``dst``."""
        nbytes = self._message_bytes(src, dst, subnet)
        start = max(now, self.link_free.get((src, dst), 0.0))
        arrive = start + self.costs.hardware.transfer_s(src, dst, nbytes)
        self.link_free[(src, dst)] = arrive
        return arrive

    def _message_bytes(self, src: int, dst: int, subnet: int) -> float:
        """Bytes of the activation after ``src``'s last layer (or its gradient), counted as sent."""
        boundary = self.layout.all(subnet)[min(src, dst)][-1]
        nbytes = self.costs.boundary_bytes(boundary)
        self.results[src].sent_bytes += nbytes
        return nbytes
