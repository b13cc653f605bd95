"""A replicated stage's part of the replicas' ordered sum of a subnet's gradients, by messages (issue 42).

With R replicas per stage, replica ``r`` runs the contiguous parts
:meth:`~naspipe.scheduling.replicas.ReplicaLayout.parts` of every subnet, and the subnet's update must apply the
sum of all m parts' gradients in part order, ``((g0 + g1) + g2) + ...``, the bits sequential training computes
(float addition is not associative, so an all-reduce of per-replica sums would give other bits). The sum runs
as the ordered chain of :mod:`naspipe.runtime.reduce`, but as messages between stage workers instead of a
blocking collective: replicas take their subnets' updates in different orders and interleave them with other
subnets' tasks, so a collective per subnet would have every replica wait for the slowest at each update, or
deadlock when two wait on different subnets.

Per subnet, on one stage:

- replica 0 sums its parts in ``.grad`` as every stage without replicas does, and once its last part is in sends
  that partial sum (``G``) to replica 1;
- replica ``r > 0`` takes each of its parts' gradients out of ``.grad`` as they land; once its parts are all in
  and replica ``r - 1``'s partial sum has arrived, it adds its parts to that sum one by one, in order, and
  passes the result on; the last replica's result is the total, which it sends (``T``) to every other;
- at the update (:meth:`GradientExchange.apply`) every replica puts the total's exact bytes in ``.grad``, so the
  replicas take the same step and keep identical parameters and optimizer state.

Batch norms' running statistics move once per part, in part order (:class:`~naspipe.space.ops.common.BatchNorm`):
a sequential fold, not a sum, and they change nothing a training forward computes. So replica ``r > 0`` defers its
parts' steps (it keeps each part's input to the norm), and the statistics travel down the chain with the
gradients: each replica replays its parts' steps on the statistics it received, and the total carries the final
ones, which every replica takes at the update.

A subnet is *reduced* on a replica once the total is there: the worker tells the policy
(:meth:`MicroCSP.reduced <naspipe.scheduling.policies.micro.MicroCSP.reduced>`), whose update waits for it. On
the last stage the parts' scaled losses travel with the gradients and are summed the same way, so the loss the
run logs is sequential's bits too. A missing gradient (``None``) adds nothing, as in ``.grad`` accumulation.
What the exchange costs: each replica sends a subnet's stage gradients once (the last sends them R - 1 times),
against ``2 (R - 1) / R`` of them for a ring all-reduce; the chain's R - 1 hops are on the update's critical path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import torch

from naspipe.runtime.stash import GradientSums, ParamGrads, add_grads
from naspipe.runtime.wire import Message
from naspipe.scheduling.replicas import ReplicaLayout
from naspipe.space.ops.common import BatchNorm

PARTIAL, TOTAL = "G", "T"  # the message kinds: a partial sum up the chain, the total from the last replica
Params = Callable[[int], list[torch.Tensor]]  # a subnet's trainable parameters on this stage, in a fixed order
Norms = Callable[[int], list[BatchNorm]]  # the batch norms of a subnet's trainable layers here, in a fixed order
Windowed = Callable[[int], list[tuple[int, int]]]  # a subnet's windowed shared layers here: (layer, tensors), in order
SendReplica = Callable[[int, Message], None]


@dataclass
class _Sum:
    """One subnet's state here: own parts (replica > 0: their gradients, kept apart), the prefix, the total."""

    parts: list[ParamGrads] = field(default_factory=list)  # each part's: parameters', then windowed layers'
    losses: list[torch.Tensor] = field(default_factory=list)
    done: bool = False  # every own part's gradients are in
    prefix: tuple[torch.Tensor | None, ...] | None = None  # replica r - 1's partial sum (and loss)
    total: tuple[torch.Tensor | None, ...] | None = None


