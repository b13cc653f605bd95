"""Device and host memory per system, as the runtime allocates it, and the largest batch that fits.

Per stage, bytes are a fixed part plus a part linear in the batch (activations); the largest
batch (paper Table 2 "Batch") is where the fullest stage meets the device's usable memory.
Every term follows what the runtime holds (fp32 tensors, 4 bytes per element):

- **Parameters.** Resident systems (gpipe, pipedream, sequential, csp without the cache)
  build every layer of the stage on the device: all candidates of its home positions and,
  with per-subnet partitions, every layer a subnet of the run places there (a mirrored copy,
  :func:`naspipe.sim.layout.stage_layer_ids`; the runtime's ``Job.stage_layer_ids``).
- **Optimizer state** (:func:`optimizer_slots`): per trainable parameter, Adam's two
  moments, SGD's momentum buffer (none with ``momentum: 0``: torch keeps no state then).
  The runtime creates it at a layer's first update and never frees it, so this model
  charges it for *every* trainable layer the stage holds: the steady state of a run long
  enough to have trained each candidate once (the paper trains thousands of subnets; a
  short run holds less). Frozen shared layers have none. Windowed shared layers
  (csp, sequential) add their older version and the window's gradient sum
  (:func:`window_bytes`), outside the cache budget.
- **Gradients** exist from a subnet's backward to its update and are freed by it
  (``zero_grad(set_to_none=True)``); only the layers the subnet used have them. csp and
  sequential apply the update right after the backward (one subnet's share); pipedream too,
  but it keeps one weight version per subnet in flight (``D - k`` on stage ``k``); gpipe
  keeps each subnet's gradients apart until the bulk's flush (``bulk_size`` shares).
- **csp with** ``cache.enabled``: the device holds the context cache's budget (parameters,
  gradients and optimizer state of cached layers move together) and the host holds every
  layer of the stage with its optimizer state. vpipe holds the running task's layers (at
  the update with gradient and state) and parks the bulk's stashed gradients on the host.
- **Activations** per sample: with recomputation a subnet in flight keeps only its stage
  input, plus one subnet's full activations during a backward (with ``m`` micro-batches one
  part's, and with a split backward those of the parts whose weight task waits:
  :func:`live_parts`); without it (pipedream) each
  subnet in flight keeps its full activations. In flight on a stage: ``max_inflight`` for
  csp, ``bulk_size`` for the bulk-synchronous systems, ``D - k`` for pipedream, 1 for
  sequential.

One subnet's share of a stage (its trainable parameters there, its activations, its stage
input) is measured on the run's own subnets: the mean where several subnets' copies add up
(stashes, inputs in flight), the largest where one subnet's alone matters (the backward in
progress, the update). Left out: CUDA context and allocator slack (the hardware spec's
``device_reserved``), batch-norm buffers, mirror messages in flight, and the host copies the
resident systems build before moving layers to the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from naspipe.config import OptimizerConfig
from naspipe.floats import plain_sum
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies import POLICIES, PolicyOptions
from naspipe.sim.costs import FLOAT_BYTES, CostModel
from naspipe.sim.layout import stage_layer_sets
from naspipe.sim.tables import BLOCK, CostTable


def optimizer_slots(optimizer: OptimizerConfig) -> int:
    """Tensors of optimizer state per parameter, as torch keeps them (:attr:`OptimizerConfig.state_slots`)."""
    return optimizer.state_slots


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
    per_host: dict[int, float]  # host -> bytes (hosts holding nothing are absent)


@dataclass(frozen=True)
class StageHolding:
    """What one stage holds, in bytes, before any system's rule is applied."""

    params: float  # every layer the stage builds (parameters, frozen ones included)
    trainable: float  # of which trainable (they get gradients and optimizer state)
    share_mean: float  # one subnet's trainable parameters here: mean over the run's subnets
    share_max: float  # ... and the largest
    acts_mean: float  # one subnet's activations per sample (kept without recomputation)
    acts_max: float
    input_mean: float  # the stage input per sample (kept with recomputation)


def stage_holdings(plan: PipelinePlan, costs: CostModel, subnets: int) -> list[StageHolding]:
    """Per stage, the bytes the memory rules combine; shares measured on the first ``subnets`` subnets.

    At scale this is 6.4 M (subnet, stage) slices (64 x 100,000), so each subnet's bytes per
    stage come from :func:`_subnet_bytes` (numpy, a block of subnets at a time, each stage's
    layers added in order as ``sum`` adds them) and only the per-stage means and maxima are
    Python: ``sum`` and ``max`` over the same values as the per-subnet walk they replace."""
    structure = plan.structure
    n = max(1, subnets)
    shares, acts, inputs, empty = _subnet_bytes(plan, costs, n)
    out = []
    for k, layers in enumerate(stage_layer_sets(plan, n)):
        share = shares[:, k].tolist()
        act = acts[:, k].tolist()
        share_max = max(share)
        out.append(StageHolding(
            params=sum(costs.param_bytes(lid) for lid in layers),
            trainable=sum(costs.param_bytes(lid) for lid in layers if structure.is_trainable(lid)),
            # a subnet with no trainable layer here shares 0 (sum of nothing); max keeps the first of equals
            share_mean=plain_sum(share) / n, share_max=0 if share_max == 0 and empty[k] else share_max,
            acts_mean=plain_sum(act) / n, acts_max=max(act),
            input_mean=plain_sum(inputs[:, k].tolist()) / n if k else 0.0))
    return out


