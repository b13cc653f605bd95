"""A stage's layers built on every core, with the very bits a one-by-one build gives.

Each layer's parameters come from a generator seeded by (seed, layer id) alone
(:meth:`naspipe.space.base.SearchSpace.build_layer`), so which process builds it does not
matter. Building is the random fills of torch's default initialisers, about 65 M parameters/s on
one core: 80 s before nlp.c3's first step (5.4 B parameters), over 5 minutes for nlp.c0. When a
stage's layers are large, worker processes (forked from a server that imported torch once) build
them, each layer in its own worker call with the stage's intra-op threads and deterministic
switches, and save each with ``torch.save`` to a file in a private temporary directory, which this
process maps (``torch.load(mmap=True)``, copy-on-write) and unlinks: the bytes are the built ones,
and this process copies nothing (handing them over through a pipe cost it about 3 CPU s per GB,
more than building them). Small stages (the tiny spaces, the tests) build here, as before: a worker
pool costs more than it saves below :data:`PARALLEL_MIN_PARAMS`.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from naspipe.runplan.job import Job
from naspipe.space.base import SearchSpace, SpaceLayer

PARALLEL_MIN_PARAMS = 20_000_000  # a third of a second of building on one core
_WORKER: dict[str, SearchSpace] = {}  # the space a build worker builds from


def build_stage(job: Job, stage: int) -> dict[int, SpaceLayer]:
    """The stage's layers on the CPU, its processes sharing this machine's cores with the other stages'."""
    config = job.config
    workers = max(1, default_workers(config.threads) // job.plan.num_stages)
    return build_layers(job.space, job.stage_layer_ids(stage), config.seed, config.threads, workers)


def build_layers(space: SearchSpace, layer_ids: Iterable[int], seed: int, threads: int = 1,
                 workers: int | None = None, min_params: int = PARALLEL_MIN_PARAMS) -> dict[int, SpaceLayer]:
    """Layers ``layer_ids`` of ``space`` from (seed, id), on the CPU; ``workers`` processes (default: this
    process's cores over its intra-op ``threads``) when they hold at least ``min_params`` parameters."""
    ids = list(layer_ids)
    count = default_workers(threads) if workers is None else workers
    params = sum(space.layer_tensors(lid)[0] for lid in ids)
    if count <= 1 or len(ids) < 2 or params < min_params:
        return {lid: space.build_layer(lid, seed) for lid in ids}
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["naspipe.runtime.build"])  # torch imported once (if no server runs yet)
    with tempfile.TemporaryDirectory(prefix="naspipe-build-") as directory, \
            ProcessPoolExecutor(min(count, len(ids)), mp_context=context, initializer=_start_worker,
                                initargs=(space, threads)) as pool:
        paths = pool.map(_build, ids, [seed] * len(ids), [directory] * len(ids))
        return {lid: _load(Path(path)) for lid, path in zip(ids, paths, strict=True)}


def default_workers(threads: int = 1) -> int:
    """Processes that keep this process's cores busy, each with ``threads`` intra-op threads."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, threads))


def _start_worker(space: SearchSpace, threads: int) -> None:
    """A build worker computes as the stage would: its intra-op threads and deterministic kernels."""
    from naspipe.determinism import make_deterministic

    make_deterministic(threads, torch.device("cpu"))
    _WORKER["space"] = space


def _build(layer: int, seed: int, directory: str) -> str:
    path = os.path.join(directory, f"layer-{layer}.pt")
    torch.save(_WORKER["space"].build_layer(layer, seed), path)
    return path


def _load(path: Path) -> SpaceLayer:
    """The layer a worker saved, mapped copy-on-write (training writes never reach the file), then unlinked."""
    # weights_only=False: a whole module, written a moment ago by this run's own build worker
    module: SpaceLayer = torch.load(path, weights_only=False, mmap=True)
    path.unlink()
    return module
