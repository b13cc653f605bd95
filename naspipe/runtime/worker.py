"""A stage worker: receive messages, ask the policy for a task, run it, send the result.

The worker is thin on purpose: *what* runs next is the policy's decision (pure scheduling
core), *how* it runs is the executor's. The worker moves tensors between them and the
transport, records the trace, and takes checkpoints at drain points.

A policy may ask more of the runtime through class attributes (its capabilities, :mod:`naspipe.systems`):
per-subnet gradient stash (BSP: GPipe, VPipe), weight stash and forced-off recomputation
(ASP: PipeDream), parameter swapping (VPipe: a :class:`~naspipe.runtime.swap.HostSwapper`
fetches a task's layers before it and evicts them after), checkpoints only at bulk
boundaries (BSP). A policy with ``stream_ends_at`` is told where the stream (or the run up
to the next checkpoint drain) ends. Sequential and CSP ask for none of it.

A micro-batched policy (``micro_batches`` > 1 or ``split_backward``) hands out
:class:`~naspipe.scheduling.task.MicroTask` s, which :class:`~naspipe.runtime.micro_stage.MicroStage`
runs; messages then carry their part and arrive at the policy with it.
"""

from __future__ import annotations

import io
import resource
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import torch

from naspipe import systems
from naspipe.determinism import layer_precision
from naspipe.runplan.job import Job
from naspipe.runplan.rules import cache_budget, effective_recompute, prefetch_horizon
from naspipe.runtime import checkpoint as ckpt
from naspipe.runtime.build import build_stage
from naspipe.runtime.context import ContextManager, layer_bytes
from naspipe.runtime.executor import StageExecutor
from naspipe.runtime.micro_stage import MicroStage
from naspipe.runtime.optim import LayerOptimizers
from naspipe.runtime.outputs import tensor_digest
from naspipe.runtime.recorder import Recorder, StageLogs, StageReport, access_log
from naspipe.runtime.swap import HostSwapper
from naspipe.runtime.transport import Transport
from naspipe.runtime.windowed import SharedWindows
from naspipe.runtime.wire import Message
from naspipe.scheduling import Kind, Task, make_policy
from naspipe.scheduling.predictor import layer_uses, predict, task_layers
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, MicroTask
from naspipe.scheduling.windows import SharedWindow


