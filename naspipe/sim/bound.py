"""A lower bound on any schedule's makespan: the physical limit a scheduler is measured against.

``makespan >= max(W, P)``: ``W`` is the busiest stage's total work (a stage runs one task at
a time) and ``P`` the longest path through the task graph with unlimited overlap: each
subnet's chain F(stage 0) -> ... -> F(D-1) -> B(D-1) -> ... -> B(0), with the message
times between stages, each stage's update after its backward, and, for the systems whose
semantics are causal (sequential, csp, csp-no-scheduler), the edge from a subnet's update of
a layer to the next user's first access of it (the CSP rule). Bulk synchronous and
asynchronous systems (gpipe, vpipe, pipedream) do not order subnets by layer, so their
path is the single-subnet chain. Copies are left out: a perfect cache hides them.

Windowed shared layers (:mod:`naspipe.scheduling.windows`) are outside the per-layer edge;
for the systems that keep the window rule, a subnet's forward on a stage holding them starts
after the updates there of every subnet of the windows before last (``< rW`` with ``r`` its
read version): the window's edge.

At scale (64 stages x 100,000 subnets) the path is a walk over 6.4 M (subnet, stage)
pairs, so it reads each task's seconds from the engine's cost table
(:class:`~naspipe.sim.tables.CostTable`, bit for bit :func:`~naspipe.sim.costs.forward_s`
and friends) instead of summing layers per task, and keeps the layers' last write times in
an array read and written one subnet row at a time (:class:`_LayerWrites`); systems without
the CSP edge fold whole blocks of chains at once (:meth:`_Chain.independent`). The additions
are the scalar walk's own, in its order (``max`` commutes with them: rounding is monotonic),
so the bound is the same float.
"""

from __future__ import annotations

import numpy as np

from naspipe import systems
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies import POLICIES, PolicyOptions
from naspipe.scheduling.windows import SharedWindow
from naspipe.sim.costs import CostModel
from naspipe.sim.exchange import ReplicaExchange
from naspipe.sim.tables import BLOCK, BLOCK_MASK, BlockArrays, CostTable, PartBlock, PartTable

CAUSAL_SYSTEMS = frozenset(systems.with_capability("causal"))


