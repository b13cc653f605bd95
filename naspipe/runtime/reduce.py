"""A layer's part gradients summed across a stage's replicas in part order, bit for bit (issue 42).

Sequential training with m parts sums a layer's part gradients as ``.grad`` accumulation does:
the first part's gradient is taken as it is, each later one is added to the running sum, in part
order: ``((g0 + g1) + g2) + ...``. With a stage replicated R times, replica ``r`` runs the
contiguous parts of :class:`~naspipe.scheduling.replicas.ReplicaLayout`. Float addition is not
associative, so the usual all-reduce of per-replica sums (``(g0 + g1) + (g2 + g3)``, or whatever
order a ring takes) gives other bits; :func:`all_reduce_sum` is here only to show it.

Two exchanges that give the sequential bits on every replica:

- :func:`chain_sum`, the ordered chain. Replica ``r`` receives the running sum of parts
  ``0 .. r*m/R - 1`` from replica ``r - 1`` (replica 0 starts from nothing), adds its own parts
  to it in order and passes it on; the last replica then holds the total and broadcasts its
  exact bytes. Cost: R - 1 sequential hops of the whole bucket, then one broadcast; each replica
  sends and receives about one bucket (a ring all-reduce sends about 2 (R-1)/R of it, in parallel).
  The hops are latency on the critical path: replica ``r`` cannot add before ``r - 1`` is done.
- :func:`gather_sum`, an all-gather of every part's gradient: each replica then sums all m in
  part order itself. No chain, one collective, but each replica receives (m - m/R) buckets and
  adds m - 1 of them: more bytes and more additions, growing with m instead of R.

Gradients are given per part as a list of tensors in one fixed order (a layer's parameters, or
several layers'): a :class:`Bucket` lays them out in one flat tensor, since the element-wise sums
of a flat tensor are the same bits as the tensors' own. A part may lack a gradient (``None``): as
in ``.grad`` accumulation, a missing term adds nothing, and a tensor that no part has stays
``None``. Each tensor's presence travels beside the values as a flag, so the first present term is
taken as it is rather than added to zero (``0.0 + -0.0`` is ``+0.0``: a zero start would change
the sign of zeros).

Replica ``r`` is rank ``r`` of the process group given (``dist.new_group`` sorts its ranks, so a
stage's replicas in ascending global rank). Any backend with point-to-point and broadcast works;
the tests and ``benchmarks/bench_reduce.py`` use gloo on CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from naspipe.scheduling.replicas import ReplicaLayout

Grads = Sequence[torch.Tensor | None]  # one part's gradients of a bucket's tensors, in the bucket's order
ProcessGroup = dist.ProcessGroup | None  # None: the default group

_PRESENT, _ABSENT = 1.0, 0.0


@dataclass(frozen=True)
class Bucket:
    """Where each gradient of a fixed list lies in one flat tensor, followed by one presence flag per tensor.

    Flat form: ``[values of tensor 0 | tensor 1 | ... | flag 0, flag 1, ...]``, all in the
    gradients' dtype (flags are exactly 0.0 or 1.0); an absent tensor's values are zeros and unused.
    """

    shapes: tuple[torch.Size, ...]
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def like(cls, tensors: Sequence[torch.Tensor]) -> Bucket:
        """The bucket of gradients shaped like ``tensors`` (the parameters they belong to), one dtype."""
        if not tensors:
            raise ValueError("a bucket needs at least one tensor")
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) != 1:
            raise ValueError(f"a bucket holds one dtype, not {sorted(str(d) for d in dtypes)}")
        return cls(tuple(t.shape for t in tensors), tensors[0].dtype, tensors[0].device)

    @property
    def numel(self) -> int:
        """How many values (flags not counted)."""
        return sum(s.numel() for s in self.shapes)

    def empty(self) -> torch.Tensor:
        """A flat tensor with every tensor absent: the sum of no parts."""
        return torch.zeros(self.numel + len(self.shapes), dtype=self.dtype, device=self.device)

    def pack(self, grads: Grads) -> torch.Tensor:
        """One part's gradients in flat form."""
        flat = self.empty()
        self.accumulate(flat, grads)
        return flat

    def unpack(self, flat: torch.Tensor) -> list[torch.Tensor | None]:
        """The tensors of a flat sum (views of ``flat``); None where no part had a gradient."""
        flags = flat[self.numel:]
        out: list[torch.Tensor | None] = []
        for i, (start, shape) in enumerate(self._segments()):
            out.append(flat[start:start + shape.numel()].view(shape) if flags[i].item() == _PRESENT else None)
        return out

    def accumulate(self, flat: torch.Tensor, grads: Grads) -> None:
        """Add one part's gradients to the running sum ``flat`` in place, as ``.grad`` accumulation does."""
        if len(grads) != len(self.shapes):
            raise ValueError(f"a part has {len(grads)} gradients, the bucket {len(self.shapes)}")
        flags = flat[self.numel:]
        for i, ((start, shape), grad) in enumerate(zip(self._segments(), grads, strict=True)):
            if grad is None:
                continue
            if grad.shape != shape:
                raise ValueError(f"gradient {i} has shape {tuple(grad.shape)}, the bucket {tuple(shape)}")
            segment = flat[start:start + shape.numel()]
            if flags[i].item() == _PRESENT:
                segment.add_(grad.reshape(-1))
            else:
                segment.copy_(grad.reshape(-1))
                flags[i] = _PRESENT

    def add_flat(self, flat: torch.Tensor, other: torch.Tensor) -> None:
        """Add a flat part (or partial sum) ``other`` to ``flat`` in place: one add when both hold every tensor."""
        n = self.numel
        if bool((flat[n:] == _PRESENT).all()) and bool((other[n:] == _PRESENT).all()):
            flat[:n].add_(other[:n])
        else:
            self.accumulate(flat, self.unpack(other))

    def _segments(self) -> list[tuple[int, torch.Size]]:
        starts, offset = [], 0
        for shape in self.shapes:
            starts.append((offset, shape))
            offset += shape.numel()
        return starts


