"""One stage task of any schedule, run end to end: its layers made resident, its arithmetic, its trace spans,
its messages, the loss and the access log.

Every policy hands out tasks of one model: ``F``, ``B``, ``W`` (a split backward's weight gradients) and
``U`` of part ``j`` of a subnet's ``m`` parts; the paper's schedule hands out subnet-level tasks
(:class:`~naspipe.scheduling.task.Task`), each of which is part 0 of 1 here. So the paper's schedule,
the baselines and the micro-batched schedules run the same steps, in one place:

- the layers: :class:`~naspipe.runtime.residency.Residency` (the context manager, VPipe's swapping);
- the arithmetic: :class:`~naspipe.runtime.executor.StageExecutor`;
- messages: a forward sends its part's activations on (``F`` with the part), a backward its part's
  input gradients back (``B``); a message of part 0 is packed exactly as a subnet-level one;
- the trace: spans ``F5``, ``R5`` (recompute), ``B5``, ``U5`` at the subnet level, ``F5.1``, ``R5.1``,
  ``B5.1``, ``W5.1`` (a weight task, counted as backward) and ``U5`` for parts;
- the loss: the last stage sums the parts' scaled losses in part order and logs the subnet's at its
  last part's forward (m = 1: its one loss, as is);
- the access log: one ``F`` per subnet and layer (its part 0's forward) and one ``B`` (its last part's
  weight gradients), so access orders read the same for every m.

The worker (:mod:`naspipe.runtime.worker`) decides nothing here: it receives messages into
:meth:`StageTasks.arrived`, asks the policy for a task, hands it to :meth:`StageTasks.run` and
tells the policy it is done.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from naspipe.runplan.job import Job
from naspipe.runtime.exchange import GradientExchange
from naspipe.runtime.executor import Grads, StageExecutor
from naspipe.runtime.micro import part_label, part_of
from naspipe.runtime.recorder import Recorder
from naspipe.runtime.residency import Residency
from naspipe.runtime.wire import Message
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, WEIGHT, AnyTask
from naspipe.space.base import State

Send = Callable[[int, Message], None]


class StageTasks:
    """A stage's tasks, run with its executor, residency, recorder and a ``send`` to a neighbour."""

    def __init__(self, job: Job, stage: int, device: torch.device, executor: StageExecutor, residency: Residency,
                 recorder: Recorder, send: Send, progress: Callable[[int, float], None] | None = None,
                 exchange: GradientExchange | None = None, first_part: int = 0) -> None:
        self.plan, self.stage, self.device = job.plan, stage, device
        self.executor, self.residency, self.recorder = executor, residency, recorder
        self.send, self.progress = send, progress
        self.is_last, self.parts = executor.is_last, executor.batches.uses
        # replicated stages: this replica runs parts first_part .. first_part + parts - 1 of each subnet (the policy
        # and the messages count them from 0), and the replicas sum their gradients and losses through ``exchange``
        self.exchange, self.first_part = exchange, first_part
        self._inbox: dict[tuple[str, int, int], tuple[torch.Tensor | None, ...]] = {}  # (kind, subnet, part)
        self._losses: dict[int, torch.Tensor] = {}  # last stage: the parts' scaled losses so far, summed

    def arrived(self, message: Message) -> None:
        """A neighbour's activations (``F``) or gradients (``B``) of a part, kept for the task that takes them."""
        self._inbox[(message.kind, message.subnet, message.micro)] = message.tensors

    def run(self, task: AnyTask) -> None:
        kind, y = task.kind, task.subnet
        layers = self.plan.trainable_layers(y, self.stage) if kind is UPDATE else self.plan.stage_layers(y, self.stage)
        self.residency.before(task, layers)
        start = self.recorder.now()
        if kind is FORWARD:
            self._forward(task, layers, start)
        elif kind is BACKWARD:
            self._backward(task, layers, start)
        elif kind is WEIGHT:
            self._weight(task, layers, start)
        else:
            if self.exchange is not None:
                self.exchange.apply(y)
            self.executor.update(layers, subnet=y)
            self._span("optimizer", f"U{y}", start, y)
        self.residency.after(task, layers)

    # -- the kinds ----------------------------------------------------------
    def _forward(self, task: AnyTask, layers: tuple[int, ...], start: float) -> None:
        y, j = task.subnet, part_of(task)
        if self.stage == 0:
            inputs: State = tuple(t.to(self.device) for t in self.executor.part_batch(y, self.first_part + j).inputs)
        else:
            inputs = self._inbox.pop(("F", y, j))  # type: ignore[assignment]
        output = self.executor.forward(y, self.first_part + j, layers, inputs)
        if j == 0:
            self.recorder.touch(layers, y, "F")
        if self.is_last:
            self._loss(y, j, output)  # type: ignore[arg-type]
        self._span("forward", f"F{part_label(task)}", start, y)
        if not self.is_last:
            self.send(self.stage + 1, Message("F", y, output, j))  # type: ignore[arg-type]

    def _backward(self, task: AnyTask, layers: tuple[int, ...], start: float) -> None:
        y, j = task.subnet, part_of(task)
        grads: Grads | None = None if self.is_last else self._inbox.pop(("B", y, j))
        grads_in = self.executor.backward(y, self.first_part + j, layers, grads)
        if not self.executor.split:
            self._summed(y, j, layers)
        wait_for_device(self.device)
        self._backward_spans(part_label(task), y, start, self.recorder.now(), self.executor.last_recompute_s)
        if self.stage > 0:
            self.send(self.stage - 1, Message("B", y, grads_in, j))

    def _weight(self, task: AnyTask, layers: tuple[int, ...], start: float) -> None:
        y, j = task.subnet, part_of(task)
        self.executor.weight(y, self.first_part + j)
        self._summed(y, j, layers)
        self._span("backward", f"W{part_label(task)}", start, y)

    # -- what a task leaves behind ------------------------------------------
    def _loss(self, y: int, j: int, loss: torch.Tensor) -> None:
        """Sum the parts' scaled losses in part order; the last part's forward logs the subnet's loss (replicated:
        the replicas sum them with the gradients, and the loss is logged when the subnet is reduced)."""
        if self.exchange is not None:
            self.exchange.part_loss(y, loss)
            return
        total = self._losses.pop(y, None)
        total = loss if total is None else total + loss
        if j < self.parts - 1:
            self._losses[y] = total
            return
        self.log_loss(y, float(total.item()))

    def log_loss(self, y: int, value: float) -> None:
        """The subnet's loss: into the losses log, and the progress bar's."""
        self.recorder.logs.loss(y, value)
        if self.progress is not None:
            self.progress(y, value)

    def _summed(self, y: int, j: int, layers: tuple[int, ...]) -> None:
        """A part's weight gradients are in: the last part's completes the subnet's backward here (replicated:
        this replica's last part, which also hands the sum to the replicas' exchange)."""
        if self.exchange is not None:
            self.exchange.part_summed(y, last_own=j == self.parts - 1)
        if j == self.parts - 1:
            self.recorder.touch(layers, y, "B")

    def _span(self, category: str, name: str, start: float, y: int) -> None:
        """A compute span, ended when the device's work has."""
        wait_for_device(self.device)
        self.recorder.span(category, name, start, self.recorder.now(), y)

    def _backward_spans(self, label: str, y: int, start: float, end: float, recompute_s: float) -> None:
        """A backward's spans: the recompute its executor timed (``R<label>``), then the rest (``B<label>``)."""
        recompute = min(recompute_s, end - start)
        if recompute > 0:
            self.recorder.span("recompute", f"R{label}", start, start + recompute, y)
        self.recorder.span("backward", f"B{label}", start + recompute, end, y)


def wait_for_device(device: torch.device) -> None:
    """Wait for the device's queued kernels, so a span ends when its work has (only on CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
