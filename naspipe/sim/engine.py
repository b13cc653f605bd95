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
  learn of them on arrival (:meth:`_Engine._mirrors`). The runtime relays between tasks;
  here a relay does not wait for the relaying stage's task, and a mirror never blocks its
  sender.

With free messages the events, their order and hence every decision equal the driver's.
Only stages that received an event since they were last asked are asked for a task, in
stage order, so a step costs O(1) and not O(D): 64 stages x 100,000 subnets is ~20 M tasks.

At that size the per-task Python is the cost (``benchmarks/bench_sim.py --scale``), so the
loop is one flat function over local lists: seconds and message sizes come precomputed per
(subnet, stage) from :mod:`naspipe.sim.tables`, events are plain tuples of numbers, trace
entries are built only while a stage's trace budget lasts and for the subnets of the trace's
window (the first and last few: a bounded trace at any length, :func:`trace_window`), and stages whose parameters stay
resident skip the copy model. VPipe's synchronous swap (:class:`SynchronousSwap`) copies what
the plan fixes, so its bytes and seconds come from the table too and the loop adds them to the
swap's stats in each stage's task order (the same sums); only the context cache, whose moves
depend on the run, is asked per task. What remains per task is the policy's own decision (its
``completed_then_next``, ``next_task`` and arrival calls) and about 1.7 heap events. What only some
runs need (blocking sends, mirrors) lives in methods off that path.

One engine for every schedule. A micro-batched schedule (``micro_batches`` > 1 or a split backward:
:class:`~naspipe.scheduling.task.MicroTask` tasks, m = 1 being one part) runs in the same loop: its
tasks carry their part, priced from :class:`~naspipe.sim.tables.PartTable` (each part's share of the
batch, the per-task overhead a part pays in full, a split backward's input and weight shares, no
recompute on the last stage; see there) at index ``i * m + part``; a weight task's seconds count as
backward; an arrival event names its part as ``subnet * m + part``; the copy models see the part,
whose layers are its subnet-level task's. Two rules differ from the subnet-level ones, as the
part-level schedules were first priced (``benchmarks/sim_golden.py --micro`` keeps them): a free
message is an event at the same time rather than delivered at once (mirrors too), and a blocking
send is priced when its task starts, from the receiver's compute as known then
(:meth:`_Engine._part_send`).
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from naspipe.scheduling.driver import DeadlockError
from naspipe.scheduling.mirror import Mirror
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies import PolicyOptions, StagePolicy, make_policy
from naspipe.scheduling.task import Kind, MicroTask, Task
from naspipe.sim.costs import CostModel
from naspipe.sim.exchange import ReplicaExchange
from naspipe.sim.layout import SubnetLayers
from naspipe.sim.residency import Residency, Resident, SynchronousSwap
from naspipe.sim.tables import BLOCK_MASK, BLOCK_SHIFT, CostBlock, CostTable, PartBlock, PartTable

CATEGORIES = ("forward", "recompute", "backward", "optimizer", "waiting")
_DONE, _ARRIVE_F, _ARRIVE_B, _SEND, _ARRIVE_M, _REDUCED = 0, 1, 2, 3, 4, 5


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
    trace_subnets: int = 0,
    on_admit: Callable[[int], None] | None = None,
) -> SimResult:
    """Simulate ``num_subnets`` subnets of ``plan`` under ``system``; DeadlockError if it stalls.

    The trace holds at most ``trace_max_events`` spans per stage, of the first and last
    ``trace_subnets`` subnets only (0: of every subnet): a long run's trace shows its start
    and its steady end at a bounded size (:func:`trace_window`). ``on_admit(count)`` is called after each
    admission with the subnets admitted so far (a progress bar: once per subnet, off the per-task path)."""
    policies = [make_policy(system, k, plan, options) for k in range(plan.num_stages)]
    for policy in policies:
        policy.stream_ends_at(num_subnets)
    copies = [residency(k, policies[k]) if residency else Resident() for k in range(plan.num_stages)]
    parts = (options.micro_batches, options.split_backward) if options.micro_batched else None
    engine = _Engine(plan, policies, num_subnets, costs, recompute, copies, record_order, trace_max_events,
                     trace_window(num_subnets, trace_subnets), on_admit, parts)
    if options.replicas > 1:
        engine.exchange = ReplicaExchange(plan, costs, options.replicas, options.parts_here)
    with _collector_paused():
        return engine.run()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the run, back on (if it was) after.

    The loop allocates a few tuples per task (events, tasks), all short-lived and none in a
    cycle (reference counting frees them), while the policies' state and the cost table grow
    with the run; each 700 objects of net growth trigger a collection that scans them, for
    nothing here (about a sixth of the engine at 64 stages x 2,000 subnets, less once the
    state stops growing). What a policy or copy model might
    leave in a cycle is collected once the collector is back."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def trace_window(num_subnets: int, trace_subnets: int) -> tuple[int, int]:
    """``(head, tail)``: subnets ``y < head`` and ``y >= tail`` are traced (every one when they meet)."""
    if trace_subnets <= 0 or 2 * trace_subnets >= num_subnets:
        return num_subnets, num_subnets
    return trace_subnets, num_subnets - trace_subnets


