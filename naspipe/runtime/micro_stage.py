"""The stage worker's path for micro-batch tasks (``micro_batches`` > 1 or ``split_backward``).

:class:`~naspipe.runtime.worker.StageWorker` hands every task of a micro-batched policy
(:class:`~naspipe.scheduling.policies.micro.MicroCSP`, a :class:`MicroTask`) to :class:`MicroStage`,
which does for it what the worker does for a subnet-level task: the context manager's fetch and
release, the arithmetic (:class:`~naspipe.runtime.micro.MicroExecutor`), the trace, the messages
(each carries its part: ``F5.1`` goes to the next stage as activation part 1 of subnet 5), the
policy's completion. The worker's own path for the paper's schedule stays as it was.

What it records: spans named ``F5.1``, ``R5.1`` (recompute), ``B5.1``, ``W5.1`` (a weight task, counted
as backward) and ``U5``; the access log keeps one ``F`` per subnet and layer (its first part's forward)
and one ``B`` (the last part's weight gradients), so access orders read as for m = 1; the loss of a
subnet is logged when its last part's forward is done, the parts' scaled losses summed in part order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from naspipe.runplan.job import Job
from naspipe.runplan.rules import prefetch_horizon
from naspipe.runtime.context import ContextManager
from naspipe.runtime.executor import StageExecutor
from naspipe.runtime.micro import MicroExecutor
from naspipe.runtime.recorder import Recorder
from naspipe.runtime.swap import HostSwapper
from naspipe.runtime.wire import Message
from naspipe.scheduling import StagePolicy
from naspipe.scheduling.policies.micro import as_plain, starts_hold
from naspipe.scheduling.predictor import layer_uses, predict, task_layers
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, WEIGHT, MicroTask, Task


class StageWorker(Protocol):
    """What this module uses of :class:`naspipe.runtime.worker.StageWorker` (a protocol: the worker
    imports this module)."""

    job: Job
    stage: int
    device: torch.device
    is_last: bool
    recompute: bool
    policy: StagePolicy
    executor: StageExecutor
    swapper: HostSwapper | None
    context: ContextManager | None
    recorder: Recorder
    progress: Callable[[int, float], None] | None
    _inbox: dict[tuple[str, int, int], tuple[torch.Tensor | None, ...]]
    _held: dict[int, tuple[list[int], list[int]]]
    _end: int

    def _sync(self) -> None: ...
    def backward_spans(self, label: str, y: int, start: float, end: float, recompute_s: float) -> None: ...
    def _send(self, dst: int, message: Message) -> None: ...
    def _completed(self, task: Task | MicroTask) -> None: ...
    def _cache_out(self, task: Task) -> None: ...
    def _has_buffers(self, layer: int) -> bool: ...


class MicroStage:
    """One stage's micro-batch tasks, run with its worker's layers, transport, recorder and cache."""

    def __init__(self, worker: StageWorker) -> None:
        options = worker.job.policy_options
        if worker.swapper is not None:
            raise ValueError("micro-batched schedules do not swap parameters")
        self.worker = worker
        self.parts, self.split = options.micro_batches, options.split_backward
        self.executor = MicroExecutor(worker.executor, self.parts, self.split)
        self._losses: dict[int, torch.Tensor] = {}  # last stage: the parts' scaled losses so far, summed

    def execute(self, task: MicroTask) -> None:
        worker, kind, y = self.worker, task.kind, task.subnet
        plan = worker.job.plan
        layers = plan.trainable_layers(y, worker.stage) if kind is UPDATE else plan.stage_layers(y, worker.stage)
        if worker.context is not None:
            self._cache_in(task)
        start = worker.recorder.now()
        if kind is FORWARD:
            self._forward(task, layers, start)
        elif kind is BACKWARD:
            self._backward(task, layers, start)
        elif kind is WEIGHT:
            self.executor.weight(y, task.micro)
            self._summed(task, layers)
            worker._sync()
            worker.recorder.span("backward", f"W{y}.{task.micro}", start, worker.recorder.now(), y)
        else:
            self.executor.update(layers, y)
            worker._sync()
            worker.recorder.span("optimizer", f"U{y}", start, worker.recorder.now(), y)
        if worker.context is not None:
            self._cache_out(task)
        worker._completed(task)

    def _forward(self, task: MicroTask, layers: tuple[int, ...], start: float) -> None:
        worker, y, j = self.worker, task.subnet, task.micro
        if worker.stage == 0:
            inputs = tuple(t.to(worker.device) for t in self.executor.part_batch(y, j).inputs)
        else:
            inputs = worker._inbox.pop(("F", y, j))  # type: ignore[assignment]
        output = self.executor.forward(y, j, layers, inputs)
        if j == 0:
            worker.recorder.touch(layers, y, "F")
        if worker.is_last:
            self._loss(y, j, output)  # type: ignore[arg-type]
        worker._sync()
        worker.recorder.span("forward", f"F{y}.{j}", start, worker.recorder.now(), y)
        if not worker.is_last:
            worker._send(worker.stage + 1, Message("F", y, output, j))  # type: ignore[arg-type]

    def _loss(self, y: int, j: int, loss: torch.Tensor) -> None:
        """Sum the parts' scaled losses in part order; the last part's forward logs the subnet's loss."""
        total = self._losses.pop(y, None)
        total = loss if total is None else total + loss
        if j < self.parts - 1:
            self._losses[y] = total
            return
        value = float(total.item())
        self.worker.recorder.logs.loss(y, value)
        if self.worker.progress is not None:
            self.worker.progress(y, value)

    def _backward(self, task: MicroTask, layers: tuple[int, ...], start: float) -> None:
        worker, y, j = self.worker, task.subnet, task.micro
        grads = None if worker.is_last else worker._inbox.pop(("B", y, j))
        grads_in = self.executor.backward(y, j, layers, grads)
        if not self.split:
            self._summed(task, layers)
        worker._sync()
        worker.backward_spans(f"{y}.{j}", y, start, worker.recorder.now(), self.executor.last_recompute_s)
        if worker.stage > 0:
            worker._send(worker.stage - 1, Message("B", y, grads_in, j))

    def _summed(self, task: MicroTask, layers: tuple[int, ...]) -> None:
        """A part's weight gradients are in: the last part's completes the subnet's backward here."""
        if task.micro == self.parts - 1:
            self.worker.recorder.touch(layers, task.subnet, "B")

    # -- the context manager ------------------------------------------------
    def _cache_in(self, task: MicroTask) -> None:
        """Fetch the task's layers; prefetch those of the tasks the predictor says come next."""
        worker = self.worker
        assert worker.context is not None
        horizon = prefetch_horizon(worker.job.config.system, worker.job.config.cache.horizon)
        predicted = predict(worker.policy, horizon, worker._end, running=task)  # type: ignore[arg-type]
        upcoming = layer_uses(worker.job.plan, [_plain(t) for t in predicted])
        start, waited = worker.recorder.now(), worker.context.copy_wait_s
        worker.context.begin(task_layers(worker.job.plan, as_plain(task)), upcoming)
        if worker.context.copy_wait_s > waited:
            worker.recorder.span("waiting", f"copy-wait {task}", start, worker.recorder.now(), task.subnet)

    def _cache_out(self, task: MicroTask) -> None:
        """Unpin the task's layers, except what the subnet's update still needs: from the first task that starts
        a hold (:func:`starts_hold`, the rule the policy's ``one_holder`` follows) to its update. The gradients
        are counted once, when part 0's first land."""
        worker, context = self.worker, self.worker.context
        assert context is not None
        if task.kind is UPDATE:
            worker._cache_out(as_plain(task))
            return
        layers = list(task_layers(worker.job.plan, as_plain(task)))
        if task.micro == 0 and task.kind is (WEIGHT if self.split else BACKWARD):
            context.note_gradients(layers)
        dirty = [x for x in layers if task.kind is FORWARD and worker._has_buffers(x)]
        if starts_hold(task.kind, worker.is_last) and task.subnet not in worker._held:
            worker._held[task.subnet] = (layers, dirty)
            return
        context.end(layers, dirty=dirty)


def _plain(task: Task | MicroTask) -> Task:
    """A predicted task at the subnet level (what :func:`layer_uses` reads)."""
    return as_plain(task) if isinstance(task, MicroTask) else task