def longest_path(plan: PipelinePlan, system: str, num_subnets: int, costs: CostModel, recompute: bool,
                 shared_window: int = 8) -> float:
    d = plan.num_stages
    table = CostTable(plan, costs, recompute, keep=1)
    writes = _LayerWrites(plan) if system in CAUSAL_SYSTEMS else None
    if writes is not None and plan.windowed and POLICIES[system].windowed_shared:
        writes.window = _WindowEdges(plan, shared_window)
    longest = 0.0
    for index in range((num_subnets + BLOCK - 1) // BLOCK):
        rows = min(BLOCK, num_subnets - index * BLOCK)
        chain = _Chain(table.arrays(index), rows, d)
        if writes is None:
            top = chain.independent()
        else:
            writes.load(chain.block, plan, index)
            top = chain.causal(writes, index * BLOCK)
        if top > longest:
            longest = top
    return longest


class _Chain:
    """One block of subnets' chains as the scalar walk adds them: per stage forward then message
    (``a``), and backwards recompute + backward (``rb``), update (``u``), message back (``m``,
    0.0 after stage 0 where the walk adds none and the chain ends)."""

    def __init__(self, block: BlockArrays, rows: int, d: int) -> None:
        self.block, self.rows, self.d = block, rows, d
        self.a = (block.forward + block.msg_s)[:rows]  # the last stage's message is 0.0: f + 0.0, as the walk adds
        self.rb = (block.recompute + block.backward)[:rows, ::-1]
        self.u = block.update[:rows, ::-1]
        self.m = np.zeros((rows, d))
        self.m[:, :-1] = block.msg_s[:rows, d - 2::-1] if d > 1 else 0.0  # after stage k's backward: msg k-1

    def independent(self) -> float:
        """The block's longest chain when subnets do not wait on each other: whole-block folds
        (``np.add.accumulate`` adds left to right, as the walk's ``+=``)."""
        rows, d = self.rows, self.d
        steps = np.empty((rows, 2 * d + 1))
        steps[:, 0] = np.add.accumulate(self.a, axis=1)[:, -1]  # forward end
        steps[:, 1::2], steps[:, 2::2] = self.rb, self.m
        t = np.add.accumulate(steps, axis=1)[:, 1::2]  # after each stage's backward
        return float((t + self.u).max()) if rows else 0.0

    def causal(self, writes: _LayerWrites, first: int) -> float:
        """The block's subnets (``first`` + row) in order, each stage's forward after its layers'
        last writes and, with windowed shared layers, after its window's edge."""
        longest = 0.0
        for row, (a, rb, u, m) in enumerate(zip(self.a.tolist(), self.rb.tolist(), self.u.tolist(),
                                                 self.m.tolist(), strict=True)):
            t = 0.0
            for w, step in zip(writes.ready(row, first + row), a, strict=True):
                if w > t:
                    t = w
                t += step
            ends = []
            for back, update, message in zip(rb, u, m, strict=True):
                t += back
                ends.append(t + update)
                t += message
            top = max(ends)
            if top > longest:
                longest = top
            ends.reverse()
            writes.record(row, first + row, ends)
        return longest


class _LayerWrites:
    """Each layer's last update end (the CSP edge), read and written per subnet as numpy rows.

    A subnet's stage ``k`` may start its forward only after every earlier write of the
    trainable layers it runs there. Frozen layers are never written, so their time stays
    0.0 and taking the maximum over a stage's every layer is the maximum over its trainable
    ones (times are never negative)."""

    def __init__(self, plan: PipelinePlan) -> None:
        structure = plan.structure
        self.written = np.zeros(structure.num_layers, dtype=np.float64)
        # windowed shared layers follow the window's edge, not the per-layer one: never recorded
        self.trainable = np.array([structure.is_trainable(lid) and lid not in plan.windowed
                                   for lid in range(structure.num_layers)], dtype=bool)
        self.window: _WindowEdges | None = None
        self.layers = np.empty((0, 0), dtype=np.int64)
        self.starts = np.empty((0, 0), dtype=np.int64)
        self.sizes = np.empty((0, 0), dtype=np.int64)

    def load(self, block: BlockArrays, plan: PipelinePlan, index: int) -> None:
        """The block's layer rows and each row's stage starts (one partition, or each subnet's own)."""
        self.layers = block.layers
        if plan.mirrored:
            first = index * BLOCK
            bounds = np.array([plan.partition_of(y).bounds for y in range(first, first + BLOCK)], dtype=np.int64)
        else:
            bounds = np.broadcast_to(np.asarray(plan.partition.bounds, dtype=np.int64), (BLOCK, plan.num_stages + 1))
        self.starts, self.sizes = bounds[:, :-1], np.diff(bounds, axis=1)

    def ready(self, row: int, subnet: int) -> list[float]:
        """Per stage, the latest write of the layers the block's subnet ``row`` runs there (and the
        window's edge where one applies)."""
        latest: list[float] = np.maximum.reduceat(self.written[self.layers[row]], self.starts[row]).tolist()
        if self.window is not None:
            return [max(w, self.window.ready(subnet, k)) for k, w in enumerate(latest)]
        return latest

    def record(self, row: int, subnet: int, done: list[float]) -> None:
        """The subnet's update of stage ``k`` ended at ``done[k]``: its trainable layers there now date from it."""
        layers = self.layers[row]
        keep = self.trainable[layers]
        self.written[layers[keep]] = np.repeat(np.asarray(done, dtype=np.float64), self.sizes[row])[keep]
        if self.window is not None:
            for k, end in enumerate(done):
                self.window.updated(subnet, k, end)


class _WindowEdges:
    """Per stage holding windowed layers, the latest update end among subnets ``0 .. x`` (a prefix max)."""

    def __init__(self, plan: PipelinePlan, size: int) -> None:
        self.rule = SharedWindow(size)
        self.done: dict[int, list[float]] = {k: [] for k in plan.windowed_stages}

    def ready(self, subnet: int, stage: int) -> float:
        """When the version ``subnet`` reads is on ``stage`` (its windows before last applied there)."""
        version = self.rule.read_version(subnet)
        if stage not in self.done or version == 0:
            return 0.0
        return self.done[stage][self.rule.last_writer(version)]

    def updated(self, subnet: int, stage: int, end: float) -> None:
        if stage in self.done:
            prefix = self.done[stage]
            prefix.append(max(end, prefix[-1]) if prefix else end)


def micro_longest_path(plan: PipelinePlan, system: str, num_subnets: int, costs: CostModel, recompute: bool,
                       options: PolicyOptions) -> float:
    """The longest path for a micro-batched schedule, each task's seconds from the engine's
    :class:`~naspipe.sim.tables.PartTable`.

    Each subnet's parts as a graph: part ``j``'s forward on stage ``k`` after its forward on ``k - 1``
    and its message, after part ``j - 1``'s forward on ``k`` (a stage takes a subnet's parts in order)
    and after the last writes of the layers it reads there (the CSP edge, and the window's); its
    backward after its gradient arrives (the last stage: after its own forward) and after part
    ``j - 1``'s backward there (gradients are summed in part order); a weight task after its
    backward and the previous part's weight task; the update after the last part's. Other subnets'
    tasks on the same stage are left out, as the subnet-level bound leaves them out. With replicated stages the
    simulated replica runs ``m / R`` of the parts and its updates wait for the replicas' exchange too."""
    table = PartTable(plan, costs, recompute, options.micro_batches, options.split_backward, keep=1)
    exchange = ReplicaExchange(plan, costs, options.replicas, options.parts_here) if options.replicas > 1 else None
    writes = _LayerWrites(plan) if system in CAUSAL_SYSTEMS else None
    if writes is not None and plan.windowed:
        writes.window = _WindowEdges(plan, options.shared_window)
    longest, d = 0.0, plan.num_stages
    for index in range((num_subnets + BLOCK_MASK) // BLOCK):
        first = index * BLOCK
        if writes is not None:
            writes.load(table.table.arrays(index), plan, index)
        block = table.block(index)
        for row in range(min(BLOCK, num_subnets - first)):
            y = first + row
            ready = writes.ready(row, y) if writes is not None else [0.0] * d
            summed = [exchange.cost(y, k)[0] for k in range(d)] if exchange is not None else None
            done = _subnet_chain(block, row, d, (table.parts, options.parts_here), ready, options.split_backward,
                                 summed)
            longest = max(longest, *done)
            if writes is not None:
                writes.record(row, y, done)
    return longest


def _subnet_chain(c: PartBlock, row: int, d: int, counts: tuple[int, int], ready: list[float], split: bool,
                  summed: list[float] | None = None) -> list[float]:
    """When each stage's update of the block's subnet ``row`` ends, with unlimited overlap between subnets.
    ``counts``: the table's parts per task row, and the parts a stage (replica) runs; ``summed``: each stage's
    replicas' exchange before its update."""
    stride, parts = counts
    arrive = [0.0] * parts
    for k in range(d):
        base = (row * d + k) * stride
        t = ready[k]
        ends = []
        for j in range(parts):
            t = max(arrive[j], t) + c.forward[base + j]
            ends.append(t)
        arrive = [end + c.msg_s[base + j] for j, end in enumerate(ends)] if k < d - 1 else ends
    done = [0.0] * d
    for k in range(d - 1, -1, -1):
        base = (row * d + k) * stride
        t = w = 0.0
        ends = []
        for j in range(parts):
            t = max(arrive[j], t) + c.recompute[base + j] + c.backward[base + j]
            ends.append(t)
            if split:
                w = max(w, t) + c.weight[base + j]
        done[k] = (w if split else t) + (summed[k] if summed is not None else 0.0) + c.update[row * d + k]
        if k:
            before = base - stride  # stage k - 1's messages
            arrive = [end + c.msg_s[before + j] for j, end in enumerate(ends)]
    return done


def lower_bound(busiest_stage_work: float, path: float) -> float:
    return max(busiest_stage_work, path)
