"""Run one stage's share of a subnet's forward, backward and update, layer by layer.

A stage's share of a subnet is one autograd graph whose leaves are the stage's inputs
(detached; stage 0's batch as is), and its backward is one ``torch.autograd.backward`` from
the stage's outputs, handing the inputs' gradients to the previous stage. The arithmetic,
including the order in which the gradients of a tensor used by several consumers are
summed, is the same whether the subnet runs on one stage or sixteen: the autograd engine
runs a graph's nodes in decreasing creation order (the pending node created last is always
ready, as everything that feeds it was created after it), so every sum accumulates its terms
from the last consumer to the first, exactly as when the graph is cut at a stage boundary
and the later stage's sum arrives as one term first. That is what makes pipeline results
bitwise equal to the sequential reference (and to a plain PyTorch loop: see
``benchmarks/bench_overhead.py``). Cutting at every layer instead, as this module once did,
gives the same bits for 7-10% more CPU time (an engine run and leaf gradients per layer).

With recomputation on, the forward keeps only the stage input and runs under ``no_grad``;
the backward re-runs the forward with gradients (``ctx.recompute=True``). Without it, the
forward keeps its units for the backward.

Two stashes serve the baseline systems (both off for sequential and CSP, whose path is
unchanged):

- *Gradient stash* (``stash_gradients``; GPipe, VPipe, PipeDream): after a subnet's
  backward, each layer's gradients are moved out of ``.grad`` into a per-(subnet, layer)
  store, and its update puts them back and steps. So two subnets of a bulk that share a
  layer get two optimizer steps, each with its own gradient, never a sum in ``.grad``.
  VPipe parks the stored gradients in host memory in between (:meth:`StageExecutor.move_stash`).
- *Weight stash* (``stash_weights``; PipeDream, needs recomputation off): the forward runs
  each layer through :func:`torch.func.functional_call` on detached clones of its trainable
  parameters taken at forward time, so the backward differentiates the version the forward
  read even if the live parameters were updated meanwhile; the gradients (w.r.t. the
  clones) go to the gradient stash and are applied to the live parameters at the update.

Windowed shared layers (``windows``, :mod:`naspipe.runtime.windowed`; every system keeps the
window rule, the baselines with their gradient stash beside it) run the same way as weight
stashing, through :func:`torch.func.functional_call`, but on the version the window rule says
the subnet reads; their gradients wait for the subnet's update, which adds them to the
window's sum in subnet order (never to the gradient stash).

Each layer's forward (and recompute) and the loss run under ``precision`` (a context factory from
:func:`naspipe.determinism.layer_precision`: bf16 autocast, or nothing), entered per layer so that
the arithmetic does not depend on where the stage boundaries fall.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import torch
from torch.func import functional_call

from naspipe.runtime.optim import LayerOptimizers
from naspipe.runtime.windowed import SharedWindows
from naspipe.space.base import Batch, LayerContext, SearchSpace, SpaceLayer, State

Grads = tuple[torch.Tensor | None, ...]
ParamGrads = list[torch.Tensor | None]


@dataclass
class _Unit:
    """One stage task's autograd graph: its input leaves, its outputs (the loss on the last stage)."""

    inputs: State
    outputs: State
    layers: tuple[int, ...] = ()
    weights: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)  # layer -> the version it read
    grads: Grads = ()  # a split backward: the gradients of ``outputs``, kept from B for W (runtime.micro)


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
        *,
        is_first: bool = False,
        stash_gradients: bool = False,
        stash_weights: bool = False,
        windows: SharedWindows | None = None,
        precision: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    ) -> None:
        if stash_weights and (recompute or not stash_gradients):
            raise ValueError("weight stashing needs recomputation off and the gradient stash on")
        self.space, self.layers, self.optimizers = space, layers, optimizers
        self.seed, self.recompute, self.is_first, self.is_last = seed, recompute, is_first, is_last
        self.batch_of, self.cast = batch_of, precision
        self.stash_gradients, self.stash_weights = stash_gradients, stash_weights
        self._inputs: dict[int, State] = {}
        self._batches: dict[int, Batch] = {}  # subnet -> its batch, from first use to its last use here
        self._units: dict[int, _Unit] = {}
        self._grads: dict[int, dict[int, ParamGrads]] = {}  # subnet -> layer -> its gradients
        self.windows = windows
        self._window_grads: dict[int, dict[int, ParamGrads]] = {}  # subnet -> windowed layer -> its gradients
        self.last_recompute_s = 0.0  # time the last backward spent re-running the forward

    def forward(self, subnet: int, layer_ids: tuple[int, ...], inputs: State) -> State | torch.Tensor:
        """Returns the stage output, or the loss on the last stage."""
        if self.recompute:
            self._inputs[subnet] = inputs
            with torch.no_grad():
                state = inputs
                for layer in layer_ids:
                    ctx = self._ctx(subnet, layer, recompute=False)
                    with self.cast():
                        if self.windows is not None and layer in self.windows:
                            state = functional_call(self.layers[layer], self.windows.read(layer, subnet), (state, ctx))
                        else:
                            state = self.layers[layer](state, ctx)
                if not self.is_last:
                    self._batches.pop(subnet, None)  # stage 0's inputs are kept in ``_inputs``
                    return state
                return self._loss(subnet, state)  # the recomputed backward reads the targets again
        unit = self._forward_graph(subnet, layer_ids, inputs, recompute=False)
        self._batches.pop(subnet, None)
        self._units[subnet] = unit
        outputs = tuple(t.detach() for t in unit.outputs)
        return outputs[0] if self.is_last else outputs

    def backward(self, subnet: int, layer_ids: tuple[int, ...], grads: Grads | None) -> Grads:
        """Backpropagate ``grads`` (None on the last stage: start from the loss); returns input grads."""
        if self.recompute:
            start = time.perf_counter()
            unit = self._forward_graph(subnet, layer_ids, self._inputs.pop(subnet), recompute=True)
            self._batches.pop(subnet, None)
            self.last_recompute_s = time.perf_counter() - start
        else:
            unit = self._units.pop(subnet)
        if self.is_last:
            grads = (torch.ones_like(unit.outputs[0]),)
        if grads is None:
            raise RuntimeError(f"subnet {subnet}: a stage other than the last needs the gradient of its output")
        grads = _backprop(unit, grads)
        if self.windows is not None:  # before the stash: the window's gradients wait for the window's sum
            self._keep_window_grads(subnet, unit)
        if self.stash_gradients:
            self._stash(subnet, unit)
        return grads

    def update(self, layer_ids: tuple[int, ...], subnet: int | None = None) -> None:
        """Step the layers' optimizers; with the gradient stash, with ``subnet``'s gradients."""
        if self.stash_gradients and subnet is None:
            raise ValueError("with the gradient stash, update needs the subnet whose gradients to apply")
        if self.windows is None and not self.stash_gradients:  # sequential, CSP: each layer's own step
            for layer in layer_ids:
                self.optimizers.step(layer)
            return
        stashed = self._grads.pop(subnet, {}) if self.stash_gradients and subnet is not None else {}
        windowed = self._window_grads.pop(subnet, {}) if subnet is not None else {}
        for layer in layer_ids:
            if self.windows is not None and layer in self.windows:
                if subnet is None or layer not in windowed:
                    raise RuntimeError(f"shared layer {layer}: update of subnet {subnet} without its gradients")
                self.windows.accumulate(layer, subnet, windowed.pop(layer))
                continue
            if layer in stashed:
                for param, grad in zip(_trainable(self.layers[layer]), stashed.pop(layer), strict=True):
                    param.grad = grad
            self.optimizers.step(layer)
        if stashed:
            raise RuntimeError(f"subnet {subnet}: gradients of layers {sorted(stashed)} were stashed but not applied")

    def keep_window_grads(self, subnet: int, grads: dict[int, ParamGrads]) -> None:
        """Windowed layers' gradients that ``subnet``'s update adds to their windows (micro-batches: the
        parts' sums, :mod:`naspipe.runtime.micro`)."""
        self._window_grads[subnet] = grads

    def move_stash(self, subnet: int, move: Callable[[ParamGrads], ParamGrads]) -> None:
        """Replace each of ``subnet``'s stashed layer gradients by ``move(grads)`` (to host and back)."""
        stash = self._grads.get(subnet, {})
        for layer, grads in stash.items():
            stash[layer] = move(grads)

    def _keep_window_grads(self, subnet: int, unit: _Unit) -> None:
        """The windowed layers' gradients (taken on the version read) until the subnet's update."""
        assert self.windows is not None
        kept = {layer: [w.grad for w in weights.values()] for layer, weights in unit.weights.items()
                if layer in self.windows}
        if kept:
            self._window_grads[subnet] = kept

    def _stash(self, subnet: int, unit: _Unit) -> None:
        """Move each layer's gradients out of ``.grad`` (or off the stashed weights) into the store."""
        stash: dict[int, ParamGrads] = {}
        for layer in unit.layers:
            if layer in self._window_grads.get(subnet, {}):
                continue  # a windowed shared layer: its gradients wait for the window's sum, not the stash
            weights = unit.weights.get(layer)
            if weights is not None:
                grads: ParamGrads = [w.grad for w in weights.values()]
            else:
                params = _trainable(self.layers[layer])
                grads = [p.grad for p in params]
                for p in params:
                    p.grad = None
            if grads:
                stash[layer] = grads
        self._grads[subnet] = stash

    def _forward_graph(self, subnet: int, layer_ids: tuple[int, ...], inputs: State, recompute: bool) -> _Unit:
        """The stage's layers as one autograd graph from detached input leaves; on the last stage its
        output is the loss. Stashed and windowed weights are leaves of their own (``unit.weights``)."""
        # The batch itself needs no gradient: stage 0's first layer gets it as is.
        leaves = inputs if self.is_first else tuple(_leaf(t) for t in inputs)
        unit = _Unit(leaves, leaves, layer_ids)
        state = leaves
        with torch.enable_grad():
            if self.windows is None and not self.stash_weights:  # sequential, CSP: the plain loop's calls
                layers, seed, cast = self.layers, self.seed, self.cast
                for layer in layer_ids:
                    with cast():
                        state = layers[layer](state, LayerContext(seed, subnet, layer, recompute))
                unit.outputs = (self._loss(subnet, state),) if self.is_last else state
                return unit
            for layer in layer_ids:
                module, ctx = self.layers[layer], self._ctx(subnet, layer, recompute)
                if self.windows is not None and layer in self.windows:
                    weights = {n: t.detach().requires_grad_() for n, t in self.windows.read(layer, subnet).items()}
                elif self.stash_weights:
                    weights = {n: p.detach().clone().requires_grad_() for n, p in _named_trainable(module)}
                else:
                    with self.cast():
                        state = module(state, ctx)
                    continue
                unit.weights[layer] = weights
                with self.cast():
                    state = functional_call(module, weights, (state, ctx))
            unit.outputs = (self._loss(subnet, state),) if self.is_last else state
        return unit

    def batch(self, subnet: int) -> Batch:
        """``subnet``'s batch, built once per stage: stage 0 feeds its inputs, the last stage's loss reads
        its targets in the forward and again in a recomputed backward. Batch ``i`` is a pure function of
        (seed, i) and nothing writes to it, so the copy kept from its first use to its last here is the
        very data a rebuild would give; building it is not free (0.3-0.7 ms, 3-10% of a step on the tiny
        spaces). The memo belongs to this executor, so a resumed run starts with an empty one.

        (It was withdrawn once for moving pipedream's bits on cv.tiny at D=2 and 4 in the default
        workflow. It did not: those two workflow runs partitioned from two timed profiles, which drew
        other stage boundaries there (4|4 against 3|5, 2|1|2|3 against 2|1|1|4), and pipedream's
        asynchronous updates depend on the stage layout. ``benchmarks/run_golden.py``, with partitions
        that do not depend on timing, finds every system at 1, 2 and 4 stages unchanged with the memo.)"""
        batch = self._batches.get(subnet)
        if batch is None:
            batch = self._batches[subnet] = self.batch_of(subnet)
        return batch

    def _loss(self, subnet: int, state: State) -> torch.Tensor:
        batch = self.batch(subnet)
        device = state[0].device
        batch = Batch(batch.inputs, tuple(t.to(device) for t in batch.targets))
        with self.cast():
            return self.space.loss(state, batch)

    def _ctx(self, subnet: int, layer: int, recompute: bool) -> LayerContext:
        return LayerContext(self.seed, subnet, layer, recompute)


def _named_trainable(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters the layer's optimizer steps, in its order."""
    return [(n, p) for n, p in module.named_parameters() if p.requires_grad]


def _trainable(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for _, p in _named_trainable(module)]


def _backprop(unit: _Unit, grads: Grads) -> Grads:
    """One engine run over the stage's graph; the gradients of its input leaves."""
    pairs = [(o, g) for o, g in zip(unit.outputs, grads, strict=False) if g is not None and o.requires_grad]
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    return tuple(t.grad if t.requires_grad else None for t in unit.inputs)
