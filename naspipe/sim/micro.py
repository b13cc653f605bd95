"""The discrete-event simulation of micro-batched schedules (``micro_batches`` > 1 or a split backward).

The same model of time as :mod:`naspipe.sim.engine` (which runs the paper's subnet-level schedule,
flat and tuned for 64 stages x 100,000 subnets), for the tasks of
:class:`~naspipe.scheduling.policies.micro.MicroCSP`: each stage runs its real policy, fed the
runtime's events part by part (admit, ``forward_arrived(y, j)``, ``backward_arrived(y, j)``,
completion, mirrors). What a task costs:

- a part ``j`` of subnet ``y`` holds ``f = size_j / batch`` of the batch (the runtime's
  ``torch.tensor_split``: the first ``batch % m`` parts one sample larger); its forward,
  recompute and backward kernels are ``f`` times the subnet's (the cost models are linear in
  the batch, :func:`~naspipe.sim.costs.at_batch`), plus the hardware's per-task overhead, which a
  part pays in full (the price of many small tasks);
- a split backward's ``B`` holds the recompute and half the backward kernels (the input
  gradient: one of a dense layer's two backward products), ``W`` the other half plus its own
  task overhead;
- the update, once per subnet and stage, costs what it costs unsplit;
- the last stage does not recompute: a part's backward follows its forward there at once, so
  its activations are kept for it (no more memory than the recompute's backward holds; the
  runtime's executor does the same, and recomputation does not change a bit);
- messages carry ``f`` of the activation over the link (latency + bytes / bandwidth, one at a
  time per direction), and with blocking sends (gloo on CPU) hold the sender as
  :meth:`Hardware.send_hold_s` says;
- the context cache (:class:`~naspipe.sim.residency.ContextCache`) is asked before every task,
  as the runtime's worker asks it, with the layers of the subnet-level task the part belongs to.

Written for clarity rather than speed: micro-batched runs are priced at the paper plan's sizes
(hundreds of subnets), not at the 64 x 100,000 scale the subnet-level engine serves.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from naspipe.config.validation import check_parts
from naspipe.scheduling.driver import DeadlockError
from naspipe.scheduling.mirror import Mirror
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies import PolicyOptions, make_policy
from naspipe.scheduling.policies.micro import MicroCSP
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, WEIGHT, MicroTask
from naspipe.sim.costs import CostModel
from naspipe.sim.engine import SimResult, StageResult, trace_window
from naspipe.sim.residency import Residency, Resident
from naspipe.sim.tables import BLOCK_MASK, BLOCK_SHIFT, BlockArrays, CostTable

ResidencyFactory = Callable[[int, MicroCSP], Residency]
INPUT_SHARE = 0.5  # of a backward's kernels, the input gradient's (the weight gradient's is the rest)


def part_fractions(batch: int, parts: int) -> list[float]:
    """Each part's share of the batch, as ``torch.tensor_split`` cuts it (the first ``batch % parts`` larger)."""
    check_parts(parts, batch, "the batch")  # one line: simulate and plan reach here with the batch they price
    small, extra = divmod(batch, parts)
    return [(small + (j < extra)) / batch for j in range(parts)]


@dataclass(frozen=True, slots=True)
class PartCosts:
    """One (subnet, stage)'s seconds per task of part ``j`` (index ``j``) and its message."""

    forward: list[float]
    recompute: list[float]
    backward: list[float]  # the input gradient's share when split (the recompute not included)
    weight: list[float]  # 0.0 unsplit
    update: float
    msg_s: list[float]
    msg_bytes: list[float]


