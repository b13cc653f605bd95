"""The layout for a GPU count: which D stages x R replicas per stage a run should use on G GPUs (issue 42).

Stages stop paying before a cluster runs out of GPUs: a space's blocks cannot be cut finer than a block, and a
space with a heavy first block (the image spaces' stem resolution) leaves stage 0 the bottleneck at any D.
Replicas share each subnet's parts out over R processes per stage instead, bit for bit the same training
(:mod:`naspipe.runtime.exchange`), at the price of the gradients' exchange before each update. Which mix is
fastest depends on the space, the batch and the links, so the choice is measured: every layout ``D x R = G``
the run allows (R divides ``micro_batches``, D at most the subnet's positions, R > 1 only for csp) is simulated
with the run's own settings, and the one with the highest throughput that fits wins (when none fits, the
fastest, marked as not fitting). ``--batch`` applies to each layout as it would alone (``max`` then gives each
layout the largest batch it fits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from naspipe.config import Config
from naspipe.config.validation import REPLICA_SYSTEMS
from naspipe.errors import UsageError


@dataclass(frozen=True)
class LayoutChoice:
    config: Config  # the run's config with the chosen stages and replicas
    record: dict[str, Any]  # metrics.json's layout_search: every layout tried, its throughput and fit


def layouts(config: Config, gpus: int, positions: int) -> list[tuple[int, int]]:
    """The ``(stages, replicas)`` pairs a run of ``config`` may use on ``gpus`` GPUs, fewest stages first."""
    if gpus < 1:
        raise UsageError(f"--gpus {gpus}: must be >= 1")
    replicated = config.system in REPLICA_SYSTEMS
    found = [(gpus // r, r) for r in range(gpus, 0, -1) if gpus % r == 0 and gpus // r <= positions
             and (r == 1 or (replicated and config.micro_batches % r == 0))]
    if not found:
        raise UsageError(f"--gpus {gpus}: no layout fits {config.system} with micro_batches {config.micro_batches} "
                         f"on a subnet of {positions} positions (stages x replicas = {gpus}, replicas dividing "
                         f"micro_batches{'' if replicated else ', replicas only for csp'})")
    return found


def choose_layout(config: Config, gpus: int, positions: int,
                  simulate: Callable[[Config], dict[str, Any]]) -> LayoutChoice:
    """The layout of ``gpus`` GPUs with the highest simulated throughput that fits (module docstring)."""
    tried = []
    for stages, replicas in layouts(config, gpus, positions):
        metrics = simulate(replace(config, stages=stages, replicas=replicas))
        tried.append({"stages": stages, "replicas": replicas, "batch_size": metrics["batch_size"],
                      "throughput_samples_s": metrics["throughput_samples_s"], "fits": bool(metrics["fits"])})
    fitting = [t for t in tried if t["fits"]] or tried
    best = max(fitting, key=lambda t: t["throughput_samples_s"])
    chosen = replace(config, stages=best["stages"], replicas=best["replicas"])
    return LayoutChoice(chosen, {"gpus": gpus, "stages": best["stages"], "replicas": best["replicas"],
                                 "fits": best["fits"], "tried": tried})
