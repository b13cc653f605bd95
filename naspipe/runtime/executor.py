"""Run one stage's share of a subnet's forward, backward and update, layer by layer.

Every layer runs as its own autograd unit: its inputs are detached leaves, and the backward
walks the units in reverse, handing each unit's input gradients to the previous one. So a
stage boundary is just another unit boundary, and the arithmetic (including the order in
which gradients of a tensor used by several consumers are summed) is the same whether the
subnet runs on one stage or sixteen. That is what makes pipeline results bitwise equal to
the sequential reference.

With recomputation on, the forward keeps only the stage input and runs under ``no_grad``;
the backward re-runs the forward with gradients (``ctx.recompute=True``). Without it, the
forward keeps its units for the backward.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from naspipe.space.base import Batch, LayerContext, SearchSpace, SpaceLayer, State
from naspipe.runtime.optim import LayerOptimizers

Grads = tuple[torch.Tensor | None, ...]


@dataclass
class _Unit:
    inputs: State
    outputs: State


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().requires_grad_(t.is_floating_point())


class StageExecutor:
    def __init__(
        self,
        space: SearchSpace,
        layers: dict[int, SpaceLayer],
        optimizers: LayerOptimizers,
        seed: int,
        recompute: bool,
        is_last: bool,
        batch_of: Callable[[int], Batch],
    ) -> None:
        self.space, self.layers, self.optimizers = space, layers, optimizers
        self.seed, self.recompute, self.is_last = seed, recompute, is_last
        self.batch_of = batch_of
        self._inputs: dict[int, State] = {}
        self._units: dict[int, list[_Unit]] = {}
        self.last_recompute_s = 0.0  # time the last backward spent re-running the forward

    def forward(self, subnet: int, layer_ids: tuple[int, ...], inputs: State) -> State | torch.Tensor:
        """Returns the stage output, or the loss on the last stage."""
        if self.recompute:
            self._inputs[subnet] = inputs
            with torch.no_grad():
                state = inputs
                for layer in layer_ids:
                    state = self.layers[layer](state, self._ctx(subnet, layer, recompute=False))
                return self._loss(subnet, state) if self.is_last else state
        units = self._forward_units(subnet, layer_ids, inputs, recompute=False)
        self._units[subnet] = units
        outputs = tuple(t.detach() for t in units[-1].outputs)
        return outputs[0] if self.is_last else outputs

    def backward(self, subnet: int, layer_ids: tuple[int, ...], grads: Grads | None) -> Grads:
        """Backpropagate ``grads`` (None on the last stage: start from the loss); returns input grads."""
        if self.recompute:
            start = time.perf_counter()
            units = self._forward_units(subnet, layer_ids, self._inputs.pop(subnet), recompute=True)
            self.last_recompute_s = time.perf_counter() - start
        else:
            units = self._units.pop(subnet)
        if self.is_last:
            grads = (torch.ones_like(units[-1].outputs[0]),)
        assert grads is not None, "a stage other than the last needs the gradient of its output"
        for unit in reversed(units):
            grads = _backprop(unit, grads)
        return grads

    def update(self, layer_ids: tuple[int, ...]) -> None:
        for layer in layer_ids:
            self.optimizers.step(layer)

    def drop(self, subnet: int) -> None:
        """Forget what a subnet stashed (used when a run stops early)."""
        self._inputs.pop(subnet, None)
        self._units.pop(subnet, None)

    def _forward_units(self, subnet: int, layer_ids: tuple[int, ...], inputs: State, recompute: bool) -> list[_Unit]:
        """Each layer as its own autograd unit; on the last stage the loss is one more unit."""
        units: list[_Unit] = []
        state = inputs
        with torch.enable_grad():
            for layer in layer_ids:
                leaves = tuple(_leaf(t) for t in state)
                state = self.layers[layer](leaves, self._ctx(subnet, layer, recompute))
                units.append(_Unit(leaves, state))
            if self.is_last:
                leaves = tuple(_leaf(t) for t in state)
                units.append(_Unit(leaves, (self._loss(subnet, leaves),)))
        return units

    def _loss(self, subnet: int, state: State) -> torch.Tensor:
        batch = self.batch_of(subnet)
        device = state[0].device
        batch = Batch(batch.inputs, tuple(t.to(device) for t in batch.targets))
        return self.space.loss(state, batch)

    def _ctx(self, subnet: int, layer: int, recompute: bool) -> LayerContext:
        return LayerContext(self.seed, subnet, layer, recompute)


def _backprop(unit: _Unit, grads: Grads) -> Grads:
    pairs = [(o, g) for o, g in zip(unit.outputs, grads) if g is not None and o.requires_grad]
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    return tuple(t.grad if t.requires_grad else None for t in unit.inputs)