class StageWorker:
    def __init__(
        self,
        job: Job,
        stage: int,
        transport: Transport,
        device: torch.device,
        run_dir: Path,
        resume: Path | None = None,
        barrier: Callable[[], None] = lambda: None,
        progress: Callable[[int, float], None] | None = None,
    ) -> None:
        self.job, self.stage, self.transport, self.device = job, stage, transport, device
        self.run_dir, self.barrier, self.progress = run_dir, barrier, progress
        self._cuda = device.type == "cuda"
        config = job.config
        self.steps = config.steps
        self.policy = make_policy(config.system, stage, job.plan, job.policy_options)
        self.is_last = self.policy.is_last  # decided once, by the policy (the stage of the loss)
        self.needs = systems.get(config.system)
        self.recompute = effective_recompute(config.system, config.recompute)
        self.layers = {lid: module.to(device) for lid, module in build_stage(job, stage).items()}
        self.optimizers = LayerOptimizers(self.layers, config.optimizer)
        self.windows = self._make_windows()
        start = ckpt.restore(resume, self.layers, self.optimizers, self.windows) if resume is not None else 0
        # training time before this segment: a resume continues the resumed checkpoint's clock
        self.wall_before = (ckpt.trained_wall_s(ckpt.read_manifest(resume)) or 0.0) if resume is not None else 0.0
        self.swapper = HostSwapper(self.layers, self.optimizers, device) if self.needs.swap_parameters else None
        self.context = self._make_context() if config.cache.enabled else None
        self._held: dict[int, tuple[list[int], list[int]]] = {}  # subnet -> (layers kept until its update, dirty)
        self.executor = StageExecutor(job.space, self.layers, self.optimizers, config.seed, self.recompute,
                                      self.is_last, lambda y: job.space.batch(y, config.seed), is_first=stage == 0,
                                      stash_gradients=self.needs.stash_gradients,
                                      stash_weights=self.needs.stash_weights, windows=self.windows,
                                      precision=layer_precision(config.precision, device))
        self.micro = MicroStage(self) if job.policy_options.micro_batched else None
        self.policy.resume_at(start)
        self.mirror_bytes = self.relay_bytes = 0
        self._announce_end(start)
        logs = StageLogs(run_dir / "logs", stage, sorted(self.layers), self.is_last, config.trace_max_events)
        self.recorder = Recorder(stage, logs)
        self._inbox: dict[tuple[str, int, int], tuple[torch.Tensor | None, ...]] = {}  # (kind, subnet, part)

    # -- main loop ------------------------------------------------------------
    def run(self) -> StageReport:
        try:
            self._train()
        except BaseException:
            self.recorder.logs.abort()  # now, not when the collector frees this worker (see StageLogs.abort)
            raise
        self.recorder.finish()
        self._say_goodbye()
        lengths = self.recorder.logs.sync()
        report = self.recorder.report(self._layer_hashes(), self._extra())  # its span ends at finish()
        if self.job.config.final_checkpoint:
            self._checkpoint(self.steps, lengths)
        if self.context is not None:
            self.context.close()
        return report

    def _train(self) -> None:
        for _ in self.subnets():
            pass

    def subnets(self) -> Iterator[int]:
        """The training loop, paused each time this stage finishes a subnet (yields how many it has).

        :meth:`run` drains it; ``benchmarks/bench_overhead.py`` steps it in turn with a plain PyTorch
        loop in one process, so that both are timed side by side, step by step, on one heap and load.
        """
        done = self.policy.finished
        while self.policy.finished < self.steps:
            self._admit()
            self._drain(timeout=0)
            task = self.policy.next_task()
            if task is None:
                self._wait()
            else:
                self._execute(task)
            if self.policy.finished > done:
                done = self.policy.finished
                yield done

    def _make_context(self) -> ContextManager:
        """The device cache, its budget by the run plan's rule (:func:`naspipe.runplan.rules.cache_budget`)."""
        config = self.job.config
        sizes = {lid: layer_bytes(module, config.optimizer) for lid, module in self.layers.items()}
        budget = cache_budget(self.job.plan, self.stage, self.steps, sizes, config.cache,
                              micro_batched=self.job.policy_options.micro_batched)
        return ContextManager(self.layers, self.optimizers, self.device, budget, sizes)

    def _make_windows(self) -> SharedWindows | None:
        """The windowed shared layers' state, for the systems that keep the window rule (the baselines
        train those layers as ordinary trainable ones, their own way)."""
        plan = self.job.plan
        if not plan.windowed or not self.policy.windowed_shared or not plan.windowed & self.layers.keys():
            return None
        rule = SharedWindow(self.job.policy_options.shared_window)
        return SharedWindows(self.layers, sorted(plan.windowed), rule, self.optimizers)

    def _extra(self) -> dict[str, float]:
        """Per-stage metrics beyond the recorder's (metrics.json ``stage_extra``)."""
        no_swap = {"swap_bytes": 0.0, "swap_wait_s": 0.0, "swap_fetches": 0.0}
        swap = self.swapper.stats() if self.swapper is not None else no_swap
        cache = self.context.stats() if self.context is not None else {}
        mirror = {"mirror_bytes": float(self.mirror_bytes), "mirror_relay_bytes": float(self.relay_bytes)}
        window = {"shared_window_bytes": float(self.windows.extra_bytes())} if self.windows is not None else {}
        return {"recompute": float(self.recompute), **swap, **cache, **mirror, **window, **_memory()}

    def _announce_end(self, done: int) -> None:
        """Tell a policy that needs it where the stream ends: the run's end or the next drain point."""
        every = self.job.config.checkpoint_every
        self._end = min(self.steps, (done // every + 1) * every) if every else self.steps
        self.policy.stream_ends_at(self._end)
        if hasattr(self, "recorder"):  # (at start-up nothing is due: every stage restored the newest states)
            self._send_mirrors()

    def _admit(self) -> None:
        policy, every = self.policy, self.job.config.checkpoint_every
        while policy.is_first and policy.admitted < self.steps and policy.may_admit(policy.admitted):
            at_boundary = every and policy.admitted % every == 0 and policy.finished < policy.admitted
            if at_boundary:
                return  # drain point: nothing new enters until the checkpoint is taken
            policy.admit(policy.admitted)

    def _drain(self, timeout: float | None) -> bool:
        message = self.transport.receive(timeout)
        got = False
        while message is not None:
            got = True
            self._deliver(message)
            message = self.transport.receive(0)
        return got

    def _deliver(self, message: Message) -> None:
        if message.kind == "END":
            return
        if message.kind == "M":
            self._on_mirror(message)
            return
        self._inbox[(message.kind, message.subnet, message.micro)] = message.tensors
        part = () if self.micro is None else (message.micro,)  # a micro-batched policy takes the part
        if message.kind == "F":
            self.policy.forward_arrived(message.subnet, *part)
        else:
            self.policy.backward_arrived(message.subnet, *part)

    def _wait(self) -> None:
        start = self.recorder.now()
        if not self._drain(timeout=self.job.config.timeout_s):
            raise TimeoutError(
                f"stage {self.stage}: nothing runnable and no message for {self.job.config.timeout_s:.0f} s "
                f"({self.policy.finished}/{self.steps} subnets finished here)"
            )
        self.recorder.span("waiting", "wait", start, self.recorder.now())

    # -- tasks ----------------------------------------------------------------
    def _execute(self, task: Task) -> None:
        if self.micro is not None:
            self.micro.execute(cast(MicroTask, task))
            return
        kind, y, plan = task.kind, task.subnet, self.job.plan
        layers = plan.trainable_layers(y, self.stage) if kind is UPDATE else plan.stage_layers(y, self.stage)
        if self.swapper is not None:
            self._swap(task, layers, fetch=True)
        if self.context is not None:
            self._cache_in(task)
        start = self.recorder.now()
        if kind is FORWARD:
            self._forward(y, layers)
        elif kind is BACKWARD:
            self._backward(y, layers, start)
        else:
            self.executor.update(layers, subnet=y)
            self._sync()
            self.recorder.span("optimizer", f"U{y}", start, self.recorder.now(), y)
        if self.swapper is not None:
            self._swap(task, layers, fetch=False)
        if self.context is not None:
            self._cache_out(task)
        self._completed(task)

    def _completed(self, task: Task | MicroTask) -> None:
        """Tell the policy; after an update, send mirrors and take a checkpoint when one is due; the last
        stage's forward is its own backward's arrival (a micro-batch task's part goes with it)."""
        self.recorder.tasks += 1
        self.policy.completed(task)  # type: ignore[arg-type]  # a micro-batched policy takes its MicroTask
        if task.kind is UPDATE:
            self._send_mirrors()
            self._maybe_checkpoint()
        elif task.kind is FORWARD and self.is_last:
            self.policy.backward_arrived(task.subnet, *task[3:])

    def _forward(self, y: int, layers: tuple[int, ...]) -> None:
        start = self.recorder.now()
        if self.stage == 0:
            inputs = tuple(t.to(self.device) for t in self.executor.batch(y).inputs)
        else:
            inputs = self._inbox.pop(("F", y, 0))  # type: ignore[assignment]
        output = self.executor.forward(y, layers, inputs)
        self.recorder.touch(layers, y, "F")
        if self.is_last:
            loss = float(output.item())  # type: ignore[union-attr]
            self.recorder.logs.loss(y, loss)
            if self.progress is not None:
                self.progress(y, loss)
        self._sync()
        self.recorder.span("forward", f"F{y}", start, self.recorder.now(), y)
        if not self.is_last:
            self._send(self.stage + 1, Message("F", y, output))  # type: ignore[arg-type]

    def _backward(self, y: int, layers: tuple[int, ...], start: float) -> None:
        grads = None if self.is_last else self._inbox.pop(("B", y, 0))
        grads_in = self.executor.backward(y, layers, grads)
        self.recorder.touch(layers, y, "B")
        self._sync()
        self.backward_spans(f"{y}", y, start, self.recorder.now(), self.executor.last_recompute_s)
        if self.stage > 0:
            self._send(self.stage - 1, Message("B", y, grads_in))

    def backward_spans(self, label: str, y: int, start: float, end: float, recompute_s: float) -> None:
        """A backward's spans: the recompute its executor timed (``R<label>``), then the rest (``B<label>``)."""
        recompute = min(recompute_s, end - start)
        if recompute > 0:
            self.recorder.span("recompute", f"R{label}", start, start + recompute, y)
        self.recorder.span("backward", f"B{label}", start + recompute, end, y)

    def _send(self, dst: int, message: Message) -> None:
        """A send blocks until the neighbour takes the bytes: the stage waits, it does not compute,
        so the time is recorded as ``waiting`` (not busy) and kept out of the bubble's busy time."""
        start = self.recorder.now()
        self.transport.send(dst, message)
        self._sync()
        self.recorder.span("waiting", f"send {message.kind}{message.subnet}", start, self.recorder.now(),
                           message.subnet)

    def _swap(self, task: Task, layers: tuple[int, ...], fetch: bool) -> None:
        """VPipe: fetch the task's layers before it; after it, write back what it changed and evict.

        The subnet's stashed gradients go to the host after its backward and come back for its
        update. All of it is recorded as waiting, none inside the compute spans.
        """
        if self.swapper is None or not layers:
            return
        start = self.recorder.now()
        update = task.kind is Kind.UPDATE
        if fetch:
            self.swapper.fetch(layers, optimizer=update)
            if update:
                self.executor.move_stash(task.subnet, self.swapper.stash_in)
        else:
            self.swapper.evict(layers, params=update, buffers=task.kind is Kind.FORWARD, optimizer=update)
            if task.kind is Kind.BACKWARD:
                self.executor.move_stash(task.subnet, self.swapper.stash_out)
        self.recorder.span("waiting", f"swap-{'in' if fetch else 'out'} {task.kind.value}{task.subnet}",
                           start, self.recorder.now(), task.subnet)

    # -- mirroring (per-subnet partitions) ----------------------------------
    def _send_mirrors(self) -> None:
        """Each layer whose next user runs it on another stage goes there: parameters, buffers and
        optimizer state, serialised exactly, relayed over neighbours (the only links there are)."""
        for mirror in self.policy.take_mirrors():
            layer = mirror.layer
            self.recorder.logs.flush_layer(layer)  # its accesses so far precede the next user's
            state = self.context.current_state(layer) if self.context is not None else self.layers[layer].state_dict()
            optimizer = self.optimizers.peek(layer)
            buffer = io.BytesIO()
            torch.save({"state": {k: v.detach().cpu() for k, v in state.items()},
                        "optimizer": None if optimizer is None else optimizer.state_dict()}, buffer)
            payload = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
            header = torch.tensor([layer, mirror.version, mirror.dst], dtype=torch.int64)
            self.mirror_bytes += payload.numel()
            self._route(Message("M", mirror.writer, (header, payload)), mirror.dst)

    def _route(self, message: Message, dst: int) -> None:
        self._send(self.stage + (1 if dst > self.stage else -1), message)

    def _on_mirror(self, message: Message) -> None:
        header, payload = message.tensors
        assert header is not None and payload is not None
        layer, version, dst = (int(v) for v in header.tolist())
        if dst != self.stage:
            self.relay_bytes += payload.numel()
            self._route(message, dst)
            return
        shard = torch.load(io.BytesIO(payload.cpu().numpy().tobytes()), map_location="cpu", weights_only=True)
        if self.context is not None:
            self.context.replace(layer, shard["state"], shard["optimizer"])
        else:
            self.layers[layer].load_state_dict(shard["state"])
            if shard["optimizer"] is not None:
                self.optimizers.load_state_dict(layer, shard["optimizer"])
        self.policy.mirror_arrived(layer, version)

    def _held_layers(self, step: int) -> list[int]:
        """The layers whose newest state this stage holds once subnets < ``step`` are done (exactly one
        stage holds each: with per-subnet partitions a layer has copies on several stages)."""
        holders = self.job.plan.holders(self.layers, step)
        return sorted(layer for layer, stage in holders.items() if stage == self.stage)

    def _cache_in(self, task: Task) -> None:
        """Context manager: fetch what the task misses, prefetch what the predictor says comes next."""
        if self.context is None:
            return
        horizon = prefetch_horizon(self.job.config.system, self.job.config.cache.horizon)
        upcoming = layer_uses(self.job.plan, predict(self.policy, horizon, self._end, running=task))
        start = self.recorder.now()
        waited = self.context.copy_wait_s
        self.context.begin(task_layers(self.job.plan, task), upcoming)
        if self.context.copy_wait_s > waited:
            self.recorder.span("waiting", f"copy-wait {task.kind.value}{task.subnet}", start, self.recorder.now(),
                               task.subnet)

    def _cache_out(self, task: Task) -> None:
        """Unpin the task's layers, except what the subnet's update still needs (gradients, and without
        recomputation the forward's saved tensors); after the update they are dirty."""
        if self.context is None:
            return
        layers = list(task_layers(self.job.plan, task))
        if task.kind is Kind.UPDATE:
            self.context.after_update(layers)
            self.context.end(layers, dirty=layers)
            held, held_dirty = self._held.pop(task.subnet, ([], []))
            self.context.end(held, dirty=held_dirty)
            return
        if task.kind is Kind.BACKWARD:
            self.context.note_gradients(layers)
        dirty = [x for x in layers if task.kind is Kind.FORWARD and self._has_buffers(x)]
        if (task.kind is Kind.BACKWARD or not self.recompute) and task.subnet not in self._held:
            self._held[task.subnet] = (layers, dirty)
            return
        self.context.end(layers, dirty=dirty)

    def _has_buffers(self, layer: int) -> bool:
        return any(True for _ in self.layers[layer].buffers())

    def _sync(self) -> None:
        """Wait for the device's queued kernels, so a span ends when its work has (only on CUDA)."""
        if self._cuda:
            torch.cuda.synchronize(self.device)

    # -- checkpoints ----------------------------------------------------------
    def _maybe_checkpoint(self) -> None:
        every, done = self.job.config.checkpoint_every, self.policy.finished
        if not every or done % every or done >= self.steps:
            return
        self._checkpoint(done, self.recorder.logs.sync())
        self._announce_end(done)

    def _checkpoint(self, step: int, log_lengths: dict[str, int]) -> None:
        """Every stage saves its layers; after a barrier stage 0 hashes them all into the manifest."""
        directory = ckpt.step_dir(self.run_dir, step)
        if self.context is not None:
            self.context.sync()
        held = self._held_layers(step)
        layers = {lid: self._state(lid) for lid in held}
        if self.windows is not None:  # the window's older version and open sum travel in the layer's shard
            layers = {lid: {**state, **self.windows.state(lid)} if lid in self.windows else state
                      for lid, state in layers.items()}
        optimizers = {lid: sd for lid, sd in self.optimizers.state_dicts().items() if lid in layers}
        others = {access_log(lid) for lid in self.layers} - {access_log(lid) for lid in held}
        lengths = {name: n for name, n in log_lengths.items() if name not in others}
        ckpt.save_stage(directory, self.stage, layers, optimizers, lengths)
        self.barrier()
        if self.stage == 0:
            all_layers = list(range(self.job.space.structure.num_layers))
            ckpt.write_manifest(directory, step, self.job.plan.num_stages, all_layers,
                                self.job.config.to_dict(), self.job.config.keep_checkpoints,
                                self.wall_before + self.recorder.now(),
                                ckpt.run_settings(self.job.partition, self.device.type))

    # -- the end --------------------------------------------------------------
    def _say_goodbye(self) -> None:
        for neighbour in (self.stage - 1, self.stage + 1):
            if 0 <= neighbour < self.job.plan.num_stages:
                self.transport.send(neighbour, Message("END", -1))
        self.transport.close()

    def _layer_hashes(self) -> dict[int, str]:
        if self.context is not None:
            self.context.sync()
        return {layer: tensor_digest(self._state(layer)) for layer in self._held_layers(self.steps)}

    def _state(self, layer: int) -> dict[str, torch.Tensor]:
        """A layer's current tensors: the module's, or with swapping the host copies."""
        if self.context is not None:
            return self.context.host_state(layer)
        return self.swapper.host_state(layer) if self.swapper is not None else self.layers[layer].state_dict()



def _memory() -> dict[str, float]:
    """This process's resident memory now and at its peak, in MiB (flat memory on long runs)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    try:
        pages = int(Path("/proc/self/statm").read_text(encoding="ascii").split()[1])
        now = pages * resource.getpagesize() / 2**20
    except (OSError, ValueError, IndexError):
        now = peak
    return {"rss_mb": now, "max_rss_mb": peak}
