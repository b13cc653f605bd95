"""Every (subnet, stage)'s task seconds and message, computed for blocks of subnets at once.

The engine's hot loop must not sum a stage's layers per task (64 stages x 100,000 subnets is
~19 M tasks). A :class:`CostBlock` holds, for ``BLOCK`` consecutive subnets and every stage,
what :func:`~naspipe.sim.costs.forward_s`, :func:`~naspipe.sim.costs.backward_s` and
:func:`~naspipe.sim.costs.update_s` return for that stage's slice of the subnet
(:class:`~naspipe.sim.layout.SubnetLayers`: with per-subnet plans each subnet cut by its own
partition), and the seconds and bytes of the activation the stage sends to the next one (the
gradient going back over the same boundary has the same size and link). A weight-stashing
model's forward includes the stash (:func:`~naspipe.sim.costs.stash_s`). With ``swapped``
layers (VPipe's :class:`~naspipe.sim.residency.SynchronousSwap`) a :class:`SwapBlock` holds
the bytes and seconds of each task's copies, which the plan fixes as it fixes the compute. It is built with
numpy but bit for bit the scalar functions' answers: a stage's layers are added one position
at a time, in execution order, as ``sum`` adds them, and every other operation is the same
IEEE operation on the same operands (a test compares every entry). Values are Python floats
in flat lists, index ``(subnet - first) * D + stage``.

:class:`CostTable` keeps the blocks the pipeline is working on (subnets in flight span a few
hundred ids at most) and rebuilds an evicted block on demand; rebuilding one it evicted
earlier widens what it keeps, so a very wide window costs memory, never repeated work.

A micro-batched schedule's tasks are parts: :class:`PartTable` cuts a block's subnet-level entries
into :class:`PartBlock` blocks (per part, with the same whole-array arithmetic, equal to the scalar
expressions entry by entry), kept and rebuilt as :class:`CostTable` keeps its blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from naspipe.config.validation import check_parts
from naspipe.scheduling.plan import PipelinePlan
from naspipe.sim.costs import CostModel

BLOCK_SHIFT = 8
BLOCK = 1 << BLOCK_SHIFT  # subnets per block
BLOCK_MASK = BLOCK - 1


@dataclass(frozen=True, slots=True)
class SwapBlock:
    """VPipe's copies per (subnet, stage), as :class:`~naspipe.sim.residency.SynchronousSwap` prices them.

    ``fetch_*``: the swapped layers' parameters, fetched before a forward or backward and
    written back after a backward (the gradient: the same bytes); ``update_in_*`` and
    ``update_out_*``: what goes in and out around the update (with optimizer state and the
    stashed gradient). Seconds are 0.0 with free copies. Every use is a miss:
    :attr:`CostBlock.uses` counts them.
    """

    fetch_bytes: list[float]
    fetch_s: list[float]
    update_in_bytes: list[float]
    update_in_s: list[float]
    update_out_bytes: list[float]
    update_out_s: list[float]


NO_SWAP = SwapBlock([], [], [], [], [], [])


@dataclass(frozen=True, slots=True)
class CostBlock:
    """Flat per-(subnet, stage) lists; ``msg_*[i]`` is the message from stage k to k + 1 (unset on the last)."""

    forward: list[float]
    recompute: list[float]  # 0.0 without recomputation
    backward: list[float]  # without the recompute
    update: list[float]
    msg_s: list[float]  # transfer seconds (0.0 with free messages)
    msg_bytes: list[float]
    uses: list[int]  # layer uses of the forward, backward and update (the update touches trainable ones)
    swap: SwapBlock = NO_SWAP  # empty without swapped layers


@dataclass(frozen=True, slots=True)
class BlockArrays:
    """One block's :class:`CostBlock` entries as ``(BLOCK, D)`` arrays, with the layer rows they came from."""

    layers: np.ndarray  # (BLOCK, positions): the layer each subnet runs at each position
    stage_of: np.ndarray | None  # per-subnet plans: the stage of each (subnet, position); None: one partition
    forward: np.ndarray
    recompute: np.ndarray
    backward: np.ndarray
    update: np.ndarray
    msg_s: np.ndarray
    msg_bytes: np.ndarray
    counts: np.ndarray  # layers per (subnet, stage)
    trainable: np.ndarray  # trainable layers per (subnet, stage)


B = TypeVar("B")


