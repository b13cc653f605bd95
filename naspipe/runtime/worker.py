"""A stage worker: receive messages, ask the policy for a task, run it, send the result.

The worker is thin on purpose: *what* runs next is the policy's decision (pure scheduling core),
*how* a task runs is :class:`~naspipe.runtime.tasks.StageTasks`' (one path for every schedule: a
subnet-level task of the paper's schedule is part 0 of 1). The worker builds the stage, moves
messages to the tasks and the policy, tells the policy what finished, sends mirrors and takes
checkpoints at drain points.

A policy may ask more of the runtime through class attributes (its capabilities, :mod:`naspipe.systems`):
per-subnet gradient stash (BSP: GPipe, VPipe), weight stash and forced-off recomputation
(ASP: PipeDream), parameter swapping (VPipe: a :class:`~naspipe.runtime.swap.HostSwapper`
fetches a task's layers before it and evicts them after), checkpoints only at bulk
boundaries (BSP). A policy with ``stream_ends_at`` is told where the stream (or the run up
to the next checkpoint drain) ends. Sequential and CSP ask for none of it. A micro-batched
policy (``micro_batches`` > 1 or ``split_backward``) takes each message's part with it.
"""

from __future__ import annotations

import io
import resource
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from naspipe.determinism import layer_precision
from naspipe.runplan.job import Job
from naspipe.runplan.rules import cache_budget, effective_recompute
from naspipe.runtime import checkpoint as ckpt
from naspipe.runtime.build import build_stage
from naspipe.runtime.context import ContextManager, layer_bytes
from naspipe.runtime.exchange import PARTIAL, TOTAL, GradientExchange
from naspipe.runtime.executor import StageExecutor, trainable_parameters
from naspipe.runtime.optim import LayerOptimizers
from naspipe.runtime.outputs import tensor_digest
from naspipe.runtime.recorder import Recorder, StageLogs, StageReport, access_log
from naspipe.runtime.residency import Residency
from naspipe.runtime.swap import HostSwapper
from naspipe.runtime.tasks import StageTasks, wait_for_device
from naspipe.runtime.transport import Transport
from naspipe.runtime.windowed import SharedWindows
from naspipe.runtime.wire import Message
from naspipe.scheduling import make_policy
from naspipe.scheduling.replicas import ReplicaLayout
from naspipe.scheduling.task import FORWARD, UPDATE, AnyTask
from naspipe.scheduling.windows import SharedWindow
from naspipe.space.ops.common import BatchNorm, running_statistics


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
        replica: int = 0,
    ) -> None:
        self.job, self.stage, self.transport, self.device = job, stage, transport, device
        self.replica = replica
        self.run_dir, self.barrier, self.progress = run_dir, barrier, progress
        config = job.config
        self.steps = config.steps
        self.policy = make_policy(config.system, stage, job.plan, job.policy_options)
        self.is_last = self.policy.is_last  # decided once, by the policy (the stage of the loss)
        self.recompute = effective_recompute(config.system, config.recompute)
        self.layers = {lid: module.to(device) for lid, module in build_stage(job, stage).items()}
        self.optimizers = LayerOptimizers(self.layers, config.optimizer)
        self.windows = self._make_windows()
        start = ckpt.restore(resume, self.layers, self.optimizers, self.windows) if resume is not None else 0
        # training time before this segment: a resume continues the resumed checkpoint's clock
        self.wall_before = (ckpt.trained_wall_s(ckpt.read_manifest(resume)) or 0.0) if resume is not None else 0.0
        self.swapper = HostSwapper(self.layers, self.optimizers, device) if self.policy.swap_parameters else None
        self.context = self._make_context() if config.cache.enabled else None
        executor = self._make_executor()
        self.policy.resume_at(start)
        self.mirror_bytes = self.relay_bytes = 0
        end = self._announce_end(start)  # (at start-up no mirror is due: every stage restored the newest states)
        self._replica_logs = tempfile.mkdtemp(prefix=f"naspipe-stage{stage}-replica{replica}-") if replica else None
        logs_dir = Path(self._replica_logs) / "logs" if self._replica_logs else run_dir / "logs"  # replica 0's count
        logs = StageLogs(logs_dir, stage, sorted(self.layers), self.is_last, config.trace_max_events)
        self.recorder = Recorder(stage, logs)
        self.residency = Residency(job, stage, self.policy, executor, self.recorder, self.context, self.swapper, end)
        self.layout = ReplicaLayout(config.micro_batches, config.replicas)
        self.exchange = self._make_exchange(executor)
        self.tasks = StageTasks(job, stage, device, executor, self.residency, self.recorder, self._send, progress,
                                self.exchange, first_part=self.layout.parts(replica).start)

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
        if self._replica_logs is not None:
            shutil.rmtree(self._replica_logs, ignore_errors=True)
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

    def _make_executor(self) -> StageExecutor:
        """The stage's arithmetic. A micro-batched policy runs the last stage's backward of a part right after
        its forward (a backward comes first there), so that stage keeps the part's graph instead of recomputing
        it: a forward per part for no memory saved. The subnet-level policies may run other tasks in between,
        so there the last stage recomputes as configured. Recomputation replays the forward's calls: no bit
        depends on where it is skipped."""
        job, config, policy = self.job, self.job.config, self.policy
        options = job.policy_options
        recompute = self.recompute and not (options.micro_batched and self.is_last)
        return StageExecutor(job.space, self.layers, self.optimizers, config.seed, recompute, self.is_last,
                             lambda y: job.space.batch(y, config.seed), is_first=self.stage == 0,
                             parts=options.micro_batches, parts_here=options.parts_here,
                             split=options.split_backward,
                             stash_gradients=policy.stash_gradients, stash_weights=policy.stash_weights,
                             windows=self.windows, precision=layer_precision(config.precision, self.device))

    def _make_exchange(self, executor: StageExecutor) -> GradientExchange | None:
        """Replicated stages: this replica's side of the ordered sum of each subnet's gradients (and losses)."""
        config = self.job.config
        if config.replicas == 1:
            return None
        plan, stage, layers = self.job.plan, self.stage, self.layers

        def params(subnet: int) -> list[torch.Tensor]:
            return [p for lid in plan.trainable_layers(subnet, stage) for p in trainable_parameters(layers[lid])]

        def norms(subnet: int) -> list[BatchNorm]:
            return [n for lid in plan.trainable_layers(subnet, stage) for n in running_statistics(layers[lid])]

        if self.replica:  # its parts' running-statistics steps wait for the replicas before it (GradientExchange)
            for module in layers.values():
                for norm in running_statistics(module):
                    norm.deferred = []
        windows = self.windows

        def windowed(subnet: int) -> list[tuple[int, int]]:
            if windows is None:
                return []
            return [(lid, len(windows.names(lid))) for lid in plan.stage_layers(subnet, stage) if lid in windows]

        return GradientExchange(self.layout, self.replica, params, norms, self.transport.send_replica,
                                with_loss=self.is_last, cast=layer_precision(config.precision, self.device),
                                windowed=windowed, window_sums=executor.window_sums)

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
        sums = {"replica_sum_bytes": float(self.exchange.sent_bytes)} if self.exchange is not None else {}
        return {"recompute": float(self.recompute), **swap, **cache, **mirror, **window, **sums, **_memory()}

    def _announce_end(self, done: int) -> int:
        """Tell a policy that needs it where the stream ends: the run's end or the next drain point."""
        every = self.job.config.checkpoint_every
        end = min(self.steps, (done // every + 1) * every) if every else self.steps
        self.policy.stream_ends_at(end)
        return end

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
        if message.kind in (PARTIAL, TOTAL):
            assert self.exchange is not None, f"stage {self.stage}: a replicas' sum reached a stage without replicas"
            self.exchange.arrived(message)
            self._tell_reduced()
            return
        self.tasks.arrived(message)
        part = (message.micro,) if self.job.policy_options.micro_batched else ()  # a micro-batched policy takes it
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
    def _execute(self, task: AnyTask) -> None:
        self.tasks.run(task)
        self._completed(task)

    def _completed(self, task: AnyTask) -> None:
        """Tell the policy; after an update, send mirrors and take a checkpoint when one is due; the last
        stage's forward is its own backward's arrival (a micro-batch task's part goes with it)."""
        self.recorder.tasks += 1
        self.policy.completed(task)  # type: ignore[arg-type]  # a micro-batched policy takes its MicroTask
        if self.exchange is not None:
            self._tell_reduced()
        if task.kind is UPDATE:
            self._send_mirrors()
            self._maybe_checkpoint()
        elif task.kind is FORWARD and self.is_last:
            self.policy.backward_arrived(task.subnet, *task[3:])

    def _tell_reduced(self) -> None:
        """The subnets whose replicas' sum is here: their loss (the last stage) is logged, their update may run."""
        assert self.exchange is not None
        for subnet in self.exchange.take_reduced():
            if self.is_last:
                self.tasks.log_loss(subnet, self.exchange.take_loss(subnet))
            self.policy.reduced(subnet)  # type: ignore[attr-defined]  # MicroCSP: the one replicated policy

    def _send(self, dst: int, message: Message) -> None:
        """A send blocks until the neighbour takes the bytes: the stage waits, it does not compute,
        so the time is recorded as ``waiting`` (not busy) and kept out of the bubble's busy time."""
        start = self.recorder.now()
        self.transport.send(dst, message)
        wait_for_device(self.device)
        self.recorder.span("waiting", f"send {message.kind}{message.subnet}", start, self.recorder.now(),
                           message.subnet)

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

    # -- checkpoints ----------------------------------------------------------
    def _maybe_checkpoint(self) -> None:
        every, done = self.job.config.checkpoint_every, self.policy.finished
        if not every or done % every or done >= self.steps:
            return
        self._checkpoint(done, self.recorder.logs.sync())
        self.residency.stream_end = self._announce_end(done)
        self._send_mirrors()

    def _checkpoint(self, step: int, log_lengths: dict[str, int]) -> None:
        """Every stage saves its layers; after a barrier stage 0 hashes them all into the manifest. Replicas hold
        the same bits as replica 0 (the tests compare them): replica 0 saves, the others only meet the barrier."""
        if self.replica:
            self.barrier()
            return
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
        last = self.job.config.replicas - 1
        for other in (range(last) if self.replica == last else (self.replica + 1,)) if last else ():
            self.transport.send_replica(other, Message("END", -1))  # each replica link that listens to this one
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
