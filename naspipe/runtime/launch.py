"""Start the stage processes: in-process for one stage, spawned locally, or under torchrun/srun.

- One stage: the worker runs in this process; no process group is needed.
- ``naspipe train --stages D`` on one machine: D processes are spawned, rendezvous through a
  file store in a temp dir (no port to collide on), and the first one to fail takes the rest
  down (``torch.multiprocessing`` terminates the others) with its traceback on stderr. The
  stages also die with this process, however it ends (:mod:`naspipe.runtime.lifecycle`).
- Under ``torchrun`` (``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` set) or ``srun``
  (``SLURM_PROCID``/``SLURM_NTASKS`` plus ``MASTER_ADDR``/``MASTER_PORT``), this process is
  one stage; the launcher tears the job down if a stage fails.
"""

from __future__ import annotations

import copy
import errno
import json
import logging
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing import forkserver as mp_forkserver
from multiprocessing import resource_tracker as mp_resource_tracker
from multiprocessing import util as mp_util
from pathlib import Path
from typing import Any, NoReturn, cast

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from naspipe import numerics
from naspipe.config import Config
from naspipe.determinism import check_threads, make_deterministic
from naspipe.errors import UsageError
from naspipe.fsutil import no_space
from naspipe.runplan import runlock
from naspipe.runplan.job import Job, build_job, build_space, check_bulk_boundary
from naspipe.runplan.rundir import RunDir, RunDirGone, stops_if_removed
from naspipe.runtime import checkpoint as ckpt
from naspipe.runtime import faults, lifecycle, memory, rundir
from naspipe.runtime.micro import check_parts
from naspipe.runtime.outputs import write_outputs
from naspipe.runtime.recorder import StageReport
from naspipe.runtime.transport import DistTransport, LocalTransport, Transport
from naspipe.runtime.worker import StageWorker
from naspipe.scheduling.replicas import ProcessGrid
from naspipe.space.base import SearchSpace

# forkserver: one clean server process imports torch once, then each stage is a fork of it
# (no torch state or threads are inherited from the caller, unlike plain fork).
START_METHOD = "forkserver"
NO_CUDA = "config key 'device': 'cuda' requested but no CUDA device is available"


# What every stage imports, imported once in the forkserver so that each fork inherits it: this module
# (torch with it), and torch._dynamo, which torch.optim imports when a stage builds its first optimizer
# (``Optimizer.add_param_group`` is wrapped by ``torch._disable_dynamo``): with sympy and mpmath ~800
# modules, about 1.2 CPU s that each stage paid again (docs/performance.md, "The runtime against a plain
# PyTorch loop"; tests/test_runtime_accounting.py says when a preload is no longer needed).
FORKSERVER_PRELOAD = ("naspipe.runtime.launch", "torch._dynamo")
NO_SPACE_EXIT = 28  # a stage's exit status when its disk is full (ENOSPC): the launcher says so in one line
RUN_DIR_GONE_EXIT = 4  # a stage's exit status when DIR.partial was removed or renamed under it (RunDirGone)


def _start_forkserver() -> None:
    """Start the forkserver (preloading this module) with SIGINT blocked.

    Ctrl-C reaches the whole foreground group; a forkserver still importing torch died of it
    with a KeyboardInterrupt traceback in the run's log. The blocked mask is inherited by the
    server (which then ignores SIGINT itself); a Ctrl-C meanwhile stays pending for the launcher.
    """
    mp.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    mp_resource_tracker.ensure_running()  # first: starting it unblocks SIGINT again
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        mp_forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class StageFailed(RuntimeError):
    """A stage process died; its own traceback is already on stderr."""


@dataclass(frozen=True)
class Rank:
    rank: int
    world: int
    local_rank: int