class _Blocks(Generic[B]):
    """Blocks built on demand, the last ``keep`` kept: subnets in flight span a few hundred ids at most, so a
    long run's table stays a few blocks; rebuilding one it let go widens what it keeps (never repeated work)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.blocks: dict[int, B] = {}
        self._evicted: set[int] = set()

    def block(self, index: int) -> B:
        """Subnets ``[index * BLOCK, (index + 1) * BLOCK)``; the engine looks here first: ``blocks.get``."""
        found = self.blocks.get(index)
        if found is not None:
            return found
        if index in self._evicted:
            self.keep += 1
        built = self.blocks[index] = self._build(index)
        while len(self.blocks) > self.keep:
            oldest = min(self.blocks)
            del self.blocks[oldest]
            self._evicted.add(oldest)
        return built

    def _build(self, index: int) -> B:
        raise NotImplementedError


class CostTable(_Blocks[CostBlock]):
    """Lazily built :class:`CostBlock` per ``BLOCK`` subnets of one plan, costs and recompute setting.

    ``swapped``: the layers VPipe's swap copies (trainable ones; see :class:`SwapBlock`), or None.
    """

    def __init__(self, plan: PipelinePlan, costs: CostModel, recompute: bool, keep: int = 4,
                 swapped: frozenset[int] | None = None) -> None:
        super().__init__(keep)
        structure = plan.structure
        self.plan, self.costs, self.recompute = plan, costs, recompute
        self.stages = plan.num_stages
        n = structure.num_layers
        trainable = np.array([structure.is_trainable(lid) for lid in range(n)], dtype=bool)
        self._trainable = trainable
        self._forward = np.array([c.forward_s for c in costs.layers], dtype=np.float64)
        self._recompute = np.array([c.recompute_s for c in costs.layers], dtype=np.float64)
        self._backward = np.array([c.backward_s for c in costs.layers], dtype=np.float64)
        self._update = np.where(trainable, np.array([c.update_s for c in costs.layers], dtype=np.float64), 0.0)
        hw = costs.hardware  # stash_s's per-layer term, evaluated as it does (Python floats)
        self._stash = np.array([hw.stash_overhead_s + 2 * costs.param_bytes(lid) / hw.memory_bandwidth
                                for lid in range(n)], dtype=np.float64) if costs.stash_weights else None
        self._swap_bytes = None if swapped is None else np.array(
            [costs.param_bytes(lid) if lid in swapped else 0.0 for lid in range(n)], dtype=np.float64)
        self._out_bytes = np.array([info.out_bytes for info in costs.info], dtype=np.float64)
        bounds = plan.partition.bounds
        self._stage_of_position = np.repeat(np.arange(self.stages), np.diff(np.asarray(bounds)))
        self._last_position = np.asarray(bounds[1:], dtype=np.int64) - 1  # of each stage
        self._positions = np.arange(structure.num_positions, dtype=np.int64)
        self._ones, self._trainable_ones = np.ones(n, dtype=np.int64), trainable.astype(np.int64)  # to count layers
        self._same_host = [hw.host_of(k) == hw.host_of(k + 1) for k in range(self.stages - 1)]

    def layer_matrix(self, index: int) -> np.ndarray:
        """Row ``i``: the layer subnet ``index * BLOCK + i`` runs at each position (as SubnetLayers)."""
        return self.plan.structure.layer_rows(self.plan.stream.choice_rows(index * BLOCK, BLOCK))

    def stage_of(self, index: int) -> tuple[np.ndarray | None, np.ndarray]:
        """Per-subnet plans: ``(stage of every (row, position), last position of every (row, stage))``;
        static plans: ``(None, last position of every stage)`` (one partition for all rows)."""
        if not self.plan.mirrored:
            return None, self._last_position
        first = index * BLOCK
        bounds = np.array([self.plan.partition_of(y).bounds for y in range(first, first + BLOCK)], dtype=np.int64)
        inner = bounds[:, 1:-1]  # (rows, D - 1): the first position of stages 1..D-1
        stage_of = (self._positions[None, :, None] >= inner[:, None, :]).sum(axis=2)
        return stage_of, bounds[:, 1:] - 1

    def stage_sums(self, per_layer: np.ndarray, layers: np.ndarray, stage_of: np.ndarray | None) -> np.ndarray:
        """``(rows, D)``: each stage's per-layer values added in position order, starting from 0.0 (as ``sum``)."""
        values = per_layer[layers]
        rows = layers.shape[0]
        acc = np.zeros((rows, self.stages), dtype=np.float64)
        if stage_of is None:
            for position, stage in enumerate(self._stage_of_position):
                acc[:, stage] += values[:, position]
            return acc
        every = np.arange(rows)  # each row adds one value per position, to its own stage: no repeated index
        for position in range(values.shape[1]):
            acc[every, stage_of[:, position]] += values[:, position]
        return acc

    def _build(self, index: int) -> CostBlock:
        a = self.arrays(index)
        uses: list[int] = (2 * a.counts + a.trainable).ravel().tolist()
        swap = NO_SWAP if self._swap_bytes is None else self._swap(a.layers, a.stage_of)
        return CostBlock(flat(a.forward), flat(a.recompute), flat(a.backward), flat(a.update), flat(a.msg_s),
                         flat(a.msg_bytes), uses, swap)

    def arrays(self, index: int) -> BlockArrays:
        """The block's entries as ``(BLOCK, D)`` arrays, before they become the engine's flat lists
        (for whole-block arithmetic: :func:`naspipe.sim.bound.longest_path`)."""
        costs, d = self.costs, self.stages
        layers = self.layer_matrix(index)
        rows = layers.shape[0]
        stage_of, last_position = self.stage_of(index)
        counts = self.stage_sums(self._ones, layers, stage_of).astype(np.int64)
        trainable = self.stage_sums(self._trainable_ones, layers, stage_of).astype(np.int64)
        if costs.per_task:
            ones = np.ones((rows, d))
            forward, update = ones, np.zeros((rows, d))
            recompute, backward = (ones, ones) if self.recompute else (np.zeros((rows, d)), 2.0 * ones)
        else:
            overhead = costs.hardware.task_overhead_s
            kernels = self.stage_sums(self._forward, layers, stage_of)
            if self._stash is None:
                forward = overhead + kernels
            else:  # forward_s: (overhead + stash) + kernels
                forward = (overhead + self.stage_sums(self._stash, layers, stage_of)) + kernels
            update = costs.hardware.update_overhead_s + self.stage_sums(self._update, layers, stage_of)
            backward = overhead + self.stage_sums(self._backward, layers, stage_of)
            recompute = self.stage_sums(self._recompute, layers, stage_of) if self.recompute else np.zeros((rows, d))
        msg_bytes = np.zeros((rows, d))
        msg_s = np.zeros((rows, d))
        if d > 1:
            if last_position.ndim == 1:
                boundary = layers[:, last_position[:-1]]  # (rows, D - 1): the layer before each link
            else:
                boundary = np.take_along_axis(layers, last_position[:, :-1], axis=1)
            msg_bytes[:, :-1] = self._out_bytes[boundary] * costs.batch
            if not costs.free_io:
                msg_s[:, :-1] = self._transfer(msg_bytes[:, :-1])
        return BlockArrays(layers, stage_of, forward, recompute, backward, update, msg_s, msg_bytes, counts, trainable)

    def _swap(self, layers: np.ndarray, stage_of: np.ndarray | None) -> SwapBlock:
        """SynchronousSwap's ``_bytes`` (the swapped layers' bytes added in order, times the
        copy's multiple) and ``_copy`` (``copy_s``, or 0.0 with free copies), per entry."""
        assert self._swap_bytes is not None
        costs = self.costs
        params = self.stage_sums(self._swap_bytes, layers, stage_of)
        update_in = params * (2 + costs.optimizer_states)  # parameters, optimizer state, stashed gradient
        update_out = params * (1 + costs.optimizer_states)  # new parameters and state

        def seconds(nbytes: np.ndarray) -> list[float]:
            if costs.free_io:
                return [0.0] * nbytes.size
            hw = costs.hardware
            return flat(hw.copy_overhead_s + nbytes / hw.host_device_bandwidth)

        return SwapBlock(flat(params), seconds(params), flat(update_in), seconds(update_in), flat(update_out),
                         seconds(update_out))

    def _transfer(self, nbytes: np.ndarray) -> np.ndarray:
        """:meth:`Hardware.transfer_s` per link column (axis 1), the same operations in the same order."""
        hw = self.costs.hardware
        out = np.empty_like(nbytes)
        for k, same in enumerate(self._same_host):
            if same:
                out[:, k] = hw.intra_host_latency + nbytes[:, k] / hw.intra_host_bandwidth
            else:
                out[:, k] = hw.network_latency + nbytes[:, k] / hw.network_bandwidth
        return out


