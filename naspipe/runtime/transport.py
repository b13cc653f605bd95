"""Point-to-point messages between neighbouring stages.

Activations flow down (stage k -> k+1) and gradients flow up (k+1 -> k). Each direction has
its own process group, so sends and receives between the same two ranks never queue behind
each other on one communicator (with nccl that would deadlock: both ranks' receives would
wait for sends stuck behind them on the same stream). One receiver thread per neighbour
blocks on that neighbour and puts whole messages on a queue, so the stage's main loop can
take whichever arrives first. A message is a length (one int64) then the packed bytes.
"""

from __future__ import annotations

import queue
import threading
import time
from abc import ABC, abstractmethod
from datetime import timedelta

import torch
import torch.distributed as dist

from naspipe.runtime.wire import Message, pack, unpack
from naspipe.scheduling.replicas import ProcessGrid


class PeerFailure(RuntimeError):
    """A neighbouring stage went away (crashed or timed out); the run cannot go on."""


class Transport(ABC):
    @abstractmethod
    def send(self, dst: int, message: Message) -> None:
        """To stage ``dst`` (a neighbour) of this process's replica."""

    def send_replica(self, dst: int, message: Message) -> None:
        """To replica ``dst`` of this process's stage (replicated stages only)."""
        raise RuntimeError(f"this transport has no replicas to send to (replica {dst})")

    @abstractmethod
    def receive(self, timeout: float | None) -> Message | None:
        """The next message, or None when ``timeout`` seconds pass without one (0: poll)."""

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        pass


class LocalTransport(Transport):
    """A single stage has no neighbours: nothing is ever sent or received.

    ``receive`` still honours its timeout (it waits, then reports nothing), so a caller that
    reports "no message for N s" has really waited N s; with no timeout it would wait forever,
    which is an error for a stage that can never receive anything.
    """

    def send(self, dst: int, message: Message) -> None:
        raise RuntimeError(f"a single-stage run has no stage {dst} to send to")

    def receive(self, timeout: float | None) -> Message | None:
        if timeout is None:
            raise RuntimeError("a single-stage run has no neighbour: waiting for a message would never end")
        if timeout > 0:
            time.sleep(timeout)
        return None


class DistTransport(Transport):
    """Messages over torch.distributed, as bytes on ``wire`` (the compute ``device`` by default).

    With nccl the bytes travel on the GPU. Stages that share a GPU cannot use nccl (it refuses
    two ranks on one device), so they talk over gloo with ``wire`` = CPU: a message is packed
    in host memory and its tensors are copied to ``device`` on arrival (exact bytes both ways).

    With replicated stages (``grid``, :class:`~naspipe.scheduling.replicas.ProcessGrid`) each replica is a
    pipeline of its own: :meth:`send` names a stage of this process's replica. :meth:`send_replica` reaches
    another replica of this stage, on two more groups: partial sums go up the chain (replica r -> r + 1) and the
    total from the last replica to each other one; a process listens on each link that can reach it.
    """

    def __init__(self, grid: ProcessGrid, rank: int, device: torch.device, timeout_s: float,
                 wire: torch.device | None = None) -> None:
        self.grid, self.rank, self.device = grid, rank, device
        self.stage, self.replica = grid.place(rank)
        self.wire = device if wire is None else wire
        self._timeout = timedelta(seconds=timeout_s)
        self._down = dist.new_group(timeout=self._timeout)  # activations: k -> k+1
        self._up = dist.new_group(timeout=self._timeout)  # gradients: k+1 -> k
        replicated = grid.replicas > 1  # (every rank decides alike: new_group is collective)
        self._chain = dist.new_group(timeout=self._timeout) if replicated else None  # partial sums: r -> r+1
        self._total = dist.new_group(timeout=self._timeout) if replicated else None  # the total: last -> others
        self._inbox: queue.Queue[Message | BaseException] = queue.Queue()
        self._threads = []
        if self.stage > 0:
            self._threads.append(self._listen(rank - 1, self._down))
        if self.stage < grid.stages - 1:
            self._threads.append(self._listen(rank + 1, self._up))
        if self._chain is not None and self.replica > 0:
            self._threads.append(self._listen(grid.rank(self.stage, self.replica - 1), self._chain))
        if self._total is not None and self.replica < grid.replicas - 1:
            self._threads.append(self._listen(grid.rank(self.stage, grid.replicas - 1), self._total))

    def _group_to(self, dst: int) -> dist.ProcessGroup:
        if dst == self.stage + 1:
            return self._down
        if dst == self.stage - 1:
            return self._up
        raise ValueError(f"stage {self.stage} can only talk to its neighbours, not {dst}")

    def send(self, dst: int, message: Message) -> None:
        self._send(self.grid.rank(dst, self.replica), self._group_to(dst), message)

    def send_replica(self, dst: int, message: Message) -> None:
        """To replica ``dst`` of this stage: the next one in the chain, or (from the last) any other."""
        last = self.grid.replicas - 1
        if self._chain is not None and dst == self.replica + 1:
            group = self._chain
        elif self._total is not None and self.replica == last and dst != last:
            group = self._total
        else:
            raise ValueError(f"replica {self.replica} of stage {self.stage} has no link to replica {dst}")
        self._send(self.grid.rank(self.stage, dst), group, message)

    def _send(self, rank: int, group: dist.ProcessGroup, message: Message) -> None:
        payload = pack(message, self.wire)
        dist.send(torch.tensor([payload.numel()], dtype=torch.int64, device=self.wire), rank, group=group)
        dist.send(payload, rank, group=group)

    def receive(self, timeout: float | None) -> Message | None:
        try:
            item = self._inbox.get(block=timeout != 0, timeout=timeout or None)
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            where = f"stage {self.stage}" + (f" replica {self.replica}" if self.grid.replicas > 1 else "")
            raise PeerFailure(f"{where}: lost a neighbour: {item}") from item
        return item

    def _listen(self, src: int, group: dist.ProcessGroup) -> threading.Thread:
        thread = threading.Thread(target=self._receive_loop, args=(src, group), name=f"recv-{src}", daemon=True)
        thread.start()
        return thread

    def _receive_loop(self, src: int, group: dist.ProcessGroup) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        try:
            while True:
                size = torch.empty(1, dtype=torch.int64, device=self.wire)
                dist.recv(size, src, group=group)
                payload = torch.empty(int(size.item()), dtype=torch.uint8, device=self.wire)
                dist.recv(payload, src, group=group)
                message = self._on_device(unpack(payload))
                self._inbox.put(message)
                if message.kind == "END":
                    return
        except BaseException as exc:  # noqa: BLE001 - forwarded to the main loop
            self._inbox.put(exc)

    def _on_device(self, message: Message) -> Message:
        if self.wire == self.device:
            return message
        tensors = tuple(None if t is None else t.to(self.device) for t in message.tensors)
        return Message(message.kind, message.subnet, tensors, message.micro)

    def close(self) -> None:
        for thread in self._threads:
            thread.join(timeout=self._timeout.total_seconds())
