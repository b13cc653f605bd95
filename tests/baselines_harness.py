"""Run the real stage workers as threads of one process (tests of the baseline systems).

Everything but the launch is the production runtime: :class:`StageWorker` (policy,
executor, stashes, swapping, recorder) and :func:`write_outputs`. Only the process spawn and
the gloo transport are replaced by threads and queues, with messages still packed to exact
bytes and unpacked (:mod:`naspipe.runtime.wire`), so a run costs a fraction of a second
instead of a process start per stage. ``tests/test_baselines_runtime.py`` checks that a
threaded run and a spawned gloo run give bitwise identical results.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from pathlib import Path
from typing import Any

import torch

from naspipe.config import Config, load_config
from naspipe.determinism import make_deterministic
from naspipe.runplan.job import Job, build_job
from naspipe.runtime.launch import replica_zero
from naspipe.runtime.outputs import write_outputs
from naspipe.runtime.recorder import StageReport
from naspipe.runtime.transport import Transport
from naspipe.runtime.wire import Message, pack, unpack
from naspipe.scheduling import PipelinePlan
from naspipe.scheduling.replicas import ProcessGrid
from tests.conftest import FixedStream

CPU = torch.device("cpu")

# A small toy space: 4 blocks of 2 candidates (subnets share layers), 6 positions.
SMALL = ("space.blocks=4", "space.candidates=2", "space.dim=16", "space.seq_len=8", "space.batch_size=4",
         "space.vocab=32", "timeout_s=60")


class QueueTransport(Transport):
    """The gloo transport's links as queues: a stage's neighbours in its replica, and its stage's other replicas
    (the chain up, the total from the last), each message packed to exact bytes and unpacked, as over gloo."""

    def __init__(self, rank: int, boxes: list[queue.Queue[Message]], grid: ProcessGrid | None = None) -> None:
        self.rank, self.boxes = rank, boxes
        self.grid = grid if grid is not None else ProcessGrid(len(boxes))
        self.stage, self.replica = self.grid.place(rank)

    def send(self, dst: int, message: Message) -> None:
        if abs(dst - self.stage) != 1:
            raise ValueError(f"stage {self.stage} can only talk to its neighbours, not {dst}")
        self._put(self.grid.rank(dst, self.replica), message)

    def send_replica(self, dst: int, message: Message) -> None:
        last = self.grid.replicas - 1
        if dst != self.replica + 1 and not (self.replica == last and dst != last):
            raise ValueError(f"replica {self.replica} has no link to replica {dst}")
        self._put(self.grid.rank(self.stage, dst), message)

    def _put(self, rank: int, message: Message) -> None:
        self.boxes[rank].put(unpack(pack(message, CPU)))  # exact bytes, as over gloo

    def receive(self, timeout: float | None) -> Message | None:
        try:
            return self.boxes[self.rank].get(block=timeout != 0, timeout=timeout or None)
        except queue.Empty:
            return None


def config_of(system: str, stages: int, steps: int = 8, *overrides: str) -> Config:
    return load_config(None, [*SMALL, *overrides], {"system": system, "stages": stages, "steps": steps})


def run_threads(config: Config, out: Path, stream: FixedStream | None = None) -> dict[str, Any]:
    """Train ``config`` with one thread per stage; writes the usual output files into ``out``."""
    job = build_job(config)
    if stream is not None:
        job = with_stream(job, stream)
    return run_job_threads(job, out)


def run_job_threads(job: Job, out: Path, resume: Path | None = None) -> dict[str, Any]:
    """Train ``job`` with one thread per stage (from checkpoint ``resume`` if given) into the working
    directory ``out``: what the launcher's spawned stages do, in this process."""
    from naspipe.runtime.worker import StageWorker

    make_deterministic(job.config.threads, CPU)
    grid = ProcessGrid(job.config.stages, job.config.replicas)
    stages = grid.size  # threads: one per (stage, replica), in rank order
    boxes: list[queue.Queue[Message]] = [queue.Queue() for _ in range(stages)]
    barrier = threading.Barrier(stages)
    workers = [StageWorker(job, grid.place(k)[0], QueueTransport(k, boxes, grid), CPU, out, resume, barrier.wait,
                           replica=grid.place(k)[1]) for k in range(stages)]
    reports: list[StageReport | None] = [None] * stages
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            barrier.wait()
            workers[k].recorder.t0 = time.perf_counter()
            reports[k] = workers[k].run()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)
            barrier.abort()

    start = time.perf_counter()
    threads = [threading.Thread(target=work, args=(k,), name=f"stage-{k}") for k in range(stages)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    done = [r for r in reports if r is not None]
    return write_outputs(job, replica_zero(done, grid), out, time.perf_counter() - start, "cpu")


def with_stream(job: Job, stream: FixedStream) -> Job:
    plan = PipelinePlan(job.space.structure, job.partition, stream)  # type: ignore[arg-type]
    return dataclasses.replace(job, stream=stream, plan=plan)  # type: ignore[arg-type]


def bulk_disjoint_stream(blocks: int, candidates: int, bulk: int, steps: int, seed: int = 0) -> FixedStream:
    """Random subnets in which no two of one bulk share a candidate layer (needs bulk <= candidates).

    For each bulk and block, the bulk's subnets take distinct candidates (a random
    permutation), so the only layers bulk-mates share are the frozen, untrained ones.
    """
    import random

    if bulk > candidates:
        raise ValueError("a bulk of disjoint subnets needs at least as many candidates per block")
    rng = random.Random(seed)
    subnets = []
    for first in range(0, steps, bulk):
        perms = [rng.sample(range(candidates), candidates) for _ in range(blocks)]
        for i in range(min(bulk, steps - first)):
            subnets.append(tuple(perms[b][i] for b in range(blocks)))
    return FixedStream(subnets)