INPUT_SHARE = 0.5  # of a backward's kernels, the input gradient's (the weight gradient's is the rest)


def part_fractions(batch: int, parts: int) -> list[float]:
    """Each part's share of the batch, as ``torch.tensor_split`` cuts it (the first ``batch % parts`` larger)."""
    check_parts(parts, batch, "the batch")  # one line: simulate and plan reach here with the batch they price
    small, extra = divmod(batch, parts)
    return [(small + (j < extra)) / batch for j in range(parts)]


@dataclass(frozen=True, slots=True)
class PartBlock:
    """A micro-batched schedule's :class:`CostBlock`: flat per-(subnet, stage, part) lists, index
    ``((subnet - first) * D + stage) * m + part``, but for ``update`` and ``uses``, once per (subnet, stage)
    (index ``(subnet - first) * D + stage``, as a :class:`CostBlock`'s)."""

    forward: list[float]
    recompute: list[float]  # 0.0 on the last stage (a part's backward follows its forward there at once)
    backward: list[float]  # the input gradient's share when split (the recompute not included)
    weight: list[float]  # 0.0 unsplit
    update: list[float]
    msg_s: list[float]  # the part's activation from stage k to k + 1 (0.0 on the last, and with free messages)
    msg_bytes: list[float]
    uses: list[int]  # layer uses of the subnet's tasks on the stage: m forwards, m (and m weight) backwards, the update