def part_order_sum(bucket: Bucket, parts: Sequence[Grads]) -> list[torch.Tensor | None]:
    """The reference on one process: every part's gradients summed in part order (sequential's bits)."""
    flat = bucket.empty()
    for grads in parts:
        bucket.accumulate(flat, grads)
    return [None if t is None else t.clone() for t in bucket.unpack(flat)]


def chain_sum(bucket: Bucket, parts: Sequence[Grads], layout: ReplicaLayout,
              group: ProcessGroup = None) -> list[torch.Tensor | None]:
    """The sum of every replica's parts in part order, on every replica: the ordered chain, then a broadcast.

    ``parts`` are this replica's parts' gradients, in part order (``layout.parts(replica)``).
    """
    replica = _check(layout, parts, group)
    flat = bucket.empty()
    before, after = layout.previous(replica), layout.next(replica)
    if before is not None:
        dist.recv(flat, group=group, group_src=before)
    for grads in parts:
        bucket.accumulate(flat, grads)
    if after is not None:
        dist.send(flat, group=group, group_dst=after)
    if layout.replicas > 1:
        dist.broadcast(flat, group=group, group_src=layout.last)
    return bucket.unpack(flat)


def gather_sum(bucket: Bucket, parts: Sequence[Grads], layout: ReplicaLayout,
               group: ProcessGroup = None) -> list[torch.Tensor | None]:
    """The same bits by an all-gather of every part's gradients, each replica summing all m in part order."""
    _check(layout, parts, group)
    mine = torch.stack([bucket.pack(grads) for grads in parts])
    everyone = [torch.empty_like(mine) for _ in range(layout.replicas)]
    dist.all_gather(everyone, mine, group=group)
    flat = bucket.empty()
    for block in everyone:  # replica order is part order (contiguous ranges)
        for row in block:
            bucket.add_flat(flat, row)
    return bucket.unpack(flat)


def all_reduce_sum(bucket: Bucket, parts: Sequence[Grads], layout: ReplicaLayout,
                   group: ProcessGroup = None) -> list[torch.Tensor | None]:
    """The usual data-parallel exchange, for comparison only: each replica's parts summed locally, then an
    all-reduce of those sums. Not sequential's association: the bits differ whenever rounding does."""
    _check(layout, parts, group)
    flat = bucket.empty()
    for grads in parts:
        bucket.accumulate(flat, grads)
    dist.all_reduce(flat[:bucket.numel], op=dist.ReduceOp.SUM, group=group)
    dist.all_reduce(flat[bucket.numel:], op=dist.ReduceOp.MAX, group=group)
    return bucket.unpack(flat)


def _check(layout: ReplicaLayout, parts: Sequence[Grads], group: ProcessGroup) -> int:
    """This process's replica index, after checking the group and the parts against ``layout``."""
    size, replica = dist.get_world_size(group), dist.get_rank(group)
    if size != layout.replicas:
        raise ValueError(f"the group has {size} processes, the layout {layout.replicas} replicas")
    if len(parts) != layout.parts_per_replica:
        raise ValueError(f"replica {replica} was given {len(parts)} parts, the layout gives it "
                         f"{layout.parts_per_replica}")
    return replica