def _subnet_bytes(plan: PipelinePlan, costs: CostModel,
                  n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[bool]]:
    """``(n, D)`` arrays of each subnet's trainable parameter bytes, activation bytes and stage input
    bytes per stage, and per stage whether subnet 0 has no trainable layer there."""
    structure, d = plan.structure, plan.num_stages
    table = CostTable(plan, costs, recompute=False, keep=1)  # only its layer rows are used
    trainable = np.array([structure.is_trainable(lid) for lid in range(structure.num_layers)], dtype=bool)
    param_bytes = np.where(trainable, [costs.param_bytes(lid) for lid in range(structure.num_layers)], 0.0)
    act_bytes = np.array([info.act_bytes for info in costs.info], dtype=np.float64)
    out_bytes = np.array([info.out_bytes for info in costs.info], dtype=np.float64)
    shares, acts, inputs = np.empty((n, d)), np.empty((n, d)), np.zeros((n, d))
    empty: list[bool] = []
    for index in range((n + BLOCK - 1) // BLOCK):
        first = index * BLOCK
        rows = min(BLOCK, n - first)
        layers = table.layer_matrix(index)[:rows]
        stage_of, last_position = table.stage_of(index)
        if stage_of is not None:
            stage_of, last_position = stage_of[:rows], last_position[:rows]
        shares[first:first + rows] = table.stage_sums(param_bytes, layers, stage_of)
        acts[first:first + rows] = table.stage_sums(act_bytes, layers, stage_of)
        if d > 1:  # the layer before each stage's first position
            boundary = (layers[:, last_position[:-1]] if last_position.ndim == 1
                        else np.take_along_axis(layers, last_position[:, :-1], axis=1))
            inputs[first:first + rows, 1:] = out_bytes[boundary]
        if not index:
            empty = (table.stage_sums(trainable.astype(np.int64), layers[:1], None if stage_of is None
                                      else stage_of[:1])[0] == 0).tolist()
    return shares, acts, inputs, empty


def in_flight(system: str, stage: int, num_stages: int, options: PolicyOptions) -> int:
    """Subnets between their forward and their backward on ``stage`` at most (stashes, inputs kept)."""
    policy = POLICIES[system]
    if policy.stash_weights:  # pipedream's 1F1B
        return num_stages - stage
    if policy.bulk_synchronous:  # one bulk in flight
        return options.bulk_size
    return 1 if system == "sequential" else options.max_inflight


def memory_report(plan: PipelinePlan, system: str, costs: CostModel, options: PolicyOptions, recompute: bool,
                  subnets: int, cache_budgets: list[int] | None = None) -> MemoryReport:
    """``cache_budgets``: per stage, the context cache's bytes (csp with ``cache.enabled``)."""
    hw = costs.hardware
    states = costs.optimizer_states
    policy = POLICIES[system]
    stages = []
    host: dict[int, float] = {}
    for k, h in enumerate(stage_holdings(plan, costs, subnets)):
        flight = in_flight(system, k, plan.num_stages, options)
        if cache_budgets is not None:
            fixed = float(cache_budgets[k])
        elif policy.swap_parameters:  # the running task's layers; at its update with gradient and state
            fixed = h.share_max * (2 + states) + (h.params - h.trainable)
        else:
            fixed = h.params + states * h.trainable + _gradients(system, flight, h)
        if plan.windowed and policy.windowed_shared:  # outside the cache budget, as in the runtime
            fixed += window_bytes(plan, costs, k)
        if cache_budgets is not None or policy.swap_parameters:
            stash = flight * h.share_mean if policy.swap_parameters else 0.0  # vpipe parks gradients on the host
            host[hw.host_of(k)] = host.get(hw.host_of(k), 0.0) + h.params + states * h.trainable + stash
        keeps_all = not recompute
        per_sample = flight * h.acts_mean if keeps_all else flight * h.input_mean + h.acts_max * live_parts(options)
        stages.append(StageMemory(fixed, per_sample))
    worst = max(s.at(costs.batch) for s in stages)
    return MemoryReport(worst, max(host.values(), default=0.0), max_batch(stages, hw.usable_device_memory),
                        tuple(stages), host)


def live_parts(options: PolicyOptions) -> float:
    """With recomputation, the share of one subnet's activations alive at once on a stage: the part being
    backpropagated (the whole batch without micro-batches, ``1/m`` of it with ``m`` parts), and with a split
    backward the parts whose weight task waits (at most ``m``: :class:`~naspipe.scheduling.policies.micro.MicroCSP`
    runs one before more wait). The last stage keeps a part's activations from its forward to its backward,
    which follows at once: no more than that."""
    m = options.micro_batches
    return (1 + options.parts_here) / m if options.split_backward else 1 / m  # a replica runs m / R of the parts


def _gradients(system: str, flight: int, h: StageHolding) -> float:
    """Gradients (and pipedream's weight stash) of the subnets between backward and update."""
    policy = POLICIES[system]
    if policy.stash_weights:  # update right after the backward; one stashed weight version per subnet in flight
        return h.share_max + flight * h.share_mean
    if policy.stash_gradients:  # each subnet's gradients kept apart until the bulk's flush
        return flight * h.share_mean
    return h.share_max  # csp, sequential: the update follows the backward at once


def window_bytes(plan: PipelinePlan, costs: CostModel, stage: int) -> float:
    """The window rule's own memory on ``stage`` (:mod:`naspipe.scheduling.windows`): per windowed
    shared layer there, its older version and the window's gradient sum (the newest version is
    the layer's parameters, already counted)."""
    return 2.0 * sum(costs.param_bytes(lid) for lid in plan.windowed if plan.stage_of_layer(lid) == stage)


def max_batch(stages: list[StageMemory], budget: float) -> int:
    fits = [int((budget - s.fixed) // s.per_sample) if s.per_sample > 0 else 1 << 30 for s in stages]
    return max(0, min(fits))


__all__ = ["FLOAT_BYTES", "MemoryReport", "StageHolding", "StageMemory", "memory_report", "optimizer_slots"]
