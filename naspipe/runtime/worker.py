"""A stage worker: receive messages, ask the policy for a task, run it, send the result.

The worker is thin on purpose: *what* runs next is the policy's decision (pure scheduling
core), *how* it runs is the executor's. The worker moves tensors between them and the
transport, records the trace, and takes checkpoints at drain points.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from naspipe.runtime import checkpoint as ckpt
from naspipe.runtime.executor import StageExecutor
from naspipe.runtime.job import Job
from naspipe.runtime.optim import LayerOptimizers
from naspipe.runtime.recorder import Recorder, StageReport
from naspipe.runtime.transport import Transport
from naspipe.runtime.wire import Message
from naspipe.scheduling import Kind, Task, make_policy

FAIL_ENV = "NASPIPE_FAIL_AT"  # "STAGE:SUBNET": raise in that stage's forward of that subnet (tests)


class StageWorker:
    def __init__(
        self,
        job: Job,
        stage: int,
        transport: Transport,
        device: torch.device,
        out_dir: Path,
        resume: list[dict[str, Any]] | None = None,
        barrier: Callable[[], None] = lambda: None,
        progress: Callable[[int, float], None] | None = None,
    ) -> None:
        self.job, self.stage, self.transport, self.device = job, stage, transport, device
        self.out_dir, self.barrier, self.progress = out_dir, barrier, progress
        config = job.config
        self.steps = config.steps
        self.is_last = stage == job.plan.num_stages - 1
        self.policy = make_policy(config.system, stage, job.plan, job.policy_options)
        self.layers = {l: job.space.build_layer(l, config.seed).to(device) for l in job.stage_layer_ids(stage)}
        self.optimizers = LayerOptimizers(self.layers, config.optimizer)
        self.executor = StageExecutor(job.space, self.layers, self.optimizers, config.seed, config.recompute,
                                      self.is_last, lambda y: job.space.batch(y, config.seed))
        self.losses: dict[int, float] = {}
        start, access = self._restore(resume) if resume else (0, {})
        self.policy.resume_at(start)
        self.recorder = Recorder(stage, access)
        self._inbox: dict[tuple[str, int], tuple[torch.Tensor | None, ...]] = {}
        self._fail_at = _parse_fail(os.environ.get(FAIL_ENV, ""), stage)

    # -- main loop ------------------------------------------------------------
    def run(self) -> StageReport:
        while self.policy.finished < self.steps:
            self._admit()
            self._drain(timeout=0)
            task = self.policy.next_task()
            if task is None:
                self._wait()
            else:
                self._execute(task)
        self._say_goodbye()
        return self.recorder.report(self.losses, self._layer_hashes(), {})

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
        self._inbox[(message.kind, message.subnet)] = message.tensors
        if message.kind == "F":
            self.policy.forward_arrived(message.subnet)
        else:
            self.policy.backward_arrived(message.subnet)

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
        y, layers = task.subnet, self.job.plan.stage_layers(task.subnet, self.stage)
        start = self.recorder.now()
        if task.kind is Kind.FORWARD:
            self._forward(y, layers)
        elif task.kind is Kind.BACKWARD:
            self._backward(y, layers, start)
        else:
            self.executor.update(self.job.plan.trainable_layers(y, self.stage))
            self._sync()
            self.recorder.span("optimizer", f"U{y}", start, self.recorder.now(), y)
        self.recorder.tasks += 1
        self.policy.completed(task)
        if task.kind is Kind.FORWARD and self.is_last:
            self.policy.backward_arrived(y)
        if task.kind is Kind.UPDATE:
            self._maybe_checkpoint()

    def _forward(self, y: int, layers: tuple[int, ...]) -> None:
        if self._fail_at == y:
            raise RuntimeError(f"injected failure ({FAIL_ENV}) in stage {self.stage}, forward of subnet {y}")
        start = self.recorder.now()
        if self.stage == 0:
            inputs = tuple(t.to(self.device) for t in self.job.space.batch(y, self.job.config.seed).inputs)
        else:
            inputs = self._inbox.pop(("F", y))  # type: ignore[assignment]
        output = self.executor.forward(y, layers, inputs)
        self.recorder.touch(layers, y, "F")
        if self.is_last:
            self.losses[y] = float(output.item())  # type: ignore[union-attr]
            if self.progress is not None:
                self.progress(y, self.losses[y])
        else:
            self.transport.send(self.stage + 1, Message("F", y, output))  # type: ignore[arg-type]
        self._sync()
        self.recorder.span("forward", f"F{y}", start, self.recorder.now(), y)

    def _backward(self, y: int, layers: tuple[int, ...], start: float) -> None:
        grads = None if self.is_last else self._inbox.pop(("B", y))
        grads_in = self.executor.backward(y, layers, grads)
        self.recorder.touch(layers, y, "B")
        if self.stage > 0:
            self.transport.send(self.stage - 1, Message("B", y, grads_in))
        self._sync()
        end = self.recorder.now()
        recompute = min(self.executor.last_recompute_s, end - start)
        if recompute > 0:
            self.recorder.span("recompute", f"R{y}", start, start + recompute, y)
        self.recorder.span("backward", f"B{y}", start + recompute, end, y)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- checkpoints ----------------------------------------------------------
    def _maybe_checkpoint(self) -> None:
        every, done = self.job.config.checkpoint_every, self.policy.finished
        if not every or done % every or done >= self.steps:
            return
        directory = ckpt.step_dir(self.out_dir, done)
        directory.mkdir(parents=True, exist_ok=True)
        ckpt.save_shard(directory, self.stage, self._shard(done))
        self.barrier()
        if self.stage == 0:
            ckpt.write_manifest(directory, done, self.job.plan.num_stages, self.job.config.to_dict(),
                                self.job.config.keep_checkpoints)

    def _shard(self, step: int) -> dict[str, Any]:
        return {
            "step": step,
            "layers": {str(l): {k: v.detach().cpu() for k, v in m.state_dict().items()} for l, m in self.layers.items()},
            "optimizers": {str(l): s for l, s in self.optimizers.state_dicts().items()},
            "access": {str(l): list(v) for l, v in self.recorder.access.items()},
            "losses": {str(y): v for y, v in self.losses.items()},
        }

    def _restore(self, shards: list[dict[str, Any]]) -> tuple[int, dict[int, list[str]]]:
        access: dict[int, list[str]] = {}
        for shard in shards:
            for key, state in shard["layers"].items():
                if int(key) in self.layers:
                    self.layers[int(key)].load_state_dict(state)
            for key, state in shard["optimizers"].items():
                if int(key) in self.layers:
                    self.optimizers.load_state_dict(int(key), state)  # torch moves state to the param's device
            access.update({int(k): list(v) for k, v in shard["access"].items() if int(k) in self.layers})
            if self.is_last:
                self.losses.update({int(k): float(v) for k, v in shard["losses"].items()})
        return shards[0]["step"], access

    # -- the end --------------------------------------------------------------
    def _say_goodbye(self) -> None:
        for neighbour in (self.stage - 1, self.stage + 1):
            if 0 <= neighbour < self.job.plan.num_stages:
                self.transport.send(neighbour, Message("END", -1))
        self.transport.close()

    def _layer_hashes(self) -> dict[int, str]:
        return {layer: tensor_digest(module.state_dict()) for layer, module in sorted(self.layers.items())}


def tensor_digest(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 over names, dtypes, shapes and exact bytes of a layer's tensors, by name."""
    digest = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _parse_fail(spec: str, stage: int) -> int | None:
    if not spec:
        return None
    where, _, subnet = spec.partition(":")
    return int(subnet) if int(where) == stage else None
