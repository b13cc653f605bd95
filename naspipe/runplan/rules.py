"""The run's rules that both executors apply: effective recompute, the device cache's use, budget and horizon.

Each used to be written twice, once in the runtime's stage worker and once in the simulator,
and the two copies had to be kept equal by hand for the simulator to model the runtime. They
are decided here once, from the system's capabilities (:mod:`naspipe.systems`) and the
config's ``cache.*`` keys, and handed to whichever executor runs the plan.
"""

from __future__ import annotations

from collections.abc import Mapping

from naspipe import systems
from naspipe.config import CacheConfig
from naspipe.context.cache import CacheCapacityError
from naspipe.scheduling.plan import PipelinePlan


def effective_recompute(system: str, configured: bool) -> bool:
    """Whether a run of ``system`` recomputes activations: as configured, unless its policy forces a setting
    (PipeDream keeps its activations whatever the config says)."""
    forced = systems.get(system).recompute
    return configured if forced is None else forced


def uses_cache(system: str, cache: CacheConfig | None) -> bool:
    """Whether the run drives the context manager: the cache is enabled and the system may use it (the config
    check refuses the other systems for training; the simulator's scenarios skip it for them)."""
    return cache is not None and cache.enabled and systems.get(system).uses_cache


def prefetch_horizon(system: str, horizon: int) -> int:
    """How many predicted tasks the cache prefetches for: ``cache.horizon``, or none for a system without the
    predictor (it fetches on demand)."""
    return horizon if systems.get(system).predictor else 0


def cache_budget(plan: PipelinePlan, stage: int, subnets: int, sizes: Mapping[int, int], cache: CacheConfig,
                 share: int | None = None, micro_batched: bool = False) -> int:
    """Stage ``stage``'s device cache in bytes: ``cache.budget`` as bytes, or ``Kx``: K times the largest share of
    the stage among the run's ``subnets`` (what its largest task needs; with per-subnet partitions the stage also
    holds layers it never runs, and a subnet's candidates are mostly smaller than the block's largest).

    A budget below one subnet's share is refused at the start (CacheCapacityError, a UsageError), not at the
    task that would not fit. ``sizes``: device bytes of each layer (parameters, gradients, optimizer state).
    ``share``: the stage's largest share when the caller has it (:func:`cache_budgets`).
    ``micro_batched``: the run's schedule is in parts, where a stage keeps one subnet's layers from its first
    backward part to its update while another subnet's parts run (``PolicyOptions.one_holder``): two shares.
    """
    share = max(1, plan.largest_share(stage, subnets, sizes) if share is None else share)
    budget = cache.budget_bytes(share)
    needed, whose = (2 * share, "two subnets' share") if micro_batched else (share, "one subnet's share")
    if budget < needed:
        used = {lid for y in range(subnets) for lid in plan.stage_layers(y, stage)}
        big = max(used, key=lambda lid: sizes[lid])
        why = "; a micro-batched stage holds one subnet's layers while another's parts run" if micro_batched else ""
        raise CacheCapacityError(
            f"config key 'cache.budget': {budget} bytes is below {whose} of stage {stage} "
            f"({needed} bytes; largest: layer {big}, {sizes[big]} bytes{why})")
    return budget


def cache_budgets(plan: PipelinePlan, subnets: int, sizes: Mapping[int, int], cache: CacheConfig,
                  micro_batched: bool = False) -> list[int]:
    """:func:`cache_budget` of every stage (the simulator sizes all stages at once).

    The largest shares in one pass over the subnets, each subnet's stages together: a pass per stage
    (:meth:`PipelinePlan.largest_share`) looks up every (subnet, stage) pair apart, past what the plan's
    and the stream's caches hold at scale (about a minute of setup at 64 stages x 100,000 subnets)."""
    shares = [0] * plan.num_stages
    for y in range(subnets):
        for k, share in enumerate(shares):
            here = sum([sizes[lid] for lid in plan.stage_layers(y, k)])
            if here > share:
                shares[k] = here
    return [cache_budget(plan, k, subnets, sizes, cache, shares[k], micro_batched) for k in range(plan.num_stages)]