class PartTable(_Blocks[PartBlock]):
    """:class:`PartBlock` per ``BLOCK`` subnets: the subnet-level :class:`CostTable`'s entries cut into parts.

    What a task of part ``j`` (``f = size_j / batch`` of the batch, :func:`part_fractions`) costs: its
    forward, recompute and backward kernels are ``f`` times the subnet's (the cost models are linear in
    the batch, :func:`~naspipe.sim.costs.at_batch`), plus the hardware's per-task overhead, which a part
    pays in full (the price of many small tasks); a split backward's ``B`` holds the recompute and
    :data:`INPUT_SHARE` of the backward kernels (the input gradient: one of a dense layer's two backward
    products), ``W`` the rest plus its own overhead; the update, once per subnet and stage, costs what it
    costs unsplit; the last stage does not recompute (a part's backward follows its forward there at once,
    so its activations are kept for it; the runtime's executor does the same, and recomputation does not
    change a bit); messages carry ``f`` of the activation. Each entry is the same IEEE operations, in the
    same order, as the scalar expression in each field's comment of :meth:`_build`.
    """

    def __init__(self, plan: PipelinePlan, costs: CostModel, recompute: bool, parts: int, split: bool,
                 keep: int = 4) -> None:
        super().__init__(keep)
        self.table = CostTable(plan, costs, recompute)  # its arrays only (a part block holds what it needs)
        self.costs, self.parts, self.split, self.stages = costs, parts, split, plan.num_stages
        fractions = part_fractions(costs.batch, parts) if not costs.per_task else [1.0 / parts] * parts
        self.fractions = np.array(fractions, dtype=np.float64)
        self.overhead = 0.0 if costs.per_task else costs.hardware.task_overhead_s

    def _build(self, index: int) -> PartBlock:
        a, d, ov, fr = self.table.arrays(index), self.stages, self.overhead, self.fractions
        share = INPUT_SHARE if self.split else 1.0
        forward = a.forward - ov  # the kernels (overhead + kernels - overhead, as a float)
        backward = a.backward - ov
        recompute = a.recompute.copy()
        recompute[:, d - 1] = 0.0
        msg_bytes = a.msg_bytes[:, :, None] * fr  # nbytes * f
        msg_s = np.zeros_like(msg_bytes)
        if not self.costs.free_io and d > 1:  # Hardware.transfer_s(k, k + 1, nbytes * f) on each link
            msg_s[:, :-1, :] = self.table._transfer(msg_bytes[:, :-1, :])
        if self.split:
            weight = ov + (backward * (1.0 - share))[:, :, None] * fr  # ov + backward * (1 - share) * f
        else:
            weight = np.zeros_like(msg_bytes)
        uses = (2 + self.split) * self.parts * a.counts + a.trainable
        return PartBlock(
            forward=flat(ov + forward[:, :, None] * fr),  # ov + forward * f
            recompute=flat(recompute[:, :, None] * fr),  # recompute * f
            backward=flat(ov + (backward * share)[:, :, None] * fr),  # ov + backward * share * f
            weight=flat(weight), update=flat(a.update), msg_s=flat(msg_s), msg_bytes=flat(msg_bytes),
            uses=uses.ravel().tolist())


def flat(a: np.ndarray) -> list[float]:
    """float64 -> Python floats, row-major: index ``row * D + stage``.

    An array whose entries are bitwise alike (uniform costs: every task takes the same seconds; free
    messages: every transfer 0.0) becomes one float repeated: the same values, but the engine's reads
    (~3 per task, scattered over the block) then touch one object instead of a fresh one per entry, which
    keeps the policies' state in the CPU's cache (about 5% of the engine at 64 stages, uniform costs)."""
    values = np.ascontiguousarray(a, dtype=np.float64).ravel()
    bits = values.view(np.int64)
    if values.size and bits.min() == bits.max():
        return [values[0].item()] * values.size
    return values.tolist()