def cluster_rank() -> Rank | None:
    """This process's place in a torchrun or SLURM launch, or None for a plain local run."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return Rank(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0")))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and int(env["SLURM_NTASKS"]) > 1:
        return Rank(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", "0")))
    return None


def train(config: Config, out_dir: Path, resume: Path | None = None, overwrite: bool = False) -> dict[str, Any] | None:
    """Run training; returns the metrics on the process that published the outputs."""
    numerics.check_loaded(config.numerics)  # the launcher's kernels too: a process that loaded torch too early
    place = cluster_rank()
    space = build_space(config)  # no layer is built yet
    _check_memory(config, space, place)  # before the partition sizes every layer: name the one that cannot fit
    job = build_job(config, space)  # validates everything before any process starts or file is written; built once
    _check_stage_count(job, place)
    owner = place is None or place.rank == 0  # the process that holds the run's lock and publishes it
    if owner:  # a live run first: name it, whatever else is wrong
        runlock.refuse_if_held(rundir.work_of(out_dir), out_dir)
    checkpoint, manifest = _resume_point(job, resume, place, check_live=owner)
    _check_before_creating(job, int(manifest["step"]) if manifest is not None else 0)
    if place is None:  # a local workflow job ends with its snakemake; under srun the pid is another node's
        lifecycle.die_with_env_process()
    work = rundir.work_of(out_dir)
    if not owner:  # rank 0 prepares the directory before the rendezvous
        run_stage(cast(Rank, place), job, work, checkpoint, init_method="env://", manifest=manifest)
        return None
    rundir.plan(out_dir, checkpoint, overwrite)  # every check before the lock file is created
    with runlock.hold(work, out_dir) as lock:  # one run per DIR.partial, for the life of the run
        run = rundir.plan(out_dir, checkpoint, overwrite)  # again, now that no other run can change it
        if place is not None:
            return _published(run, run_stage(place, job, work, checkpoint, init_method="env://", run=run,
                                             manifest=manifest))
        rundir.prepare(run, checkpoint, manifest)
        return _published(run, _run_locally(job, run, checkpoint, lock))


def _run_locally(job: Job, run: RunDir, checkpoint: Path | None, lock: runlock.HeldLock) -> dict[str, Any] | None:
    """The stages on this machine (in this process for one stage); the metrics once outputs are written."""
    try:
        with lifecycle.signals_raise():  # SIGTERM/SIGINT: stop the stages, publish nothing, exit 128 + signal
            if job.plan.num_stages * job.config.replicas == 1:
                return run_stage(Rank(0, 1, 0), job, run.work, checkpoint, init_method=None)
            _spawn_stages(job, run.work, checkpoint, lock)
    except (UsageError, StageFailed):
        rundir.discard_if_empty(run)  # nothing to resume (bad input found late, a stage or the forkserver died)
        raise
    except OSError as exc:
        if exc.errno == errno.ENOSPC and not exc.filename:  # a full disk under a file object: name the run
            raise OSError(errno.ENOSPC, exc.strerror, str(run.work)) from None
        raise
    return cast(dict[str, Any], json.loads((run.work / "metrics.json").read_text(encoding="utf-8")))


def _spawn_stages(job: Job, work_dir: Path, checkpoint: Path | None, lock: runlock.HeldLock) -> None:
    """One process per stage; they die with this one (see :mod:`naspipe.runtime.lifecycle`) and hold
    the run's lock with it, so that the directory stays locked until the last stage has stopped. Each
    receives the job (pickled, :meth:`Job.__reduce__`): no stage builds the space or partitions again."""
    stages = job.plan.num_stages * job.config.replicas  # processes: one per (stage, replica)
    _start_forkserver()
    with tempfile.TemporaryDirectory(prefix="naspipe-rdzv-") as rdzv:
        init = f"file://{Path(rdzv) / 'store'}"
        line, writer = lifecycle.lifeline([rdzv, mp_util.get_temp_dir()])
        context = None
        try:
            logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)  # we say what stopped, once
            context = mp.start_processes(_spawned, args=(job, work_dir, checkpoint, init, line, lock),
                                         nprocs=stages, join=False, start_method=START_METHOD)
            while not context.join():
                pass
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            pids = [p.pid for p in context.processes] if context is not None else []
            raise StageFailed(_failure(exc, pids, work_dir)) from None
        except (EOFError, ConnectionError):  # the forkserver's socket closed while it was asked for a stage
            raise StageFailed("the multiprocessing forkserver died while it started the stages; no stage trained "
                              "and nothing was kept; run the command again") from None
        finally:
            if context is not None:
                lifecycle.stop(p.pid for p in context.processes)
            lifecycle.cut(writer, stages)
            line.reader.close()
            _account_stages(context)


def _account_stages(context: Any) -> None:
    """Bring the stages' CPU time into this process's ``RUSAGE_CHILDREN``, where ``time(1)`` reads it.

    The stages are the forkserver's children: it reaps them (and reports their exit status: the
    joins below wait for that), then stops when told and is reaped here (:func:`lifecycle.stop_forkserver`).
    Without ``context`` the start itself was interrupted (say Ctrl-C while the forkserver imports torch):
    a stage already forked is stopped by its lifeline, and the forkserver is killed rather than waited for.
    """
    if context is None:
        lifecycle.stop_forkserver(grace_s=0.0)
        return
    for process in context.processes:
        process.join(lifecycle.STOP_GRACE_S)
    lifecycle.stop_forkserver()


def _failure(exc: mp.ProcessRaisedException | mp.ProcessExitedException, pids: list[int], work_dir: Path) -> str:
    """What died: a stage (its traceback is above) or the forkserver the stages were forked from."""
    code = getattr(exc, "exit_code", None)
    if code == NO_SPACE_EXIT:
        return f"stage {exc.error_index}: {no_space(work_dir)}"
    if code == RUN_DIR_GONE_EXIT:
        return str(RunDirGone(work_dir))
    server = getattr(getattr(mp_forkserver, "_forkserver", None), "_forkserver_pid", None)
    if code == 255 and (any(lifecycle.alive(p) for p in pids) or (server is not None and not lifecycle.alive(server))):
        # multiprocessing reports 255 for every stage when it loses the forkserver's status pipe
        return (f"the multiprocessing forkserver (pid {server}) that started the stages died, so their exit "
                "status is unknown; no stage reported a failure; the stages were stopped")
    return (f"stage {exc.error_index} failed (exit code {code if code is not None else '?'}); "
            "its traceback is above; the other stages were stopped")


def _check_before_creating(job: Job, start: int) -> None:
    """What the stages would otherwise find only after ``DIR.partial`` exists: threads, device, the dataset."""
    config = job.config
    check_threads(config.threads)
    check_parts(config.micro_batches, job.space.options.get("batch_size"))
    memory.check_cache_budgets(job)
    if config.device == "cuda" and not torch.cuda.is_available():
        raise UsageError(NO_CUDA)
    if job.space.options.get("data") is not None and start < config.steps:
        # opens the dataset: a missing or malformed one is a one-line error. On a copy of the space, whose
        # reader stays here: the job goes to the stages whole, without an open dataset.
        copy.copy(job.space).batch(start, config.seed)


def _check_stage_count(job: Job, place: Rank | None) -> None:
    """The one place where the three counts of stages meet: the config's ``stages`` (which the plan's
    partition was built for), ``plan.num_stages`` (what every stage reads from then on) and the launcher's
    world size under torchrun/srun."""
    config, stages = job.config, job.plan.num_stages
    if stages != config.stages:  # a partition file is checked against the config: this cannot happen
        raise UsageError(f"--stages {config.stages} but the partition has {stages} stages")
    if place is not None and place.world != stages * config.replicas:
        processes = stages * config.replicas
        layout = f" x --replicas {config.replicas} ({processes} processes)" if config.replicas > 1 else ""
        raise UsageError(f"--stages {config.stages}{layout} but the launcher started {place.world} processes")


def _check_memory(config: Config, space: SearchSpace, place: Rank | None) -> None:
    """Refuse layers that cannot fit (one line naming the layer) before any is built."""
    try:
        device = stage_device(config, place.local_rank if place else 0)
    except UsageError:
        return  # no CUDA: _check_before_creating says so, after a live run is named
    memory.check_fits(space, config.optimizer, device, all_stages_here=place is None)


def _published(run: RunDir | None, metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    if run is None or metrics is None:
        return None
    rundir.publish(run)
    return metrics


def _resume_point(job: Job, resume: Path | None, place: Rank | None,
                  check_live: bool) -> tuple[Path | None, dict[str, Any] | None]:
    """The checkpoint to resume and its manifest, fully verified (hashes, logs, every setting the numbers depend
    on: the config and what it resolves to here, the device and the partition) before any stage starts.

    ``check_live``: refuse a checkpoint of a run still training (not on the ranks that do not own the lock:
    under torchrun their rank 0 may already hold it)."""
    if resume is None:
        return None, None
    config = job.config
    checkpoint = ckpt.find_checkpoint(resume)
    if check_live:
        rundir.refuse_live_source(checkpoint)
    manifest = ckpt.read_manifest(checkpoint)
    device = stage_device(config, place.local_rank if place else 0)
    ckpt.check_compatible(manifest, config.to_dict(), checkpoint, ckpt.run_settings(job.partition, device.type))
    check_bulk_boundary(config, "the resumed step", manifest["step"])
    ckpt.verify(checkpoint, manifest, list(range(job.space.structure.num_layers)))
    rundir.check_logs(checkpoint, manifest)
    return checkpoint, manifest


def _spawned(index: int, job: Job, work_dir: Path, checkpoint: Path | None, init: str,
             line: lifecycle.Lifeline, lock: runlock.HeldLock) -> None:
    line.watch(index)  # ``lock`` is only held: its descriptor closes when this stage ends
    # Ctrl-C reaches the whole foreground group: the launcher stops the stages itself (SIGTERM),
    # so a stage ignores its own SIGINT instead of dying with a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        world = job.plan.num_stages * job.config.replicas
        run_stage(Rank(index, world, index), job, work_dir, checkpoint, init_method=init)
    except RunDirGone:
        os._exit(RUN_DIR_GONE_EXIT)  # no traceback: the launcher reports it in one line
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            os._exit(NO_SPACE_EXIT)  # no traceback: the launcher reports it in one line
        _fail(index)
    except BaseException:
        _fail(index)


def _fail(index: int) -> NoReturn:
    """Print this stage's traceback and leave at once: the parent sees the exit code and terminates
    the other stages, which may be blocked in a receive from this one."""
    sys.stderr.write(f"naspipe: stage {index} failed:\n{traceback.format_exc()}")
    sys.stderr.flush()
    os._exit(1)


def run_stage(place: Rank, job: Job, work_dir: Path, checkpoint: Path | None, init_method: str | None,
              run: RunDir | None = None, manifest: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """One stage of ``job`` in this process; ``work_dir`` is the run's working directory (``DIR.partial``).

    Under torchrun/srun, ``run`` is given on rank 0 only, which prepares the directory before
    the rendezvous (the other ranks wait there for it).
    """
    config = job.config
    numerics.check_loaded(config.numerics)  # a stage, forked or launched by torchrun/srun: its kernels are the run's
    device = pick_device(config, place.local_rank)
    make_deterministic(config.threads, device, config.precision)
    faults.install_from_env()
    if run is not None:
        rundir.prepare(run, checkpoint, manifest)
    control = None
    if place.world > 1:
        backend = transport_backend(device.type, _local_world(place), _visible_gpus(device))
        dist.init_process_group(backend, init_method=init_method, rank=place.rank, world_size=place.world,
                                timeout=timedelta(seconds=config.timeout_s))
        control = dist.new_group(backend="gloo", timeout=timedelta(seconds=config.timeout_s))
    try:
        with stops_if_removed(work_dir):
            return _run_worker(place, job, device, work_dir, checkpoint, control)
    finally:
        if place.world > 1:
            dist.destroy_process_group()


def _run_worker(place: Rank, job: Job, device: torch.device, work_dir: Path, checkpoint: Path | None,
                control: Any) -> dict[str, Any] | None:
    wire = torch.device("cpu") if dist.is_initialized() and dist.get_backend() == "gloo" else device
    grid = ProcessGrid(job.plan.num_stages, job.config.replicas)
    stage, replica = grid.place(place.rank)
    transport: Transport = (DistTransport(grid, place.rank, device, job.config.timeout_s, wire)
                            if place.world > 1 else LocalTransport())
    barrier = (lambda: dist.barrier(group=control)) if control is not None else (lambda: None)
    start_step = int(ckpt.read_manifest(checkpoint)["step"]) if checkpoint is not None else 0
    bar = _progress_bar(job, start_step) if place.rank == place.world - 1 else None  # the last replica: the loss
    worker = StageWorker(job, stage, transport, device, work_dir, checkpoint, barrier,
                         progress=bar.step if bar is not None else None, replica=replica)
    barrier()  # every stage is built: start the clocks together
    worker.recorder.t0 = time.perf_counter()
    start = time.perf_counter()
    report = worker.run()
    if bar is not None:
        bar.close()
    reports = _gather(report, place, control)
    if place.rank != 0:
        return None
    return write_outputs(job, replica_zero(reports, grid), work_dir, time.perf_counter() - start, str(device))


def replica_zero(reports: list[StageReport], grid: ProcessGrid) -> list[StageReport]:
    """Replica 0's reports (ranks 0 .. D-1), which the outputs are written from, once every other replica of each
    stage is found to hold the same layer digests: replicas that drifted apart are a bug, never a result."""
    for rank in range(grid.stages, grid.size):
        stage, replica = grid.place(rank)
        ours, theirs = reports[stage].layer_hashes, reports[rank].layer_hashes
        if ours != theirs:
            differ = sorted(lid for lid in ours.keys() | theirs.keys() if ours.get(lid) != theirs.get(lid))
            raise RuntimeError(f"stage {stage}: replica {replica} ends with other bits than replica 0 in layers "
                               f"{differ[:8]}{' ...' if len(differ) > 8 else ''}; the run is not published")
    return reports[: grid.stages]


def _gather(report: StageReport, place: Rank, control: Any) -> list[StageReport]:
    """Every stage's report on rank 0, as JSON bytes in uint8 tensors (``gather_object`` unpickled
    whatever a peer sent: code execution for anyone who can reach the rendezvous)."""
    if place.world == 1:
        return [report]
    data = torch.frombuffer(bytearray(report.to_bytes()), dtype=torch.uint8)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(place.world)]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64), group=control)
    longest = int(max(int(s.item()) for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: data.numel()] = data
    gathered = [torch.zeros(longest, dtype=torch.uint8) for _ in range(place.world)] if place.rank == 0 else None
    dist.gather(padded, gathered, dst=0, group=control)
    if gathered is None:
        return []
    return [StageReport.from_bytes(bytes(t[: int(n.item())].numpy())) for t, n in zip(gathered, sizes, strict=True)]


def transport_backend(device_type: str, local_world: int, gpus: int) -> str:
    """nccl when every stage on this node has a GPU of its own, gloo otherwise.

    NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so a run with more stages
    on a node than it sees GPUs (e.g. ``--stages 4`` on a one-GPU workstation) keeps its
    stages on the GPUs, shared, and sends messages over gloo through host memory.
    """
    if device_type != "cuda" or local_world > gpus:
        return "gloo"
    return "nccl"


def _local_world(place: Rank) -> int:
    """How many stages run on this node: torchrun says so; SLURM's count may read '4(x2)'."""
    env = os.environ
    if "LOCAL_WORLD_SIZE" in env:
        return int(env["LOCAL_WORLD_SIZE"])
    per_node = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if per_node:
        return int(per_node.split("(")[0].split(",")[0])
    return place.world


