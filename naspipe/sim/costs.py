"""What each layer costs in simulated seconds and bytes: uniform, analytic or from a profile.

The simulator never builds a layer: a :class:`LayerInfo` per layer (parameter count,
forward multiply-accumulates, activation bytes, all per sample and from shapes alone) is
what the space gives it, and a cost model turns that into seconds for the four kinds of
work the runtime records (forward, recompute, backward, optimizer) and bytes for the
messages and copies. Three models:

- ``uniform``: every task costs the same whatever its layers (forward 1 s, backward 2 s
  including the recompute, update 0, messages and copies free): the textbook pipeline, in
  which GPipe's bubble is exactly ``(D-1)/(B+D-1)``; the validation baseline.
- ``analytic``: ``2 * MACs * batch / (FLOP/s x efficiency)`` for the forward, the recompute
  equal to the forward and the backward twice it (the usual 1:2 ratio of a dense layer);
  the optimizer is bound by memory bandwidth (it reads and writes the parameter, its
  gradient and its state once).
- a profile CSV (``naspipe profile``): measured forward and backward per op and position,
  as the partitioner reads them; the backward row includes the recompute when profiled
  with recomputation, so it is split into the two (profile a system that runs without
  recomputation with ``naspipe profile --no-recompute``: its forward builds the graph). The
  optimizer is priced analytically.

Beyond the kernels every forward and backward pays ``hardware.task_overhead_s`` and every
optimizer step ``hardware.update_overhead_s``, and a weight-stashing system
(PipeDream) pays per layer of a forward the stash: a clone of the parameters (read and
written once at memory bandwidth) plus ``hardware.stash_overhead_s`` for running the layer
on the clones (``torch.func.functional_call``), none of which a profile sees. Its backward
is ordinary autograd through the recorded graph (measured: no extra cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from naspipe.errors import UsageError
from naspipe.floats import plain_sum
from naspipe.profile.rows import ProfileRow
from naspipe.sim.hardware import Hardware
from naspipe.space.shape import FLOAT32_BYTES
from naspipe.space.structure import SpaceStructure

FLOAT_BYTES = FLOAT32_BYTES  # bytes of a parameter or activation element, as the spaces' shapes count them


@dataclass(frozen=True, slots=True)
class LayerInfo:
    """A layer as the simulator sees it: sizes from shapes, nothing allocated."""

    params: int  # parameter elements
    macs: float  # forward multiply-accumulates per sample
    out_bytes: float  # bytes per sample of the state this layer hands to the next position
    act_bytes: float  # bytes per sample the backward needs when the forward kept its activations


@dataclass(frozen=True, slots=True)
class LayerCost:
    forward_s: float
    recompute_s: float
    backward_s: float  # without the recompute
    update_s: float


@dataclass(frozen=True)
class CostModel:
    """Per-layer seconds plus what prices messages and copies; ``free_io`` zeroes the latter."""

    name: str
    layers: tuple[LayerCost, ...]
    info: tuple[LayerInfo, ...]
    hardware: Hardware
    batch: int
    optimizer_states: int
    per_task: bool = False  # uniform: a task costs the same whatever its layers
    free_io: bool = False  # uniform: messages and copies take no time
    stash_weights: bool = False  # forward and backward run on stashed parameter clones (PipeDream)

    def param_bytes(self, layer: int) -> float:
        return float(self.info[layer].params * FLOAT_BYTES)

    def boundary_bytes(self, layer: int) -> float:
        """Bytes of the activation (or, backwards, its gradient) after ``layer`` for one batch."""
        return self.info[layer].out_bytes * self.batch


def at_batch(costs: CostModel, batch: int) -> CostModel:
    """The same model at another batch: compute scales linearly, the optimizer does not."""
    if costs.per_task or batch == costs.batch:
        return replace(costs, batch=batch)
    f = batch / costs.batch
    layers = tuple(LayerCost(c.forward_s * f, c.recompute_s * f, c.backward_s * f, c.update_s) for c in costs.layers)
    return replace(costs, layers=layers, batch=batch)


def update_seconds(params: int, optimizer_states: int, hardware: Hardware) -> float:
    """Read parameter, gradient and state; write parameter and state: bandwidth bound."""
    return (3 + 2 * optimizer_states) * FLOAT_BYTES * params / hardware.memory_bandwidth


# ``states`` below: tensors of optimizer state per parameter, as torch keeps them
# (:attr:`naspipe.config.OptimizerConfig.state_slots`: 0 for SGD without momentum, 1 with it, 2 for Adam).
# It is one input: the update's memory traffic and the stage's bytes both follow it.


def uniform_costs(info: Sequence[LayerInfo], hardware: Hardware, batch: int, states: int) -> CostModel:
    layers = tuple(LayerCost(1.0, 1.0, 1.0, 0.0) for _ in info)
    return CostModel("uniform", layers, tuple(info), hardware, batch, states, per_task=True, free_io=True)


def analytic_costs(info: Sequence[LayerInfo], hardware: Hardware, batch: int, states: int) -> CostModel:
    layers = []
    for layer in info:
        forward = 2.0 * layer.macs * batch / hardware.effective_flops
        layers.append(LayerCost(forward, forward, 2.0 * forward, update_seconds(layer.params, states, hardware)))
    return CostModel("analytic", tuple(layers), tuple(info), hardware, batch, states)


def profile_costs(
    structure: SpaceStructure, rows: Sequence[ProfileRow], info: Sequence[LayerInfo], hardware: Hardware,
    batch: int, states: int, source: str,
) -> CostModel:
    """Costs from measured rows, matched by op name and position (as the partitioner matches them)."""
    by_op: dict[str, list[ProfileRow]] = {}
    for row in rows:
        by_op.setdefault(row.op, []).append(row)
    layers = []
    for lid in range(structure.num_layers):
        op, position = structure.op_name(lid), structure.position_of(lid)
        match = [r for r in by_op.get(op, ()) if position in r.position_set]
        if not match:
            raise UsageError(f"{source}: profile has no row for op {op!r} at position {position} "
                             f"of space {structure.name!r}")
        row = match[0]
        forward = row.fwd_ms / 1e3
        backward = row.bwd_ms / 1e3 - (forward if row.recompute else 0.0)
        layers.append(LayerCost(forward, forward, max(backward, 0.0),
                                update_seconds(info[lid].params, states, hardware)))
    return CostModel(f"profile:{source}", tuple(layers), tuple(info), hardware, batch, states)


def with_weight_stash(costs: CostModel, stash: bool) -> CostModel:
    """The model for a system that does (or does not) stash weights; uniform costs ignore it."""
    return costs if costs.per_task or costs.stash_weights == stash else replace(costs, stash_weights=stash)


def stash_s(costs: CostModel, layers: tuple[int, ...]) -> float:
    """Running ``layers`` on stashed clones: the clone at memory bandwidth plus a fixed cost per layer."""
    if not costs.stash_weights:
        return 0.0
    hw = costs.hardware
    return plain_sum(hw.stash_overhead_s + 2 * costs.param_bytes(lid) / hw.memory_bandwidth for lid in layers)


def forward_s(costs: CostModel, layers: tuple[int, ...]) -> float:
    if costs.per_task:
        return 1.0
    compute = plain_sum(costs.layers[lid].forward_s for lid in layers)
    return costs.hardware.task_overhead_s + stash_s(costs, layers) + compute


def update_s(costs: CostModel, trainable: tuple[int, ...]) -> float:
    if costs.per_task:
        return 0.0
    return costs.hardware.update_overhead_s + plain_sum(costs.layers[lid].update_s for lid in trainable)


def backward_s(costs: CostModel, layers: tuple[int, ...], recompute: bool) -> tuple[float, float]:
    """``(recompute, backward)`` seconds of a backward task; without recomputation the first is 0."""
    if costs.per_task:
        return (1.0, 1.0) if recompute else (0.0, 2.0)
    r = plain_sum(costs.layers[lid].recompute_s for lid in layers)
    b = costs.hardware.task_overhead_s + plain_sum(costs.layers[lid].backward_s for lid in layers)
    return (r, b) if recompute else (0.0, b)
