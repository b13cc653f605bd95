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
  to it in order and passes it on; the last replica then holds the total and sends its exact
  bytes to the others. Whole (``chunks=1``): R - 1 sequential hops of the whole bucket, then a
  broadcast; the hops are latency on the critical path (replica ``r`` cannot add before ``r - 1``
  is done). Pipelined (``chunks=C``): the bucket moves in C slices, so replica ``r`` adds and
  forwards slice ``c`` while slice ``c + 1`` is on its way, and the total goes back round the
  ring (last -> 0 -> 1 -> ... -> R-2) the same way. Each phase takes about ``1 + (R-2)/C``
  bucket transfers, and each process sends the bucket at most twice: a ring all-reduce sends
  ``2 (R-1)/R`` of it per process, so for large C the ordered sum costs little more in bandwidth
  (what it adds is the per-slice additions and messages).
- :func:`gather_sum`, an all-gather of every part's gradient: each replica then sums all m in
  part order itself. No chain, one collective, but each replica receives (m - m/R) buckets and
  adds m - 1 of them: bytes and additions grow with m instead of R.

Gradients are given per part as a list of tensors in one fixed order (a layer's parameters, or
several layers'): a :class:`Bucket` lays them out in one flat tensor, since the element-wise sums
of a flat tensor are the same bits as the tensors' own, slice by slice. A part may lack a
gradient (``None``): as in ``.grad`` accumulation, a missing term adds nothing, and a tensor that
no part has stays ``None``. Each tensor's presence travels ahead of the values as a flag, so the
first present term is copied rather than added to zero (``0.0 + -0.0`` is ``+0.0``: a zero start
would change the sign of zeros).

Replica ``r`` is rank ``r`` of the process group given (``dist.new_group`` sorts its ranks, so a
stage's replicas in ascending global rank). Any backend with point-to-point and broadcast works;
the tests and ``benchmarks/bench_reduce.py`` use gloo on CPU. A peer that fails or stalls makes
the others raise after the group's timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from naspipe.scheduling.replicas import ReplicaLayout

Grads = Sequence[torch.Tensor | None]  # one part's gradients of a bucket's tensors, in the bucket's order
ProcessGroup = dist.ProcessGroup | None  # None: the default group
Steps = list[tuple[int, bool]]  # one part's (tensor index, copy) actions: copy the first term, add the rest
Span = tuple[int, int]  # a slice [start, stop) of a flat tensor

_PRESENT = 1.0


@dataclass(frozen=True)
class Bucket:
    """Where each gradient of a fixed list lies in one flat tensor, after one presence flag per tensor.

    Flat form: ``[flag 0, flag 1, ... | values of tensor 0 | tensor 1 | ...]``, all in the
    gradients' dtype (flags are exactly 0.0 or 1.0); an absent tensor's values are zeros and unused.
    The flags come first so that a pipelined chain knows, before any value arrives, which terms
    start a sum.
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
    def flags(self) -> int:
        """How many flags (one per tensor) precede the values."""
        return len(self.shapes)

    @property
    def size(self) -> int:
        """The flat form's length: flags and values."""
        return self.flags + sum(s.numel() for s in self.shapes)

    def empty(self) -> torch.Tensor:
        """A flat tensor with every tensor absent: the sum of no parts."""
        return torch.zeros(self.size, dtype=self.dtype, device=self.device)

    def pack(self, grads: Grads) -> torch.Tensor:
        """One part's gradients in flat form."""
        flat = self.empty()
        self.accumulate(flat, grads)
        return flat

    def unpack(self, flat: torch.Tensor) -> list[torch.Tensor | None]:
        """The tensors of a flat sum (views of ``flat``); None where no part had a gradient."""
        present = flat[: self.flags].tolist()
        return [flat[start:start + shape.numel()].view(shape) if present[i] == _PRESENT else None
                for i, (start, shape) in enumerate(self._segments())]

    def accumulate(self, flat: torch.Tensor, grads: Grads) -> None:
        """Add one part's gradients to the running sum ``flat`` in place, as ``.grad`` accumulation does."""
        self.apply(flat, self.plan(flat, grads), grads, (self.flags, self.size))

    def plan(self, flat: torch.Tensor, grads: Grads) -> Steps:
        """Which of ``grads`` to copy (the first term of its tensor) or add; marks them present in ``flat``.

        Needs only the flags, so a pipelined chain plans its parts before their values' slices arrive.
        """
        if len(grads) != len(self.shapes):
            raise ValueError(f"a part has {len(grads)} gradients, the bucket {len(self.shapes)}")
        present = flat[: self.flags].tolist()
        steps = []
        for i, (grad, shape) in enumerate(zip(grads, self.shapes, strict=True)):
            if grad is None:
                continue
            if grad.shape != shape:
                raise ValueError(f"gradient {i} has shape {tuple(grad.shape)}, the bucket {tuple(shape)}")
            steps.append((i, present[i] != _PRESENT))
            present[i] = _PRESENT
        flat[: self.flags] = torch.tensor(present, dtype=flat.dtype, device=flat.device)
        return steps

    def apply(self, flat: torch.Tensor, steps: Steps, grads: Grads, span: Span) -> None:
        """Carry out one part's ``steps`` on the values inside ``span`` of ``flat`` only (one slice of a chain)."""
        segments = self._segments()
        for i, copy in steps:
            start, shape = segments[i]
            lo, hi = max(span[0], start), min(span[1], start + shape.numel())
            if lo >= hi:
                continue
            grad = grads[i]
            assert grad is not None  # planned steps name present gradients only
            source = grad.reshape(-1)[lo - start:hi - start]
            if copy:
                flat[lo:hi].copy_(source)
            else:
                flat[lo:hi].add_(source)

    def add_flat(self, flat: torch.Tensor, other: torch.Tensor) -> None:
        """Add a flat part ``other`` to ``flat`` in place: one add when both hold every tensor."""
        if bool((flat[: self.flags] == _PRESENT).all()) and bool((other[: self.flags] == _PRESENT).all()):
            flat[self.flags:].add_(other[self.flags:])
        else:
            self.accumulate(flat, self.unpack(other))

    def spans(self, chunks: int) -> list[Span]:
        """The flags, then the values in ``chunks`` near-equal slices: what a pipelined chain sends, in order."""
        values = self.size - self.flags
        cuts = [self.flags + values * c // chunks for c in range(chunks + 1)]
        return [(0, self.flags), *((a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a)]

    def _segments(self) -> list[tuple[int, torch.Size]]:
        found, offset = [], self.flags
        for shape in self.shapes:
            found.append((offset, shape))
            offset += shape.numel()
        return found


def part_order_sum(bucket: Bucket, parts: Sequence[Grads]) -> list[torch.Tensor | None]:
    """The reference on one process: every part's gradients summed in part order (sequential's bits)."""
    flat = bucket.empty()
    for grads in parts:
        bucket.accumulate(flat, grads)
    return bucket.unpack(flat)


def chain_sum(bucket: Bucket, parts: Sequence[Grads], layout: ReplicaLayout, group: ProcessGroup = None,
              chunks: int = 1) -> list[torch.Tensor | None]:
    """The sum of every replica's parts in part order, on every replica: the ordered chain, then the total
    sent from the last replica to the others (a broadcast, or with ``chunks`` > 1 a pipelined ring).

    ``parts`` are this replica's parts' gradients, in part order (``layout.parts(replica)``).
    """
    replica = _check(layout, parts, group)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be a positive integer, not {chunks!r}")
    flat = bucket.empty()
    if chunks == 1:
        _whole_chain(bucket, flat, parts, layout, replica, group)
    else:
        _pipelined_chain(bucket, flat, parts, layout, replica, group, chunks)
    return bucket.unpack(flat)


def _whole_chain(bucket: Bucket, flat: torch.Tensor, parts: Sequence[Grads], layout: ReplicaLayout,
                 replica: int, group: ProcessGroup) -> None:
    before, after = layout.previous(replica), layout.next(replica)
    if before is not None:
        dist.recv(flat, group=group, group_src=before)
    for grads in parts:
        bucket.accumulate(flat, grads)
    if after is not None:
        dist.send(flat, group=group, group_dst=after)
    if layout.replicas > 1:
        dist.broadcast(flat, group=group, group_src=layout.last)


def _pipelined_chain(bucket: Bucket, flat: torch.Tensor, parts: Sequence[Grads], layout: ReplicaLayout,
                     replica: int, group: ProcessGroup, chunks: int) -> None:
    """The chain slice by slice (flags first), then the total round the ring last -> 0 -> ... -> R-2."""
    steps: list[Steps] = []

    def add_own(span: Span) -> None:
        if span[0] == 0:  # the flags: plan every own part before any value arrives
            steps.extend(bucket.plan(flat, grads) for grads in parts)
            return
        for grads, todo in zip(parts, steps, strict=True):
            bucket.apply(flat, todo, grads, span)

    spans = bucket.spans(chunks)
    _relay(flat, spans, layout.previous(replica), layout.next(replica), group, 0, add_own)
    if layout.replicas > 1:
        source = layout.last if replica == 0 else (None if replica == layout.last else replica - 1)
        target = 0 if replica == layout.last else (replica + 1 if replica + 1 < layout.last else None)
        _relay(flat, spans, source, target, group, len(spans), None)


def _relay(flat: torch.Tensor, spans: list[Span], source: int | None, target: int | None, group: ProcessGroup,
           tag: int, work: Callable[[Span], None] | None) -> None:
    """Receive ``flat``'s spans from ``source`` (posted at once), run ``work`` on each as it lands, and
    send it on to ``target``: slice ``c`` travels while slice ``c + 1`` is received or summed."""
    receives = [] if source is None else [
        dist.irecv(flat[a:b], group=group, group_src=source, tag=tag + c) for c, (a, b) in enumerate(spans)]
    sends = []
    for c, span in enumerate(spans):
        if receives:
            _wait(receives[c])
        if work is not None:
            work(span)
        if target is not None:
            sends.append(dist.isend(flat[span[0]:span[1]], group=group, group_dst=target, tag=tag + c))
    for send in sends:
        _wait(send)


def _wait(work: dist.Work | None) -> None:
    if work is None:
        raise RuntimeError("this process is not in the replicas' group")
    work.wait()


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
    dist.all_reduce(flat[: bucket.flags], op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(flat[bucket.flags:], op=dist.ReduceOp.SUM, group=group)
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