class PartTable:
    """:class:`PartCosts` per (subnet, stage), from the subnet-level :class:`CostTable` scaled per part."""

    def __init__(self, plan: PipelinePlan, costs: CostModel, recompute: bool, parts: int, split: bool) -> None:
        self.table = CostTable(plan, costs, recompute, keep=1 << 20)
        self.costs, self.split, self.d = costs, split, plan.num_stages
        self.fractions = part_fractions(costs.batch, parts) if not costs.per_task else [1.0 / parts] * parts
        self.overhead = 0.0 if costs.per_task else costs.hardware.task_overhead_s
        self._arrays: dict[int, BlockArrays] = {}
        self._memo: dict[tuple[int, int], PartCosts] = {}

    def at(self, subnet: int, stage: int) -> PartCosts:
        key = (subnet, stage)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._build(subnet, stage)
        return found

    def forget(self, subnet: int, stage: int) -> None:
        self._memo.pop((subnet, stage), None)

    def _build(self, subnet: int, stage: int) -> PartCosts:
        index = subnet >> BLOCK_SHIFT
        arrays = self._arrays.get(index)
        if arrays is None:
            arrays = self._arrays[index] = self.table.arrays(index)
        row, ov, hw = subnet & BLOCK_MASK, self.overhead, self.costs.hardware
        forward = float(arrays.forward[row, stage]) - ov
        # the last stage keeps a part's activations for its backward, which follows at once (keep_last)
        recompute = 0.0 if stage == self.d - 1 else float(arrays.recompute[row, stage])
        backward = float(arrays.backward[row, stage]) - ov
        nbytes = float(arrays.msg_bytes[row, stage])
        input_share = INPUT_SHARE if self.split else 1.0
        fractions = self.fractions
        msg_bytes = [nbytes * f for f in fractions]
        free = self.costs.free_io or stage == self.d - 1
        return PartCosts(
            forward=[ov + forward * f for f in fractions],
            recompute=[recompute * f for f in fractions],
            backward=[ov + backward * input_share * f for f in fractions],
            weight=[ov + backward * (1.0 - input_share) * f if self.split else 0.0 for f in fractions],
            update=float(arrays.update[row, stage]),
            msg_s=[0.0 if free else hw.transfer_s(stage, stage + 1, b) for b in msg_bytes],
            msg_bytes=msg_bytes,
        )


def simulate_micro(
    plan: PipelinePlan,
    system: str,
    num_subnets: int,
    options: PolicyOptions,
    costs: CostModel,
    recompute: bool,
    residency: ResidencyFactory | None = None,
    trace_max_events: int = 0,
    trace_subnets: int = 0,
    on_admit: Callable[[int], None] | None = None,
) -> SimResult:
    """Simulate ``num_subnets`` subnets of ``plan`` under ``system``'s micro-batched schedule."""
    policies = [make_policy(system, k, plan, options) for k in range(plan.num_stages)]
    micro = [p for p in policies if isinstance(p, MicroCSP)]
    if len(micro) != len(policies):
        raise ValueError(f"system {system!r}: options {options} do not ask for a micro-batched schedule")
    for policy in micro:
        policy.stream_ends_at(num_subnets)
    copies = [residency(k, micro[k]) if residency else Resident() for k in range(plan.num_stages)]
    table = PartTable(plan, costs, recompute, options.micro_batches, options.split_backward)
    engine = _MicroEngine(plan, micro, num_subnets, costs, table, copies, trace_max_events,
                          trace_window(num_subnets, trace_subnets), on_admit)
    return engine.run()