def _visible_gpus(device: torch.device) -> int:
    return torch.cuda.device_count() if device.type == "cuda" else 0


def stage_device(config: Config, local_rank: int) -> torch.device:
    """The device of the stage with ``local_rank`` on this node, decided here once (the memory check asks it
    before any stage starts; each stage selects it with :func:`pick_device`)."""
    if config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise UsageError(NO_CUDA)
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def pick_device(config: Config, local_rank: int) -> torch.device:
    """:func:`stage_device`, selected as this process's current CUDA device."""
    device = stage_device(config, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


class _Progress:
    def __init__(self, total: int, initial: int, batch: int) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, initial=initial, unit="subnet", dynamic_ncols=True)
        self._batch, self._t0, self._done = batch, time.perf_counter(), 0

    def step(self, subnet: int, loss: float) -> None:
        self._done += 1
        rate = self._done * self._batch / max(time.perf_counter() - self._t0, 1e-9)
        self._bar.set_postfix(loss=f"{loss:.4f}", samples_s=f"{rate:.1f}", refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()


def _progress_bar(job: Job, initial: int) -> _Progress | None:
    from naspipe.data.progress import bar_wanted

    if not bar_wanted(job.config.progress):
        return None
    return _Progress(job.config.steps, initial, int(job.space.options.get("batch_size", 1)))
