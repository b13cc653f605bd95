"""One simulated run, end to end: events, memory, lower bound, and the runtime's metrics schema.

:func:`simulate_run` is pure (no torch, no files): the CLI builds its inputs from a config
and writes what it returns. The metrics carry every key of the runtime's ``metrics.json``
(:func:`naspipe.runtime.outputs.compute_metrics`) with simulated seconds, so reports and
tools read a simulated run like a measured one; ``simulated`` says which it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from naspipe import systems
from naspipe.config import CacheConfig
from naspipe.floats import plain_sum
from naspipe.runplan import rules
from naspipe.runplan.rules import effective_recompute
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies import PolicyOptions
from naspipe.sim.beside import Beside
from naspipe.sim.bound import longest_path, lower_bound, micro_longest_path
from naspipe.sim.costs import CostModel, at_batch, with_weight_stash
from naspipe.sim.engine import CATEGORIES, ResidencyFactory, SimResult, simulate
from naspipe.sim.memory import MemoryReport, memory_report
from naspipe.sim.residency import (
    ContextCache,
    Residency,
    Resident,
    SynchronousSwap,
    cache_sizes,
)


@dataclass(frozen=True)
class SimSetup:
    plan: PipelinePlan
    system: str
    subnets: int
    options: PolicyOptions
    costs: CostModel
    recompute: bool  # as configured; a policy that forces it (pipedream) wins
    trace_max_events: int = 0
    batch: int | str = "config"  # "config": the space's batch_size; "max": the largest that fits; or a number
    # ("best" is resolved before a setup is simulated: naspipe.sim.batch)
    cache: CacheConfig | None = None  # the context manager's settings (``cache.*`` config keys)
    trace_subnets: int = 0  # trace only the first and last N subnets (0: every subnet)


# tasks (subnets x stages) from which the memory model and the bound run in a child beside the engine: below
# it the fork costs more than it saves
BESIDE_TASKS = 500_000

__all__ = ["SimSetup", "cache_budgets", "effective_recompute", "memory_fit", "residency_for", "simulate_run",
           "uses_cache"]


def uses_cache(setup: SimSetup) -> bool:
    """Whether the run models the context manager (the run plan's rule, :func:`naspipe.runplan.rules.uses_cache`)."""
    return rules.uses_cache(setup.system, setup.cache)


def cache_budgets(setup: SimSetup) -> list[int]:
    """Each stage's device cache in bytes, by the run plan's rule (the runtime's worker applies the same one),
    with each layer's bytes from the cost model's shapes."""
    assert setup.cache is not None
    return rules.cache_budgets(setup.plan, setup.subnets, cache_sizes(setup.costs, setup.plan.structure), setup.cache,
                               setup.options.micro_batched)


def residency_for(setup: SimSetup, budgets: list[int] | None = None) -> ResidencyFactory:
    """The copy model of each stage: the context cache, VPipe's synchronous swap, or resident parameters.
    ``budgets``: the cache's per stage when the caller has them already (:func:`cache_budgets` otherwise)."""
    structure = setup.plan.structure
    if uses_cache(setup):
        assert setup.cache is not None
        sizes, horizon = cache_sizes(setup.costs, structure), setup.cache.horizon
        if budgets is None:
            budgets = cache_budgets(setup)
        return lambda stage, policy: ContextCache(policy, setup.plan, setup.costs, budgets[stage], sizes, horizon,
                                                  setup.subnets)
    if systems.get(setup.system).swap_parameters:
        trainable = frozenset(lid for lid in range(structure.num_layers) if structure.is_trainable(lid))
        return lambda stage, policy: SynchronousSwap(setup.costs, trainable)
    return lambda stage, policy: Resident()


def simulate_run(setup: SimSetup, on_admit: Callable[[int], None] | None = None
                 ) -> tuple[dict[str, Any], list[dict[str, object]]]:
    """``(metrics, trace events)`` of one simulated run (at the largest batch that fits, if asked);
    ``on_admit``: the engine's progress callback (:func:`naspipe.sim.engine.simulate`)."""
    setup, recompute, budgets = _priced(setup)
    if setup.batch != "config":
        fit = _memory(setup, recompute, budgets).max_batch
        batch = int(setup.batch) if setup.batch != "max" else max_mode_batch(fit, setup.options)
        setup = replace(setup, costs=at_batch(setup.costs, batch), batch="config")
    side = _path_and_memory(setup, recompute, budgets)
    aside = Beside(side) if setup.subnets * setup.plan.num_stages >= BESIDE_TASKS else None
    try:
        result = simulate(setup.plan, setup.system, setup.subnets, setup.options, setup.costs, recompute,
                     residency_for(setup, budgets), trace_max_events=setup.trace_max_events,
                     trace_subnets=setup.trace_subnets, on_admit=on_admit)
    except BaseException:
        if aside is not None:
            aside.cancel()
        raise
    path, memory = aside.result() if aside is not None else side()
    return _metrics(setup, result, path, memory, recompute), _trace(setup, result)


def max_mode_batch(fit: int, options: PolicyOptions) -> int:
    """The batch ``--batch max`` runs at, given the largest that fits: that one, but at least a sample per part
    (a run that fits fewer still runs and says so: ``fits`` false); ``--batch best`` falls back to it."""
    return max(fit, options.micro_batches)


def memory_fit(setup: SimSetup) -> MemoryReport:
    """The memory model of ``setup`` as :func:`simulate_run` prices it (the system's weight stash, its effective
    recompute, the cache's budgets over all its subnets) at the cost model's batch: its ``max_batch`` is the batch
    ``--batch max`` runs at, which ``--batch best`` asks of every setting it weighs."""
    return _memory(*_priced(setup))


def _priced(setup: SimSetup) -> tuple[SimSetup, bool, list[int] | None]:
    """``setup`` with the system's weight stash in its costs, its effective recompute, and the cache's budgets
    (computed once: layer bytes do not depend on the batch; None without the cache)."""
    recompute = effective_recompute(setup.system, setup.recompute)
    setup = replace(setup, costs=with_weight_stash(setup.costs, systems.get(setup.system).stash_weights))
    return setup, recompute, cache_budgets(setup) if uses_cache(setup) else None


def _memory(setup: SimSetup, recompute: bool, budgets: list[int] | None) -> MemoryReport:
    """The memory model of a :func:`_priced` setup."""
    return memory_report(setup.plan, setup.system, setup.costs, setup.options, recompute, setup.subnets, budgets)


def _path_and_memory(setup: SimSetup, recompute: bool,
                     budgets: list[int] | None) -> Callable[[], tuple[float, MemoryReport]]:
    """The lower bound's longest path and the memory model: independent of the engine's events."""
    def compute() -> tuple[float, MemoryReport]:
        if setup.options.micro_batched:
            path = micro_longest_path(setup.plan, setup.system, setup.subnets, setup.costs, recompute, setup.options)
        else:
            path = longest_path(setup.plan, setup.system, setup.subnets, setup.costs, recompute,
                                shared_window=setup.options.shared_window)
        return path, _memory(setup, recompute, budgets)
    return compute


def _metrics(setup: SimSetup, result: SimResult, path: float, memory: MemoryReport, recompute: bool) -> dict[str, Any]:
    d, n = setup.plan.num_stages, result.subnets
    # the runtime's measured span also holds its start-up and shutdown (hardware.run_overhead_s)
    makespan = (result.makespan + (0.0 if setup.costs.free_io else setup.costs.hardware.run_overhead_s)) or 1e-9
    busy = [s.busy for s in result.stages]
    busy_total = plain_sum(busy)  # left to right: the same bits on every Python (naspipe.floats)
    bound = lower_bound(max(busy, default=0.0), path)
    for s in result.stages:
        s.seconds["waiting"] = max(makespan - s.busy, 0.0)
    copies: list[Residency] = result.residency
    hits = sum(c.stats.hits for c in copies)
    uses = hits + sum(c.stats.misses for c in copies)
    return {
        "system": setup.system,
        **_schedule(setup.options),
        "space": setup.plan.structure.name,
        "stages": d,
        "partition": str(setup.plan.partition),
        "device": f"simulated:{setup.costs.hardware.name}",
        "subnets": n,
        "wall_s": makespan,
        "makespan_s": makespan,
        "throughput_samples_s": n * setup.costs.batch / makespan,
        "subnets_per_hour": n / makespan * 3600.0,
        "bubble_ratio": 1.0 - busy_total / (d * makespan),
        "bubble_ratio_per_stage": [1.0 - b / makespan for b in busy],
        "exec_s": busy_total / max(n, 1),
        "seconds_per_stage": [{c: s.seconds[c] for c in CATEGORIES} for s in result.stages],
        "swap_bytes": plain_sum(c.stats.in_bytes + c.stats.out_bytes for c in copies),
        "swap_wait_s": plain_sum(c.stats.wait_s for c in copies),
        "swap_fetches": float(sum(c.stats.misses for c in copies)),
        "mirror_bytes": plain_sum(s.mirror_bytes for s in result.stages),
        "recompute_effective": recompute,
        "stage_extra": [{"tasks": s.tasks, "sent_bytes": s.sent_bytes, "mirror_bytes": s.mirror_bytes,
                         "trace_dropped": s.trace_dropped,
                         "recompute": float(recompute), "cache_hit_rate": c.stats.hit_rate}
                        for s, c in zip(result.stages, copies, strict=True)],
        "simulated": True,
        "hardware": setup.costs.hardware.name,
        "costs": setup.costs.name,
        "cache_enabled": uses_cache(setup),
        "batch_size": setup.costs.batch,
        "lower_bound_s": bound,
        "efficiency": bound / makespan,
        "cache_hit_rate": hits / uses if uses else 1.0,
        "max_batch": memory.max_batch,
        "device_bytes": memory.device_bytes,
        "host_bytes": memory.host_bytes,
        "fits": memory.device_bytes <= setup.costs.hardware.usable_device_memory
        and memory.host_bytes <= setup.costs.hardware.host_memory,
    }


def _schedule(options: PolicyOptions) -> dict[str, Any]:
    """A micro-batched schedule's settings (none for the paper's schedule, whose metrics stay as they were)."""
    if not options.micro_batched:
        return {}
    replicas = {"replicas": options.replicas} if options.replicas > 1 else {}
    return {"micro_batches": options.micro_batches, "split_backward": options.split_backward,
            "priority": options.priority, **replicas}


def _trace(setup: SimSetup, result: SimResult) -> list[dict[str, object]]:
    events: list[dict[str, object]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"naspipe {setup.system} (simulated)"}}
    ]
    for k in range(setup.plan.num_stages):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": k, "args": {"name": f"stage {k}"}})
    for s in result.stages:
        events.extend(s.trace)
    return events