def _swapped_layers(plan: PipelinePlan, copies: list[Residency], costs: CostModel,
                    parts: bool = False) -> frozenset[int] | None:
    """The layers VPipe's swap copies when every stage swaps them alike under the engine's costs
    (the cost table then prices the copies: no per-task call), else None (each residency's own calls;
    always for ``parts``: a part task copies what its subnet-level task copies, each time)."""
    if parts or not copies or any(type(c) is not SynchronousSwap for c in copies):
        return None
    swaps = cast(list[SynchronousSwap], copies)
    swapped = swaps[0].trainable
    structure = plan.structure
    if any(c.costs is not costs or c.trainable != swapped for c in swaps) or not all(
            structure.is_trainable(lid) for lid in swapped):  # an update's layers are the trainable ones
        return None
    return swapped


class _Engine:
    """One run's state; :meth:`run` is the hot loop, written flat with locals (see the module docstring).

    The per-stage accumulators are lists the loop binds as locals and the off-path methods
    (:meth:`_blocking_send`, :meth:`_mirrors`) update in place.
    """

    def __init__(self, plan: PipelinePlan, policies: list[StagePolicy], n: int, costs: CostModel, recompute: bool,
                 copies: list[Residency], record_order: bool, trace_max: int,
                 window: tuple[int, int] | None = None, on_admit: Callable[[int], None] | None = None,
                 parts: tuple[int, bool] | None = None) -> None:
        self.plan, self.policies, self.n, self.costs = plan, policies, n, costs
        self.layout = SubnetLayers(plan)
        self.parts = parts is not None  # tasks are MicroTasks: (micro_batches, split_backward) price them
        self.m = parts[0] if parts is not None else 1
        self.swapped = _swapped_layers(plan, copies, costs, self.parts)
        self.table: CostTable | PartTable = (
            PartTable(plan, costs, recompute, *parts, keep=2) if parts is not None
            else CostTable(plan, costs, recompute, swapped=self.swapped))
        self.blocking = costs.hardware.blocking_send and not costs.free_io
        self.gap = 0.0 if costs.free_io else costs.hardware.task_gap_s  # idle after every task
        self.copies = copies
        self.record_order, self.trace_left = record_order, [trace_max] * len(policies)
        self.head, self.tail = window or (n, n)  # subnets traced: y < head or y >= tail
        self.on_admit = on_admit
        d = len(policies)
        self.results = [StageResult() for _ in policies]
        self.waiting_s, self.sent_bytes, self.spans, self.ends = [0.0] * d, [0.0] * d, [0] * d, [0.0] * d
        self.link_up, self.link_down = [0.0] * d, [0.0] * d  # when the link k -> k+1 (k -> k-1) is free again
        self.computing_until = [0.0] * d  # when each stage's current compute (not its send) ends
        self.running: list[Task | None] = [None] * d  # each stage's task, through its send (run and _blocking_send)
        self.now = 0.0
        self.exchange: ReplicaExchange | None = None  # replicated stages: the replicas' sum, priced per subnet

    def run(self) -> SimResult:  # noqa: C901, PLR0912, PLR0915 - one flat loop on purpose: ~19 M tasks at scale
        policies, n, d = self.policies, self.n, len(self.policies)
        last = d - 1
        first = policies[0]
        may_admit, admit, on_admit = first.may_admit, first.admit, self.on_admit
        parts, m = self.parts, self.m  # MicroTasks: (kind, subnet, stage, part); costs at ``i * m + part``
        next_task = [p.next_task for p in policies]
        completed = [p.completed for p in policies]
        completed_then_next = [p.completed_then_next for p in policies]
        # a part's arrival: (subnet, part); an arrival event names a part as ``subnet * m + part`` (one int)
        forward_arrived: list[Callable[..., None]] = [p.forward_arrived for p in policies]
        backward_arrived: list[Callable[..., None]] = [p.backward_arrived for p in policies]
        table = self.table
        blocks = table.blocks
        held: list[Any] = [None] * ((n >> BLOCK_SHIFT) + 1)  # the table's blocks by index (a list read)
        blk: Any
        copies = self.copies
        swap = self.swapped is not None  # VPipe's copies, priced by the table
        generic = not swap and any(type(c) is not Resident for c in copies)  # else every layer stays: no copy to price
        resident = not swap and not generic
        releasing = generic and not all(c.release_noop for c in copies)  # else no release call per task (all no-ops)
        stats = [c.stats for c in copies]
        swap_in, swap_out = [s.in_bytes for s in stats], [s.out_bytes for s in stats]  # added to in task order
        swap_wait = [s.wait_s for s in stats]
        all_layers, trainable_layers = self.layout.all, self.layout.trainable
        blocking, free_io, mirrored, gap = self.blocking, self.costs.free_io, self.plan.mirrored, self.gap
        # a subnet-level task's free message is delivered at once; a part's is an event at the same time (the
        # part-level schedules' model, which their golden keeps: benchmarks/sim_golden.py --micro)
        deliver_now = free_io and not parts
        direct = deliver_now or blocking  # no link event at the sender's end: delivered now, or sent before it
        record = self.record_order
        orders = [r.order for r in self.results]
        trace_left = self.trace_left
        tracing = any(trace_left)
        head, tail = self.head, self.tail
        forward_s, recompute_s, backward_s, update_s = [0.0] * d, [0.0] * d, [0.0] * d, [0.0] * d
        waiting_s, sent_bytes, spans, ends = self.waiting_s, self.sent_bytes, self.spans, self.ends
        tasks, uses = [0] * d, [0] * d  # layer uses: hits when resident, misses when swapped
        link_up, link_down, computing_until = self.link_up, self.link_down, self.computing_until
        running = self.running
        in_flight: dict[int, Mirror] = {}  # mirrors on their way, by their arrival event's order
        events: list[tuple[float, int, int, int, int]] = []  # (time, order, what, stage, subnet or mirror key)
        push, pop, replace = heapq.heappush, heapq.heappop, heapq.heapreplace
        # The event being handled stays at the heap's root until the first push after it replaces it
        # (one sift instead of two): every push is later than it, so it stays the root until then.
        stale = False
        forward, backward, update = Kind.FORWARD, Kind.BACKWARD, Kind.UPDATE
        j = 0  # the task's part (parts only)
        done, arrive_forward, arrive_backward, shift, mask = _DONE, _ARRIVE_F, _ARRIVE_B, BLOCK_SHIFT, BLOCK_MASK
        order = 0
        now = 0.0
        ask: tuple[int, ...] = tuple(range(d))  # stages that had an event since last asked, ascending
        # The stage whose completion already chose its next task (``fused``, -1: none) and that task: it is
        # among ``ask`` and nothing of that stage happens before it is reached there (see the done event).
        fused, fused_task = -1, None
        task: Any  # a Task, or a MicroTask with parts
        check_admission = True  # stage 0's state changed since may_admit last said no
        replicated = self.exchange is not None
        while True:
            if check_admission:
                check_admission = False
                while first.admitted < n and may_admit(first.admitted):
                    admit(first.admitted)
                    if ask[0]:
                        ask = (0, *ask)
                    if on_admit is not None:
                        on_admit(first.admitted)
            for k in ask:
                if k == fused:
                    task, fused = fused_task, -1
                else:
                    if running[k] is not None:
                        continue
                    if not k:
                        check_admission = True
                    task = next_task[k]()
                if task is None:
                    continue
                if parts:
                    kind, y, _, j = task
                else:
                    kind, y, _ = task
                blk = held[y >> shift]
                if blk is None:
                    blk = self._hold(held, y >> shift)
                i = (y & mask) * d + k
                p = i * m + j if parts else i  # the part's entry (update and uses: the subnet's, at i)
                if record:
                    orders[k].append(task)
                if generic:
                    layers = (trainable_layers if kind is update else all_layers)(y)[k]
                    start = copies[k].acquire(task, layers, now)
                    if start > now:
                        waiting_s[k] += start - now
                        spans[k] += 1
                elif swap:  # SynchronousSwap.acquire: fetch the task's layers, the stage waiting
                    moves = blk.swap
                    if kind is update:
                        copy_s = moves.update_in_s[i]
                        swap_in[k] += moves.update_in_bytes[i]
                    else:
                        copy_s = moves.fetch_s[i]
                        nbytes = moves.fetch_bytes[i]
                        swap_in[k] += nbytes
                    swap_wait[k] += copy_s
                    start = now + copy_s
                    if start > now:
                        waiting_s[k] += start - now
                        spans[k] += 1
                else:
                    start = now
                if kind is forward:
                    mid = start
                    end = start + blk.forward[p]
                    forward_s[k] += end - start
                elif kind is backward:
                    r = blk.recompute[p]
                    if r:
                        mid = start + r
                        recompute_s[k] += mid - start
                        spans[k] += 1
                    else:
                        mid = start
                    end = mid + blk.backward[p]
                    backward_s[k] += end - mid
                elif kind is update:
                    mid = start
                    end = start + blk.update[i]
                    update_s[k] += end - start
                    if not generic:  # forward, backward and this update each used their layers (hit or miss)
                        uses[k] += blk.uses[i]
                else:  # a split backward's weight task (its seconds count as backward)
                    mid = start
                    end = start + blk.weight[p]
                    backward_s[k] += end - start
                free = end
                if releasing:
                    free = copies[k].release(task, layers, end)
                    if free > end:
                        waiting_s[k] += free - end
                        spans[k] += 1
                elif swap and kind is not forward:  # SynchronousSwap.release: write back, the stage waiting
                    if kind is backward:
                        swap_out[k] += nbytes  # the gradient: the fetched parameters' bytes and seconds
                    else:
                        copy_s = moves.update_out_s[i]
                        swap_out[k] += moves.update_out_bytes[i]
                    swap_wait[k] += copy_s
                    free = end + copy_s
                    if free > end:
                        waiting_s[k] += free - end
                        spans[k] += 1
                if tracing and (y < head or y >= tail) and trace_left[k] > 0:
                    recomputes = kind is backward and bool(blk.recompute[p])
                    self._trace(k, task, (now, start, mid, end, free), recomputes)
                tasks[k] += 1
                running[k] = task
                if not blocking:
                    ends[k] = free
                    what, t = done, free + gap
                else:
                    computing_until[k] = end
                    if (kind is forward and k < last) or (kind is backward and k > 0):
                        if parts:  # priced now, from the receiver's compute as known now (the part-level model)
                            arrive, dst, sent = self._part_send(k, task, free)
                            order += 1
                            event = (arrive, order, arrive_forward if kind is forward else arrive_backward, dst,
                                     y * m + j)
                            if stale:
                                replace(events, event)
                                stale = False
                            else:
                                push(events, event)
                            ends[k] = sent
                            what, t = done, sent + gap
                        else:
                            what, t = _SEND, free  # how long the send holds the stage depends on the receiver then
                    else:
                        ends[k] = free
                        what, t = done, free + gap
                order += 1
                if stale:
                    replace(events, (t, order, what, k, y))
                    stale = False
                else:
                    push(events, (t, order, what, k, y))
            if stale:
                pop(events)
            if not events:
                break
            now, _, what, k, y = events[0]
            stale = True
            if not k:
                check_admission = True
            if what == done:
                task = running[k]
                assert task is not None
                running[k] = None
                kind = task[0]
                # Completion and the next choice in one call, where the stage is asked next with nothing of it in
                # between: not stage 0 (admissions come first), not the last stage's forward (its own backward
                # arrives first), not a mirrored update (mirrors arrive first).
                if k and not (kind is forward and k == last) and not (kind is update and mirrored):
                    fused, fused_task = k, completed_then_next[k](task)
                else:
                    completed[k](task)
                if kind is forward:
                    if k == last:
                        if parts:
                            backward_arrived[k](y, task[3])
                        else:
                            backward_arrived[k](y)
                        ask = (k,)
                    elif direct:
                        if deliver_now:
                            forward_arrived[k + 1](y)
                            ask = (k, k + 1)
                        else:  # blocking: its arrival was scheduled when the send began
                            ask = (k,)
                    else:
                        blk = blocks.get(y >> shift) or table.block(y >> shift)
                        i = (y & mask) * d + k
                        if parts:  # the part's message; the arrival names the part
                            i = i * m + task[3]
                            y = y * m + task[3]
                        t = link_up[k]
                        if now > t:
                            t = now
                        t += blk.msg_s[i]
                        link_up[k] = t
                        sent_bytes[k] += blk.msg_bytes[i]
                        order += 1
                        if stale:
                            replace(events, (t, order, arrive_forward, k + 1, y))
                            stale = False
                        else:
                            push(events, (t, order, arrive_forward, k + 1, y))
                        ask = (k,)
                elif kind is backward and k:
                    if direct:
                        if deliver_now:
                            backward_arrived[k - 1](y)
                            ask = (k - 1, k)
                            if k == 1:
                                check_admission = True
                        else:
                            ask = (k,)
                    else:
                        blk = blocks.get(y >> shift) or table.block(y >> shift)
                        i = (y & mask) * d + k - 1  # the boundary before stage k
                        if parts:
                            i = i * m + task[3]
                            y = y * m + task[3]
                        t = link_down[k]
                        if now > t:
                            t = now
                        t += blk.msg_s[i]
                        link_down[k] = t
                        sent_bytes[k] += blk.msg_bytes[i]
                        order += 1
                        if stale:
                            replace(events, (t, order, arrive_backward, k - 1, y))
                            stale = False
                        else:
                            push(events, (t, order, arrive_backward, k - 1, y))
                        ask = (k,)
                elif kind is update and mirrored:
                    if stale:
                        pop(events)
                        stale = False
                    relayed, reached = self._mirrors(k, now)
                    for t, mirror in relayed:
                        order += 1
                        in_flight[order] = mirror
                        push(events, (t, order, _ARRIVE_M, mirror.dst, order))
                    ask = tuple(sorted({k, *reached}))
                    if not ask[0]:
                        check_admission = True
                else:
                    ask = (k,)
                if replicated and policies[k].newly_awaiting:  # type: ignore[attr-defined]
                    if stale:
                        pop(events)
                        stale = False
                    order = self._exchange(k, now, order, events)
            elif what == arrive_forward:
                if parts:
                    forward_arrived[k](*divmod(y, m))
                else:
                    forward_arrived[k](y)
                ask = (k,)
            elif what == arrive_backward:
                if parts:
                    backward_arrived[k](*divmod(y, m))
                else:
                    backward_arrived[k](y)
                ask = (k,)
            elif what == _SEND:
                if stale:
                    pop(events)
                    stale = False
                task = running[k]
                assert task is not None
                arrive, dst, sent = self._blocking_send(k, task, now)
                order += 1
                push(events, (arrive, order, arrive_forward if task[0] is forward else arrive_backward, dst, y))
                order += 1
                push(events, (sent + gap, order, done, k, y))
                ask = (k,)
            elif what == _REDUCED:
                policies[k].reduced(y)  # type: ignore[attr-defined]
                ask = (k,)
            else:
                self._mirror_arrived(k, in_flight.pop(y))
                ask = (k,)
        self.now = now
        stalled = [p.stage for p in policies if p.finished < n]
        if stalled:
            raise DeadlockError(f"stages {stalled} stalled at t={now} with subnets unfinished")
        for k, result in enumerate(self.results):
            result.seconds.update(forward=forward_s[k], recompute=recompute_s[k], backward=backward_s[k],
                                  optimizer=update_s[k], waiting=waiting_s[k])
            result.tasks, result.end, result.sent_bytes = tasks[k], ends[k], sent_bytes[k]
            result.trace_dropped = tasks[k] + spans[k] - len(result.trace)
            if resident:
                copies[k].stats.hits += uses[k]
            elif swap:
                stats[k].misses += uses[k]
                stats[k].in_bytes, stats[k].out_bytes, stats[k].wait_s = swap_in[k], swap_out[k], swap_wait[k]
        return SimResult(self.results, copies, n)

    def _exchange(self, k: int, now: float, order: int, events: list[tuple[float, int, int, int, int]]) -> int:
        """Stage ``k``'s subnets whose own parts are done: each one's sum arrives after the replicas' exchange."""
        assert self.exchange is not None
        policy = self.policies[k]
        for subnet in policy.newly_awaiting:  # type: ignore[attr-defined]
            seconds, nbytes = self.exchange.cost(subnet, k)
            self.sent_bytes[k] += nbytes
            order += 1
            heapq.heappush(events, (now + seconds, order, _REDUCED, k, subnet))
        policy.newly_awaiting.clear()  # type: ignore[attr-defined]
        return order

    def _hold(self, held: list[Any], index: int) -> CostBlock | PartBlock:
        """Block ``index`` of the cost table, into ``held`` (the loop's list of the blocks the table keeps: a
        list index per task instead of a dict lookup); the blocks the table let go are let go here too."""
        block = self.table.block(index)
        kept = self.table.blocks
        for j, old in enumerate(held):
            if old is not None and j not in kept:
                held[j] = None
        held[index] = block
        return block

    def _blocking_send(self, k: int, task: Task, now: float) -> tuple[float, int, float]:
        """Stage ``k`` sends ``task``'s message at ``now`` and is held until gloo lets go:
        ``(when the receiver's policy learns of it, the receiver, when the hold ends)``.

        The message arrives a latency after the send began, or when the send ends if later; and
        its latency runs only once the receiver is neither computing nor sending
        (:meth:`_receiver_busy_until`). Taking a message in is work for the receiving process
        (its receive thread unpacks it and wakes the main loop), which that process's compute
        and its own blocking send hold up: on cpu-local, the time from a send's start to the
        waiting receiver's task, less the receiver's compute and send spans in between, is
        the same whether or not the receiver was busy (``bench_sim.py --fit`` fits the latency
        that way)."""
        kind, y, _ = task
        dst, blk, i = self._message(k, task)
        nbytes = blk.msg_bytes[i]
        self.sent_bytes[k] += nbytes
        hardware = self.costs.hardware
        sent = now + hardware.send_hold_s(k, dst, nbytes, self.computing_until[dst] - now)
        self.waiting_s[k] += sent - now
        self.spans[k] += 1
        self._trace_span(k, "waiting", f"send {kind.value}{y}", now, sent, y)
        self.ends[k] = sent
        return max(sent, self._receiver_busy_until(dst, now) + blk.msg_s[i]), dst, sent

    def _part_send(self, k: int, task: Task, at: float) -> tuple[float, int, float]:
        """A part's blocking send from stage ``k`` when its compute ends at ``at``, priced when the task starts:
        ``(when the receiver's policy learns of it, the receiver, when the hold ends)``.

        The part-level model (the golden keeps it): the hold follows :meth:`Hardware.send_hold_s` with the
        receiver's compute as known at the task's start, and the message arrives a latency after the later of
        ``at`` and that compute's end, or when the hold ends."""
        kind, y, _, j = cast(MicroTask, task)
        dst = k + 1 if kind is Kind.FORWARD else k - 1
        blk = cast(PartBlock, self.table.block(y >> BLOCK_SHIFT))
        p = ((y & BLOCK_MASK) * len(self.policies) + min(k, dst)) * self.m + j
        nbytes = blk.msg_bytes[p]
        busy = self.computing_until[dst]
        sent = at + self.costs.hardware.send_hold_s(k, dst, nbytes, busy - at)
        self.sent_bytes[k] += nbytes
        self.waiting_s[k] += sent - at
        self.spans[k] += 1
        self._trace_span(k, "waiting", f"send {kind.value}{y}.{j}", at, sent, y)
        return max(sent, max(at, busy) + blk.msg_s[p]), dst, sent

    def _receiver_busy_until(self, k: int, now: float) -> float:
        """When stage ``k`` stops computing and sending, as far as known at ``now`` (``now`` if idle).

        A stage computing a task it will send after is busy for that send's hold too, priced
        as to an idle peer (the hold's receiver-busy part is not known yet)."""
        task = self.running[k]
        if task is None:
            return now
        compute_end = self.computing_until[k]
        if compute_end <= now:  # in its send (or the gap after its last span)
            return max(now, self.ends[k])
        kind = task[0]
        if kind is not Kind.FORWARD and kind is not Kind.BACKWARD:
            return compute_end
        dst, blk, i = self._message(k, task)
        if not 0 <= dst < len(self.policies):
            return compute_end
        return compute_end + self.costs.hardware.send_hold_s(k, dst, blk.msg_bytes[i], 0.0)

    def _message(self, k: int, task: Task) -> tuple[int, CostBlock, int]:
        """Where stage ``k``'s forward or backward ``task`` sends its message: ``(the receiver, the
        subnet's cost block, the index of the boundary between them in it)``."""
        kind, y, _ = task
        dst = k + 1 if kind is Kind.FORWARD else k - 1
        block = cast(CostBlock, self.table.block(y >> BLOCK_SHIFT))
        return dst, block, (y & BLOCK_MASK) * len(self.policies) + min(k, dst)

    def _mirrors(self, k: int, now: float) -> tuple[list[tuple[float, Mirror]], list[int]]:
        """Stage ``k``'s update at ``now`` sends its mirrors: ``(arrival time and mirror of each one
        relayed hop by hop over the neighbour links, stages reached at once with free messages)``. A part-level
        schedule's mirrors are relayed with free messages too (in no time: events of their own)."""
        costs = self.costs
        relayed: list[tuple[float, Mirror]] = []
        reached: list[int] = []
        result = self.results[k]
        for mirror in self.policies[k].take_mirrors():
            nbytes = costs.param_bytes(mirror.layer) * (1 + costs.optimizer_states)
            result.mirror_bytes += nbytes
            if costs.free_io and not self.parts:
                self._mirror_arrived(mirror.dst, mirror)
                reached.append(mirror.dst)
                continue
            at, step = now, 1 if mirror.dst > k else -1
            links = self.link_up if step == 1 else self.link_down
            for src in range(k, mirror.dst, step):
                start = max(at, links[src])
                at = start + (0.0 if costs.free_io else costs.hardware.transfer_s(src, src + step, nbytes))
                links[src] = at
            relayed.append((at, mirror))
        return relayed, reached

    def _mirror_arrived(self, k: int, mirror: Mirror) -> None:
        self.copies[k].replaced(mirror.layer)
        self.policies[k].mirror_arrived(mirror.layer, mirror.version)

    def _trace(self, k: int, task: Task, times: tuple[float, float, float, float, float], recomputes: bool) -> None:
        """The task's spans, in time order, into stage ``k``'s trace while its budget lasts."""
        kind, y = task[0], task[1]
        part = f"{y}.{task[3]}" if self.parts else f"{y}"  # type: ignore[misc]  # a MicroTask's part
        now, start, mid, end, free = times
        if start > now:
            self._trace_span(k, "waiting", "copy", now, start, y)
        if kind is Kind.FORWARD:
            self._trace_span(k, "forward", f"F{part}", start, end, y)
        elif kind is Kind.UPDATE:
            self._trace_span(k, "optimizer", f"U{y}", start, end, y)
        elif kind is Kind.WEIGHT:
            self._trace_span(k, "backward", f"W{part}", start, end, y)
        else:
            if recomputes:
                self._trace_span(k, "recompute", f"R{part}", start, mid, y)
            self._trace_span(k, "backward", f"B{part}", mid, end, y)
        if free > end:
            self._trace_span(k, "waiting", "copy", end, free, y)

    def _trace_span(self, k: int, category: str, name: str, a: float, b: float, subnet: int) -> None:
        """One span into stage ``k``'s trace, if its budget lasts and ``subnet`` is in the window (what it
        drops is counted at the end)."""
        if self.trace_left[k] <= 0 or self.head <= subnet < self.tail:
            return
        self.trace_left[k] -= 1
        self.results[k].trace.append({"name": name, "cat": category, "ph": "X", "pid": 0, "tid": k,
                                      "ts": round(a * 1e6, 3), "dur": round((b - a) * 1e6, 3),
                                      "args": {"subnet": subnet}})