class _MicroEngine:
    """One run's state: events ``(time, order, what, stage, payload)``; what: done, forward or backward arrival,
    mirror arrival."""

    DONE, ARRIVE_F, ARRIVE_B, ARRIVE_M = 0, 1, 2, 3

    def __init__(self, plan: PipelinePlan, policies: list[MicroCSP], n: int, costs: CostModel, table: PartTable,
                 copies: list[Residency], trace_max: int, window: tuple[int, int],
                 on_admit: Callable[[int], None] | None) -> None:
        self.plan, self.policies, self.n, self.costs, self.table, self.copies = plan, policies, n, costs, table, copies
        d = len(policies)
        self.d = d
        self.results = [StageResult() for _ in policies]
        self.trace_left, (self.head, self.tail) = [trace_max] * d, window
        self.on_admit = on_admit
        self.gap = 0.0 if costs.free_io else costs.hardware.task_gap_s
        self.blocking = costs.hardware.blocking_send and not costs.free_io
        self.link_up, self.link_down = [0.0] * d, [0.0] * d
        self.busy_until = [0.0] * d  # the stage's current task (compute and any blocking send) ends
        self.computing_until = [0.0] * d
        self.running: list[MicroTask | None] = [None] * d
        self.events: list[tuple[float, int, int, int, object]] = []
        self.order = 0
        self.now = 0.0

    def run(self) -> SimResult:
        first = self.policies[0]
        while True:
            while first.admitted < self.n and first.may_admit(first.admitted):
                first.admit(first.admitted)
                if self.on_admit is not None:
                    self.on_admit(first.admitted)
            for k in range(self.d):
                if self.running[k] is None:
                    self._start(k)
            if not self.events:
                break
            self.now, _, what, k, payload = heapq.heappop(self.events)
            self._handle(what, k, payload)
        stalled = [p.stage for p in self.policies if p.finished < self.n]
        if stalled:
            raise DeadlockError(f"stages {stalled} stalled at t={self.now} with subnets unfinished")
        return SimResult(self.results, self.copies, self.n)

    def _push(self, t: float, what: int, stage: int, payload: object) -> None:
        self.order += 1
        heapq.heappush(self.events, (t, self.order, what, stage, payload))

    def _handle(self, what: int, k: int, payload: object) -> None:
        policy = self.policies[k]
        if what == self.DONE:
            task = self.running[k]
            assert task is not None
            self.running[k] = None
            self._completed(k, task)
        elif what == self.ARRIVE_F:
            policy.forward_arrived(*payload)  # type: ignore[misc]
        elif what == self.ARRIVE_B:
            policy.backward_arrived(*payload)  # type: ignore[misc]
        else:
            mirror = payload
            assert isinstance(mirror, Mirror)
            self.copies[k].replaced(mirror.layer)
            policy.mirror_arrived(mirror.layer, mirror.version)

    def _start(self, k: int) -> None:
        task = self.policies[k].next_task()
        if task is None:
            return
        kind, y, _, j = task
        result, costs = self.results[k], self.table.at(y, k)
        layers = (self.plan.trainable_layers if kind is UPDATE else self.plan.stage_layers)(y, k)
        now = self.now
        start = self.copies[k].acquire(task, layers, now)  # type: ignore[arg-type]  # layers of its subnet's task
        if type(self.copies[k]) is Resident:
            self.copies[k].stats.hits += len(layers)
        if start > now:
            result.seconds["waiting"] += start - now
            self._trace(k, "waiting", "copy", now, start, y)
        end = self._compute(k, task, costs, start)
        self.running[k] = task
        result.tasks += 1
        self.computing_until[k] = end
        if kind is UPDATE:
            self.table.forget(y, k)
        sends = (kind is FORWARD and k < self.d - 1) or (kind is BACKWARD and k > 0)
        if sends and self.blocking:
            end = self._blocking_send(k, task, costs, end)
        result.end = end
        self._push(end + self.gap, self.DONE, k, None)

    def _compute(self, k: int, task: MicroTask, costs: PartCosts, start: float) -> float:
        """The task's spans from ``start``; returns when its compute ends."""
        kind, y, _, j = task
        seconds, name = self.results[k].seconds, f"{y}.{j}"
        if kind is FORWARD:
            end = start + costs.forward[j]
            seconds["forward"] += end - start
            self._trace(k, "forward", "F" + name, start, end, y)
        elif kind is BACKWARD:
            mid = start + costs.recompute[j]
            if mid > start:
                seconds["recompute"] += mid - start
                self._trace(k, "recompute", "R" + name, start, mid, y)
            end = mid + costs.backward[j]
            seconds["backward"] += end - mid
            self._trace(k, "backward", "B" + name, mid, end, y)
        elif kind is WEIGHT:
            end = start + costs.weight[j]
            seconds["backward"] += end - start
            self._trace(k, "backward", "W" + name, start, end, y)
        else:
            end = start + costs.update
            seconds["optimizer"] += end - start
            self._trace(k, "optimizer", f"U{y}", start, end, y)
        return end

    def _completed(self, k: int, task: MicroTask) -> None:
        kind, y, _, j = task
        policy = self.policies[k]
        policy.completed(task)
        if kind is FORWARD:
            if k == self.d - 1:
                policy.backward_arrived(y, j)
            elif not self.blocking:
                self._send(k, k + 1, y, j, self.link_up)
        elif kind is BACKWARD and k > 0 and not self.blocking:
            self._send(k, k - 1, y, j, self.link_down)
        elif kind is UPDATE and self.plan.mirrored:
            self._mirrors(k)

    def _send(self, k: int, dst: int, y: int, j: int, links: list[float]) -> None:
        """The part's activation (gradient) over the link, one message at a time per direction."""
        costs = self.table.at(y, min(k, dst))
        t = max(self.now, links[k]) + costs.msg_s[j]
        links[k] = t
        self.results[k].sent_bytes += costs.msg_bytes[j]
        self._push(t, self.ARRIVE_F if dst > k else self.ARRIVE_B, dst, (y, j))

    def _blocking_send(self, k: int, task: MicroTask, costs_here: PartCosts, at: float) -> float:
        """gloo's send holds the sender; the message arrives a latency after, or when the hold ends."""
        kind, y, _, j = task
        dst = k + 1 if kind is FORWARD else k - 1
        costs = self.table.at(y, min(k, dst))
        nbytes = costs.msg_bytes[j]
        hw = self.costs.hardware
        sent = at + hw.send_hold_s(k, dst, nbytes, self.computing_until[dst] - at)
        self.results[k].sent_bytes += nbytes
        self.results[k].seconds["waiting"] += sent - at
        self._trace(k, "waiting", f"send {kind.value}{y}.{j}", at, sent, y)
        arrive = max(sent, max(at, self.computing_until[dst]) + costs.msg_s[j])
        self._push(arrive, self.ARRIVE_F if dst > k else self.ARRIVE_B, dst, (y, j))
        return sent

    def _mirrors(self, k: int) -> None:
        """An update's mirrors travel hop by hop over the neighbour links (as the subnet-level engine's)."""
        costs = self.costs
        for mirror in self.policies[k].take_mirrors():
            nbytes = costs.param_bytes(mirror.layer) * (1 + costs.optimizer_states)
            self.results[k].mirror_bytes += nbytes
            at, step = self.now, 1 if mirror.dst > k else -1
            links = self.link_up if step == 1 else self.link_down
            for src in range(k, mirror.dst, step):
                start = max(at, links[src])
                at = start + (0.0 if costs.free_io else costs.hardware.transfer_s(src, src + step, nbytes))
                links[src] = at
            self._push(at, self.ARRIVE_M, mirror.dst, mirror)

    def _trace(self, k: int, category: str, name: str, a: float, b: float, subnet: int) -> None:
        if self.trace_left[k] <= 0 or self.head <= subnet < self.tail:
            self.results[k].trace_dropped += 1
            return
        self.trace_left[k] -= 1
        self.results[k].trace.append({"name": name, "cat": category, "ph": "X", "pid": 0, "tid": k,
                                      "ts": round(a * 1e6, 3), "dur": round((b - a) * 1e6, 3),
                                      "args": {"subnet": subnet}})


