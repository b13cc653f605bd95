"""A task's layers on the device: brought there before the task, let go after it.

Two mechanisms, one per kind of system, both driven per task of any schedule (a subnet-level task
is part 0 of 1):

- **The context manager** (:class:`~naspipe.runtime.context.ContextManager`; systems with the
  cache): a byte-bounded device cache that fetches what the task misses and prefetches the layers
  of the tasks the predictor says come next. A subnet's layers stay held from the first task that
  leaves something for its update (a backward or weight task's gradients; a forward that keeps its
  graph, i.e. does not recompute) until that update, which writes them back as dirty.
- **Parameter swapping** (:class:`~naspipe.runtime.swap.HostSwapper`; VPipe): every layer lives
  in host memory, is fetched before each task (synchronously: no prediction) and evicted after,
  writing back what the task changed. A subnet's stashed gradient sums park in host memory between
  its gradient-summing tasks (the backward, or with a split the weight task) and its update, and
  come back for each later part's sum and for the update.

The time spent is recorded as waiting (``copy-wait F5.1``, ``swap-in B5``), none inside the compute spans.
"""

from __future__ import annotations

from naspipe.runplan.job import Job
from naspipe.runplan.rules import prefetch_horizon
from naspipe.runtime.context import ContextManager
from naspipe.runtime.executor import StageExecutor
from naspipe.runtime.micro import part_label, part_of
from naspipe.runtime.recorder import Recorder
from naspipe.runtime.swap import HostSwapper
from naspipe.scheduling import StagePolicy
from naspipe.scheduling.policies.micro import plain_task, starts_hold
from naspipe.scheduling.predictor import layer_uses, predict, task_layers
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, WEIGHT, AnyTask


class Residency:
    """One stage's layer residency around its tasks (module docstring). ``stream_end`` (where the stream or
    the run up to the next drain ends) bounds the predictor's look-ahead; the worker moves it at a drain."""

    def __init__(self, job: Job, stage: int, policy: StagePolicy, executor: StageExecutor, recorder: Recorder,
                 context: ContextManager | None, swapper: HostSwapper | None, stream_end: int) -> None:
        self.plan, self.stage, self.policy, self.executor = job.plan, stage, policy, executor
        self.recorder, self.context, self.swapper, self.stream_end = recorder, context, swapper, stream_end
        self.horizon = prefetch_horizon(job.config.system, job.config.cache.horizon)
        self.sums = WEIGHT if executor.split else BACKWARD  # the task that adds a part's weight gradients
        self._held: dict[int, tuple[list[int], list[int]]] = {}  # subnet -> (layers kept until its update, dirty)
        if context is not None and job.policy_options.micro_batched:
            _check_holds(executor, policy.is_last)

    def before(self, task: AnyTask, layers: tuple[int, ...]) -> None:
        if self.swapper is not None and layers:
            self._swap_in(self.swapper, task, layers)
        if self.context is not None:
            self._cache_in(self.context, task)

    def after(self, task: AnyTask, layers: tuple[int, ...]) -> None:
        if self.swapper is not None and layers:
            self._swap_out(self.swapper, task, layers)
        if self.context is not None:
            self._cache_out(self.context, task)

    def holds(self, task: AnyTask) -> bool:
        """Whether the task leaves its subnet's layers held until the subnet's update: its gradients wait for
        the update, or (a forward without recomputation) its graph waits for the backward. For a micro-batched
        policy this is :func:`~naspipe.scheduling.policies.micro.starts_hold`, the rule its ``one_holder``
        follows (checked at the start: the cache needs recomputation, and the last stage keeps its graphs)."""
        return task.kind is not FORWARD or not self.executor.recompute

    # -- the context manager ------------------------------------------------
    def _cache_in(self, context: ContextManager, task: AnyTask) -> None:
        """Fetch what the task misses, prefetch what the predictor says comes next."""
        predicted = predict(self.policy, self.horizon, self.stream_end, running=task)  # type: ignore[arg-type]
        upcoming = layer_uses(self.plan, [plain_task(t) for t in predicted])
        start, waited = self.recorder.now(), context.copy_wait_s
        context.begin(task_layers(self.plan, plain_task(task)), upcoming)
        if context.copy_wait_s > waited:
            self.recorder.span("waiting", f"copy-wait {task.kind.value}{part_label(task)}", start,
                               self.recorder.now(), task.subnet)

    def _cache_out(self, context: ContextManager, task: AnyTask) -> None:
        """Unpin the task's layers, except what the subnet's update still needs (:meth:`holds`); after the
        update they are dirty. The gradients are counted once, when part 0's land."""
        layers = list(task_layers(self.plan, plain_task(task)))
        if task.kind is UPDATE:
            context.after_update(layers)
            context.end(layers, dirty=layers)
            held, held_dirty = self._held.pop(task.subnet, ([], []))
            context.end(held, dirty=held_dirty)
            return
        if task.kind is self.sums and part_of(task) == 0:
            context.note_gradients(layers)
        dirty = [x for x in layers if task.kind is FORWARD and self._has_buffers(x)]
        if self.holds(task) and task.subnet not in self._held:
            self._held[task.subnet] = (layers, dirty)
            return
        context.end(layers, dirty=dirty)

    def _has_buffers(self, layer: int) -> bool:
        return any(True for _ in self.executor.layers[layer].buffers())

    # -- swapping -----------------------------------------------------------
    def _swap_in(self, swapper: HostSwapper, task: AnyTask, layers: tuple[int, ...]) -> None:
        """Fetch the task's layers (an update: with their optimizer state); the subnet's stashed sums come
        back for its update and for a later part's sum."""
        start, update = self.recorder.now(), task.kind is UPDATE
        swapper.fetch(layers, optimizer=update)
        if update or (task.kind is self.sums and part_of(task) > 0):
            self.executor.stash.move(task.subnet, swapper.stash_in)
        self._swap_span("in", task, start)

    def _swap_out(self, swapper: HostSwapper, task: AnyTask, layers: tuple[int, ...]) -> None:
        """Write back what the task changed (a forward: buffers; an update: parameters and optimizer state),
        evict; the stashed sums go to the host after each gradient-summing task."""
        start, update = self.recorder.now(), task.kind is UPDATE
        swapper.evict(layers, params=update, buffers=task.kind is FORWARD, optimizer=update)
        if task.kind is self.sums:
            self.executor.stash.move(task.subnet, swapper.stash_out)
        self._swap_span("out", task, start)

    def _swap_span(self, way: str, task: AnyTask, start: float) -> None:
        self.recorder.span("waiting", f"swap-{way} {task.kind.value}{part_label(task)}", start, self.recorder.now(),
                           task.subnet)


def _check_holds(executor: StageExecutor, is_last: bool) -> None:
    """The cache's hold rule and the micro-batched policy's must agree, or the policy's cache budget is wrong."""
    if starts_hold(FORWARD, is_last) == executor.recompute:
        raise ValueError(f"a micro-batched stage with the cache {'re' if executor.recompute else 'does not re'}"
                         f"computes{' on the last stage' if is_last else ''}: its holds would not be the policy's")
