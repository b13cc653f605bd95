"""What each training job needs on the configuration's hardware, from the simulator (asked, not copied).

Memory is the simulator's model (:func:`naspipe.sim.memory.memory_report`, the rules the runtime
allocates by) at the run's own batch and over all its subnets; time is the simulator's makespan of
the first :data:`SAMPLE` subnets scaled to the run's steps (steady state; the pipeline's fill and
drain are counted once per sample, so this errs long). The partition is the one a profile on that
hardware would give (``--partition-by costs``) unless the config partitions by parameter counts.
Seeds change neither, so one estimate serves every seed. Estimates are kept in a cache file keyed
by their inputs and the source of the modules they come from, so a second dry run is instant.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

SAMPLE = 64  # subnets simulated for a job's time
PACKAGE = Path(__file__).resolve().parents[1]
MODEL_SOURCES = ("sim", "space", "scheduling", "config", "partition.py", "context", "runplan", "systems.py")


@dataclass(frozen=True)
class Estimate:
    """One job on one hardware spec: bytes at the run's batch, predicted seconds, model size."""

    device_bytes: float  # the fullest device
    host_bytes: float  # the fullest host (the host store of the context manager / vpipe's swap)
    device_limit: float  # usable bytes per device on the hardware
    host_limit: float
    seconds: float  # predicted training time of the whole run
    step_seconds: float  # seconds per subnet at the pipeline's rate
    exec_s: float  # one subnet's compute with bubbles removed (forward, backward, update)
    params: int  # every parameter of the supernet
    trainable: int  # of which trainable (they carry optimizer state)
    batch: int
    max_batch: int
    state_slots: int  # optimizer tensors per trainable parameter (a checkpoint holds them)

    @property
    def checkpoint_bytes(self) -> float:
        """One checkpoint of the whole supernet: every parameter and its optimizer state, fp32."""
        return 4.0 * (self.params + self.state_slots * self.trainable)

    @property
    def fits(self) -> bool:
        return self.device_bytes <= self.device_limit and self.host_bytes <= self.host_limit


def estimate(space: str, system: str, stages: int, steps: int, sets: tuple[str, ...], hardware: str,
             partition_by: str = "costs", cpu: bool = False) -> Estimate:
    """The job's estimate (from the cache file when its inputs and the model's source are unchanged).

    ``cpu``: every stage runs on this one host, so the stages' bytes add up against its memory.
    """
    key = _key(space, system, stages, steps, sets, hardware, partition_by, cpu)
    path = _cache_dir() / f"{key}.json"
    try:
        return Estimate(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    result = _simulate(space, system, stages, steps, sets, hardware, partition_by, cpu)
    try:
        from naspipe.fsutil import atomic_write_json

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, asdict(result))
    except OSError:
        pass  # an unwritable cache only costs time
    return result


def _simulate(space: str, system: str, stages: int, steps: int, sets: tuple[str, ...], hardware: str,
              partition_by: str, cpu: bool) -> Estimate:
    from naspipe.config import load_config
    from naspipe.runplan.job import check_bulk_boundary
    from naspipe.scheduling.policies import POLICIES
    from naspipe.sim.costs import with_weight_stash
    from naspipe.sim.hardware import load_hardware
    from naspipe.sim.memory import memory_report
    from naspipe.sim.run import cache_budgets, effective_recompute, simulate_run, uses_cache
    from naspipe.sim.setup import build_setup

    flags = {"space.name": space, "system": system, "stages": stages, "steps": steps}
    config = load_config(None, [s for s in sets if not s.startswith(("device=", "threads="))], flags)
    if config.checkpoint_every:
        check_bulk_boundary(config, "checkpoint_every", config.checkpoint_every)
    spec = load_hardware(hardware)
    setup = replace(build_setup(config, spec, "analytic", partition_by), trace_max_events=0)
    recompute = effective_recompute(system, setup.recompute)
    costs = with_weight_stash(setup.costs, POLICIES[system].stash_weights)
    memory = memory_report(setup.plan, system, costs, setup.options, recompute, setup.subnets,
                           cache_budgets(setup) if uses_cache(setup) else None)
    sample = min(steps, SAMPLE)
    metrics, _ = simulate_run(replace(setup, subnets=sample))
    structure = setup.plan.structure
    params = [costs.param_bytes(lid) / 4 for lid in range(structure.num_layers)]
    device = memory.device_bytes
    if cpu:  # one host holds every stage
        device = sum(s.at(costs.batch) for s in memory.per_stage) + memory.host_bytes
    return Estimate(
        device_bytes=device, host_bytes=memory.host_bytes,
        device_limit=spec.host_memory if cpu else spec.usable_device_memory, host_limit=spec.host_memory,
        seconds=metrics["makespan_s"] * steps / sample, step_seconds=metrics["makespan_s"] / sample,
        exec_s=metrics["exec_s"], params=int(sum(params)),
        trainable=int(sum(p for lid, p in enumerate(params) if structure.is_trainable(lid))),
        batch=int(costs.batch), max_batch=int(memory.max_batch), state_slots=config.optimizer.state_slots)


def _key(*inputs: Any) -> str:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode())
    digest.update(_model_fingerprint().encode())
    spec = Path(str(inputs[5]))
    from_dir = PACKAGE.parent / "config" / "hardware" / f"{inputs[5]}.yaml"
    for candidate in (spec, from_dir):
        if candidate.is_file():
            digest.update(candidate.read_bytes())
    return digest.hexdigest()[:32]


_FINGERPRINT: list[str] = []


def _model_fingerprint() -> str:
    """A hash of the modules the estimate comes from: a changed memory model or engine is a new key."""
    if not _FINGERPRINT:
        digest = hashlib.sha256()
        for name in MODEL_SOURCES:
            root = PACKAGE / name
            for file in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
                digest.update(file.read_bytes())
        _FINGERPRINT.append(digest.hexdigest())
    return _FINGERPRINT[0]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "naspipe" / "plan"