class GradientExchange:
    """One stage replica's side of the ordered sum (module docstring). ``params`` gives a subnet's trainable
    parameters here; ``send`` reaches another replica of the stage; ``with_loss``: the last stage."""

    def __init__(self, layout: ReplicaLayout, replica: int, params: Params, norms: Norms, send: SendReplica,
                 with_loss: bool, cast: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
                 windowed: Windowed = lambda subnet: [], window_sums: GradientSums | None = None) -> None:
        self.layout, self.replica, self.params, self.send, self.with_loss = layout, replica, params, send, with_loss
        self.norms, self.cast = norms, cast
        # windowed shared layers: their part gradients wait in the executor's window sums (not in ``.grad``)
        self.windowed, self.window_sums = windowed, window_sums if window_sums is not None else GradientSums()
        self.first = replica == 0
        self.last = replica == layout.last
        self._sums: dict[int, _Sum] = {}
        self._reduced: list[int] = []  # reduced since the worker last asked (take_reduced)
        self._losses: dict[int, float] = {}  # the last stage: each reduced subnet's loss, until logged
        self.sent_bytes = 0

    # -- what the stage's tasks hand over ------------------------------------
    def part_loss(self, subnet: int, loss: torch.Tensor) -> None:
        """An own part's scaled loss (the last stage's forward), in part order."""
        self._sums.setdefault(subnet, _Sum()).losses.append(loss)

    def part_summed(self, subnet: int, last_own: bool) -> None:
        """An own part's weight gradients are in ``.grad`` (part order); ``last_own``: the replica's last part."""
        entry = self._sums.setdefault(subnet, _Sum())
        if not self.first:  # kept apart: they are added onto the prefix, which has not arrived yet
            params = self.params(subnet)
            entry.parts.append([p.grad for p in params] + self._window_grads(subnet, self.window_sums.pop(subnet)))
            for p in params:
                p.grad = None
        if last_own:
            entry.done = True
            self._advance(subnet, entry)

    def arrived(self, message: Message) -> None:
        """Replica ``r - 1``'s partial sum, or the total from the last replica."""
        entry = self._sums.setdefault(message.subnet, _Sum())
        if message.kind == PARTIAL:
            entry.prefix = message.tensors
            self._advance(message.subnet, entry)
        else:
            self._reduce(message.subnet, entry, message.tensors)

    # -- what the worker reads -----------------------------------------------
    def take_reduced(self) -> list[int]:
        """The subnets whose total arrived since the last call (their updates may run)."""
        reduced, self._reduced = self._reduced, []
        return reduced

    def take_loss(self, subnet: int) -> float:
        """(the last stage) A reduced subnet's loss: every part's scaled loss summed in part order."""
        return self._losses.pop(subnet)

    def apply(self, subnet: int) -> None:
        """The update: the total's bytes in ``.grad`` of the subnet's trainable parameters here."""
        entry = self._sums.pop(subnet)
        assert entry.total is not None, f"subnet {subnet}: its update ran before the replicas' sum arrived"
        params, norms, windowed = self.params(subnet), self.norms(subnet), self.windowed(subnet)
        n, w = len(params), sum(count for _, count in windowed)
        grads, statistics = entry.total[:n], entry.total[n + w:n + w + 3 * len(norms)]
        for param, grad in zip(params, grads, strict=True):
            param.grad = grad
        if windowed:  # the window's sum takes the replicas' total at the update (SharedWindows.accumulate)
            sums, at = {}, n
            for layer, count in windowed:
                sums[layer] = list(entry.total[at:at + count])
                at += count
            self.window_sums.put(subnet, sums)
        mine = [t for norm in norms for t in norm.statistics()]
        with torch.no_grad():
            for buffer, value in zip(mine, statistics, strict=True):
                assert value is not None
                buffer.copy_(value)

    # -- the chain ------------------------------------------------------------
    def _advance(self, subnet: int, entry: _Sum) -> None:
        """Own parts and prefix both in: add the parts onto the prefix in order and pass it on (or end the chain)."""
        if not entry.done or (not self.first and entry.prefix is None):
            return
        grads, statistics, before = self._own(subnet) if self.first else self._continued(subnet, entry)
        tensors = (*grads, *statistics, *((_loss_sum(before, entry.losses),) if self.with_loss else ()))
        entry.losses = []
        if not self.last:
            self._send(self.replica + 1, Message(PARTIAL, subnet, tensors))
            return
        for other in range(self.layout.replicas - 1):
            self._send(other, Message(TOTAL, subnet, tensors))
        self._reduce(subnet, entry, tensors)

    def _own(self, subnet: int) -> tuple[ParamGrads, list[torch.Tensor], None]:
        """Replica 0's partial sum: its parts' gradients as summed in ``.grad`` (and the window sums), its norms'
        statistics after its parts' steps; no loss before its own."""
        grads: ParamGrads = [p.grad for p in self.params(subnet)]
        grads += self._window_grads(subnet, self.window_sums.get(subnet))
        return grads, [t for norm in self.norms(subnet) for t in norm.statistics()], None

    def _continued(self, subnet: int, entry: _Sum) -> tuple[ParamGrads, list[torch.Tensor], torch.Tensor | None]:
        """Replica ``r > 0``: the prefix with this replica's parts added in order, the norms' deferred steps replayed
        on the prefix's statistics, and the prefix's loss (the parts' own are added by the caller)."""
        assert entry.prefix is not None
        grads = list(entry.prefix)
        before = grads.pop() if self.with_loss else None
        norms = self.norms(subnet)
        cut = len(grads) - 3 * len(norms)
        statistics = [t for t in grads[cut:] if t is not None]
        del grads[cut:]
        for part in entry.parts:
            grads = add_grads(grads, part)
        with self.cast():  # the running statistics' steps of the own parts, on those of the parts before them
            for i, norm in enumerate(norms):
                norm.replay(subnet, statistics[3 * i:3 * i + 3])
        entry.parts, entry.prefix = [], None
        return grads, statistics, before

    def _window_grads(self, subnet: int, sums: dict[int, ParamGrads]) -> ParamGrads:
        """The windowed layers' gradients of ``sums`` (one part's, or replica 0's parts' sum), flat, in order."""
        flat: ParamGrads = []
        for layer, count in self.windowed(subnet):
            grads = sums.get(layer)
            flat += grads if grads is not None else [None] * count
        return flat

    def _reduce(self, subnet: int, entry: _Sum, total: tuple[torch.Tensor | None, ...]) -> None:
        entry.total = total
        if self.with_loss:
            loss = total[-1]
            assert loss is not None
            self._losses[subnet] = float(loss.item())
        self._reduced.append(subnet)

    def _send(self, replica: int, message: Message) -> None:
        self.sent_bytes += sum(t.numel() * t.element_size() for t in message.tensors if t is not None)
        self.send(replica, message)


def _loss_sum(before: torch.Tensor | None, losses: list[torch.Tensor]) -> torch.Tensor:
    """``before`` plus the parts' losses, added one by one in part order (the sequential association)."""
    total = before
    for loss in losses:
        total = loss if total is None else total + loss
    assert total is not None, "the last stage's parts left no loss"
    return total