def micro_longest_path(plan: PipelinePlan, system: str, num_subnets: int, costs: CostModel, recompute: bool,
                       options: PolicyOptions) -> float:
    """The lower bound's longest path (:mod:`naspipe.sim.bound`) for a micro-batched schedule.

    Each subnet's parts as a graph: part ``j``'s forward on stage ``k`` after its forward on ``k - 1``
    and its message, after part ``j - 1``'s forward on ``k`` (a stage takes a subnet's parts in order)
    and after the last writes of the layers it reads there (the CSP edge, and the window's); its
    backward after its gradient arrives (the last stage: after its own forward) and after part
    ``j - 1``'s backward there (gradients are summed in part order); a weight task after its
    backward and the previous part's weight task; the update after the last part's. Other subnets'
    tasks on the same stage are left out, as the subnet-level bound leaves them out."""
    from naspipe.sim.bound import CAUSAL_SYSTEMS, _LayerWrites, _WindowEdges  # the subnet-level bound's edges

    table = PartTable(plan, costs, recompute, options.micro_batches, options.split_backward)
    writes = _LayerWrites(plan) if system in CAUSAL_SYSTEMS else None
    if writes is not None and plan.windowed:
        writes.window = _WindowEdges(plan, options.shared_window)
    longest, d = 0.0, plan.num_stages
    for index in range((num_subnets + BLOCK_MASK) >> BLOCK_SHIFT):
        first = index << BLOCK_SHIFT
        if writes is not None:
            writes.load(table.table.arrays(index), plan, index)
        for row in range(min(BLOCK_MASK + 1, num_subnets - first)):
            y = first + row
            ready = writes.ready(row, y) if writes is not None else [0.0] * d
            done = _subnet_chain(table, y, d, ready, options.split_backward)
            for k in range(d):
                table.forget(y, k)
            longest = max(longest, *done)
            if writes is not None:
                writes.record(row, y, done)
    return longest


def _subnet_chain(table: PartTable, y: int, d: int, ready: list[float], split: bool) -> list[float]:
    """When each stage's update of subnet ``y`` ends, with unlimited overlap between subnets."""
    costs = [table.at(y, k) for k in range(d)]
    parts = len(costs[0].forward)
    arrive = [0.0] * parts
    for k, c in enumerate(costs):
        t = ready[k]
        ends = []
        for j in range(parts):
            t = max(arrive[j], t) + c.forward[j]
            ends.append(t)
        arrive = [end + c.msg_s[j] for j, end in enumerate(ends)] if k < d - 1 else ends
    done = [0.0] * d
    for k in range(d - 1, -1, -1):
        c = costs[k]
        t = w = 0.0
        ends = []
        for j in range(parts):
            t = max(arrive[j], t) + c.recompute[j] + c.backward[j]
            ends.append(t)
            if split:
                w = max(w, t) + c.weight[j]
        done[k] = (w if split else t) + c.update
        if k:
            before = costs[k - 1].msg_s
            arrive = [end + before[j] for j, end in enumerate(ends)]
    return done
