"""Device and host memory per system, and from it the largest batch that fits (paper Table 2 "Batch").

Per stage, bytes are a fixed part (parameters, gradients, optimizer state, stashes) plus a
part linear in the batch (activations); the largest batch is where the worst stage meets
the device's usable memory. What is resident follows each system's policy class flags:

- gpipe, pipedream, sequential: the stage's whole slice of the supernet (every candidate)
  with its optimizer state, plus the stashed gradients of the subnets in flight;
  pipedream also stashes one weight version per subnet in flight (``D - k`` on stage k).
- csp with ``cache.enabled`` (NASPipe's context manager): the device cache's budget (the
  runtime's ``cache.budget``: parameters, gradients and optimizer state move together); the
  supernet lives in host memory. Without the cache csp keeps its slice like gpipe.
- vpipe: only the running task's layers (swapped synchronously); the supernet on the host.

Activations: with recomputation a subnet in flight keeps only its stage input, and one
subnet's full activations exist during a backward; without it (pipedream) every subnet in
flight keeps its full activations.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from naspipe.profile.costs import position_layer_ids
from naspipe.scheduling.plan import PipelinePlan
from naspipe.sim.costs import FLOAT_BYTES, CostModel
from naspipe.space.structure import SpaceStructure


@dataclass(frozen=True)
class StageMemory:
    fixed: float  # bytes that do not depend on the batch
    per_sample: float  # bytes per sample of the batch

    def at(self, batch: int) -> float:
        return self.fixed + self.per_sample * batch


@dataclass(frozen=True)
class MemoryReport:
    device_bytes: float  # the fullest stage at the run's batch
    host_bytes: float  # the fullest host
    max_batch: int  # 0: not even one sample fits
    per_stage: tuple[StageMemory, ...]


def memory_report(plan: PipelinePlan, system: str, costs: CostModel, inflight: int, recompute: bool,
                  cache_budgets: list[int] | None = None) -> MemoryReport:
    """``cache_budgets``: per stage, the context cache's bytes (csp with ``cache.enabled``)."""
    structure, hw = plan.structure, costs.hardware
    states = costs.optimizer_states
    stages = []
    host: dict[int, float] = {}
    for k in range(plan.num_stages):
        positions = plan.partition.positions(k)
        slice_bytes = sum(costs.param_bytes(lid) for p in positions for lid in _layers_at(structure, p))
        share = sum(_mean(costs.param_bytes(lid) for lid in _layers_at(structure, p)) for p in positions)
        acts = sum(_mean(costs.info[lid].act_bytes for lid in _layers_at(structure, p)) for p in positions)
        stage_input = costs.info[_layers_at(structure, positions.start - 1)[0]].out_bytes if positions.start else 0.0
        in_flight = plan.num_stages - k if system == "pipedream" else (1 if system == "sequential" else inflight)
        if cache_budgets is not None:
            fixed = float(cache_budgets[k])
        elif system == "vpipe":
            fixed = share * (2 + states)
        else:
            fixed = slice_bytes * (1 + states) + in_flight * share
            if system == "pipedream":
                fixed += in_flight * share  # weight stash
        if cache_budgets is not None or system == "vpipe":
            host[hw.host_of(k)] = host.get(hw.host_of(k), 0.0) + slice_bytes * (2 + states)
        keeps_all = system == "pipedream" or not recompute
        per_sample = in_flight * (acts if keeps_all else stage_input) + (0.0 if keeps_all else acts)
        stages.append(StageMemory(fixed, per_sample))
    worst = max(s.at(costs.batch) for s in stages)
    return MemoryReport(worst, max(host.values(), default=0.0), max_batch(stages, hw.usable_device_memory),
                        tuple(stages))


def max_batch(stages: list[StageMemory], budget: float) -> int:
    fits = [int((budget - s.fixed) // s.per_sample) if s.per_sample > 0 else 1 << 30 for s in stages]
    return max(0, min(fits))


def _layers_at(structure: SpaceStructure, position: int) -> list[int]:
    return position_layer_ids(structure, position)


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


__all__ = ["FLOAT_BYTES", "MemoryReport", "StageMemory", "memory_report"]
