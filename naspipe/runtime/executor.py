"""Run one stage's share of a subnet's parts: forward, backward, weight gradient, update (F/B/W/U).

A subnet's batch is m parts (:mod:`naspipe.runtime.micro`; m = 1 is one part, the paper's
schedule). A stage's share of a part is one autograd graph whose leaves are the stage's inputs
(detached; stage 0's batch as is), and its backward is one ``torch.autograd.backward`` from the
stage's outputs, handing the inputs' gradients to the previous stage. The arithmetic, including
the order in which the gradients of a tensor used by several consumers are summed, is the same
whether the subnet runs on one stage or sixteen: the autograd engine runs a graph's nodes in
decreasing creation order (the pending node created last is always ready, as everything that
feeds it was created after it), so every sum accumulates its terms from the last consumer to the
first, exactly as when the graph is cut at a stage boundary and the later stage's sum arrives as
one term first. That is what makes pipeline results bitwise equal to the sequential reference
(and to a plain PyTorch loop: see ``benchmarks/bench_overhead.py``). Cutting at every layer
instead gives the same bits for 7-10% more CPU time (an engine run and leaf gradients per layer),
so only the split backward does it.

- **Recomputation.** With it on, the forward keeps only the stage input and runs under
  ``no_grad``; the backward re-runs the forward with gradients (``ctx.recompute=True``).
  Without it, the forward keeps its graph for the backward.
- **Gradients of parts.** Each part's backward adds its weight gradients to ``.grad`` in part
  order, part 0 first (the policy runs a subnet's gradient-summing tasks on a stage in part
  order); one optimizer step per layer at the update.
- **Split backward.** The part's graph is cut at every layer. ``B`` walks the layers from the
  last, computing only each layer's input gradient (:func:`torch.autograd.grad` with the graph
  kept), so the stage's input gradient leaves at once; it keeps each layer's output gradient.
  ``W`` then runs one engine pass per layer from those output gradients to the layer's own
  parameters (``inputs=``), which is the plain backward's arithmetic for them: a parameter used
  at two sites in a layer gets both contributions summed by the engine, once (unlike hook-based
  splits that re-accumulate per site, pytorch issue 180952).
- **Gradient stash** (``stash_gradients``; GPipe, VPipe, PipeDream): a part's gradients leave
  ``.grad`` for the subnet's own sum (:class:`~naspipe.runtime.stash.GradientSums`), and its
  update puts the sum back and steps. So two subnets of a bulk that share a layer get two
  optimizer steps, each with its own gradient, never a sum in ``.grad``. VPipe parks the sums
  in host memory in between (:mod:`naspipe.runtime.residency`).
- **Weight stash** (``stash_weights``; PipeDream, needs recomputation off): each layer runs
  through :func:`torch.func.functional_call` on detached clones of its trainable parameters
  taken at forward time, so the backward differentiates the version the forward read even if
  the live parameters were updated meanwhile; the gradients (w.r.t. the clones) go to the
  gradient stash and are applied to the live parameters at the update.
- **Windowed shared layers** (``windows``, :mod:`naspipe.runtime.windowed`): run the same way
  as weight stashing, on the version the window rule says the subnet reads; their gradients
  wait for the subnet's update (summed over its parts), which adds them to the window's sum in
  subnet order (never to the gradient stash).

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

from naspipe.runtime.micro import PartBatches
from naspipe.runtime.optim import LayerOptimizers
from naspipe.runtime.stash import GradientSums, ParamGrads
from naspipe.runtime.windowed import SharedWindows
from naspipe.space.base import Batch, LayerContext, SearchSpace, SpaceLayer, State

Grads = tuple[torch.Tensor | None, ...]
Part = tuple[int, int]  # (subnet, micro-batch)


@dataclass
class _Unit:
    """One autograd graph of a part's stage task (the stage's layers, or with a split one layer): its input
    leaves, its outputs (the loss on the last stage)."""

    inputs: State
    outputs: State
    layers: tuple[int, ...] = ()
    weights: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)  # layer -> the version it read
    grads: Grads = ()  # a split backward: the gradients of ``outputs``, kept from B for W


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().requires_grad_(t.is_floating_point())


class StageExecutor:
    """One stage's arithmetic for every schedule (module docstring); ``parts`` is m, ``split`` the split
    backward, ``recompute`` whether this stage's backward re-runs its forward."""

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
        parts: int = 1,
        parts_here: int | None = None,
        split: bool = False,
        stash_gradients: bool = False,
        stash_weights: bool = False,
        windows: SharedWindows | None = None,
        precision: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    ) -> None:
        if stash_weights and (recompute or not stash_gradients):
            raise ValueError("weight stashing needs recomputation off and the gradient stash on")
        self.space, self.layers, self.optimizers = space, layers, optimizers
        self.seed, self.recompute, self.is_first, self.is_last = seed, recompute, is_first, is_last
        self.parts, self.split, self.cast = parts, split, precision
        self.stash_gradients, self.stash_weights, self.windows = stash_gradients, stash_weights, windows
        self.batches = PartBatches(batch_of, parts, read_in_backward=is_last and recompute, uses=parts_here)
        self.stash = GradientSums()  # the gradient stash: subnet -> layer -> its parts' gradients
        self.window_sums = GradientSums()  # windowed shared layers' gradients (parts in order), until the update
        self._inputs: dict[Part, State] = {}  # recomputation: each part's stage input, until its backward
        self._graphs: dict[Part, list[_Unit]] = {}  # no recomputation: the forward's graph; split: B's, until W
        self.last_recompute_s = 0.0  # time the last backward spent re-running the forward

    # -- tasks --------------------------------------------------------------
    def forward(self, subnet: int, micro: int, layer_ids: tuple[int, ...], inputs: State) -> State | torch.Tensor:
        """The part's stage output, or on the last stage its (scaled) loss, detached."""
        part = (subnet, micro)
        if self.recompute:
            self._inputs[part] = inputs
            outputs = self._graph(part, layer_ids, inputs, recompute=False, grad=False)[-1].outputs
        else:
            graph = self._graphs[part] = self._graph(part, layer_ids, inputs, recompute=False, grad=True)
            outputs = tuple(t.detach() for t in graph[-1].outputs)
        self.batches.used(subnet, backward=False)
        return outputs[0] if self.is_last else outputs

    def backward(self, subnet: int, micro: int, layer_ids: tuple[int, ...], grads: Grads | None) -> Grads:
        """Backpropagate ``grads`` (None on the last stage: start from the loss); returns the input gradients.
        Unsplit, the part's weight gradients are summed too; split, they wait for :meth:`weight`."""
        part = (subnet, micro)
        if self.recompute:
            start = time.perf_counter()
            graph = self._graph(part, layer_ids, self._inputs.pop(part), recompute=True, grad=True)
            self.last_recompute_s = time.perf_counter() - start
        else:
            graph = self._graphs.pop(part)
        self.batches.used(subnet, backward=True)
        if self.is_last:
            grads = (torch.ones_like(graph[-1].outputs[0]),)
        if grads is None:
            raise RuntimeError(f"subnet {subnet}.{micro}: a stage other than the last needs its output's gradient")
        if not self.split:
            grads = _backprop(graph[0], grads)
            self._gather(subnet, graph)
            return grads
        for unit in reversed(graph):  # last layer first; each keeps its output's gradient for W
            unit.grads, grads = grads, _input_grads(unit, grads)
        self._graphs[part] = graph
        return grads

    def weight(self, subnet: int, micro: int) -> None:
        """A split backward's second half: the part's weight gradients, summed in part order."""
        graph = self._graphs.pop((subnet, micro))
        for unit in graph:
            _weight_grads(unit, self._params(unit))
        self._gather(subnet, graph)

    def update(self, layer_ids: tuple[int, ...], subnet: int | None = None) -> None:
        """Step the layers' optimizers; with the gradient stash or windows, with ``subnet``'s gradients."""
        if self.stash_gradients and subnet is None:
            raise ValueError("with the gradient stash, update needs the subnet whose gradients to apply")
        if self.windows is None and not self.stash_gradients:  # sequential, CSP: each layer's own step
            for layer in layer_ids:
                self.optimizers.step(layer)
            return
        stashed = self.stash.pop(subnet) if subnet is not None else {}
        windowed = self.window_sums.pop(subnet) if subnet is not None else {}
        for layer in layer_ids:
            if self.windows is not None and layer in self.windows:
                if subnet is None or layer not in windowed:
                    raise RuntimeError(f"shared layer {layer}: update of subnet {subnet} without its gradients")
                self.windows.accumulate(layer, subnet, windowed.pop(layer))
                continue
            grads = stashed.pop(layer, None)
            if grads is not None:
                for param, grad in zip(trainable_parameters(self.layers[layer]), grads, strict=True):
                    param.grad = grad
            self.optimizers.step(layer)
        if stashed:
            raise RuntimeError(f"subnet {subnet}: gradients of layers {sorted(stashed)} were stashed but not applied")

    def part_batch(self, subnet: int, micro: int) -> Batch:
        """Part ``micro`` of ``subnet``'s batch (stage 0 feeds its inputs)."""
        return self.batches.part(subnet, micro)

    # -- gradients ----------------------------------------------------------
    def _gather(self, subnet: int, graph: list[_Unit]) -> None:
        """A part's weight gradients are in: a windowed layer's join its window sum; with the gradient stash,
        every other layer's leave ``.grad`` (or the stashed weights) for the subnet's stash."""
        windows = self.windows
        for unit in graph:
            for layer in unit.layers:
                weights = unit.weights.get(layer)
                if windows is not None and layer in windows:
                    if weights is not None:
                        self.window_sums.add(subnet, layer, [w.grad for w in weights.values()])
                elif self.stash_gradients:
                    self._stash_layer(subnet, layer, weights)

    def _stash_layer(self, subnet: int, layer: int, weights: dict[str, torch.Tensor] | None) -> None:
        if weights is not None:
            grads: ParamGrads = [w.grad for w in weights.values()]
        else:
            params = trainable_parameters(self.layers[layer])
            grads = [p.grad for p in params]
            for p in params:
                p.grad = None
        if grads:
            self.stash.add(subnet, layer, grads)

    def _params(self, unit: _Unit) -> list[torch.Tensor]:
        """What a unit's weight gradients are taken for: its layers' trainable parameters (the version
        leaves of a windowed or weight-stashed layer instead)."""
        params: list[torch.Tensor] = []
        for layer in unit.layers:
            weights = unit.weights.get(layer)
            params.extend(weights.values() if weights is not None else trainable_parameters(self.layers[layer]))
        return params

    # -- graphs -------------------------------------------------------------
    def _graph(self, part: Part, layer_ids: tuple[int, ...], inputs: State, recompute: bool,
               grad: bool) -> list[_Unit]:
        """The part's graph on this stage: one unit (unsplit) or one per layer (split), each from detached
        input leaves (stage 0's batch as is); on the last stage the last unit's output is the loss.
        ``grad`` False: the same calls without recording (a forward whose backward recomputes)."""
        subnet, micro = part
        groups = [(layer,) for layer in layer_ids] if self.split and layer_ids else [layer_ids]
        plain = self.windows is None and not self.stash_weights  # sequential, CSP: the plain loop's calls
        layers, seed, cast = self.layers, self.seed, self.cast
        units: list[_Unit] = []
        state = inputs
        with torch.set_grad_enabled(grad):
            for group in groups:
                leaves = state if not units and self.is_first else tuple(_leaf(t) for t in state)
                unit = _Unit(leaves, leaves, group)
                state = leaves
                for layer in group:
                    ctx = LayerContext(seed, subnet, layer, recompute, micro)
                    if plain:
                        with cast():
                            state = layers[layer](state, ctx)
                    else:
                        state = self._call(unit, ctx, state)
                unit.outputs = state
                units.append(unit)
            if self.is_last:
                units[-1].outputs = (self._loss(subnet, micro, state),)
        return units

    def _call(self, unit: _Unit, ctx: LayerContext, state: State) -> State:
        """One layer of a stage with windows or the weight stash, under the run's precision; a windowed or
        weight-stashed layer on the version it reads, as leaves of their own (``unit.weights``)."""
        module, windows = self.layers[ctx.layer], self.windows
        if windows is not None and ctx.layer in windows:
            weights = {n: t.detach().requires_grad_() for n, t in windows.read(ctx.layer, ctx.subnet).items()}
        elif self.stash_weights:
            weights = {n: p.detach().clone().requires_grad_() for n, p in _named_trainable(module)}
        else:
            with self.cast():
                return module(state, ctx)
        unit.weights[ctx.layer] = weights
        with self.cast():
            return functional_call(module, weights, (state, ctx))

    def _loss(self, subnet: int, micro: int, state: State) -> torch.Tensor:
        batch, scale = self.batches.part(subnet, micro), self.batches.scale(subnet, micro)
        device = state[0].device
        with self.cast():
            loss = self.space.loss(state, Batch(batch.inputs, tuple(t.to(device) for t in batch.targets)))
        return loss if scale == 1.0 else loss * scale


def _named_trainable(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters the layer's optimizer steps, in its order."""
    return [(n, p) for n, p in module.named_parameters() if p.requires_grad]


def trainable_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the layer's optimizer steps, in its order (what a layer's gradients are given for)."""
    return [p for _, p in _named_trainable(module)]




def _pairs(unit: _Unit, grads: Grads) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The unit's outputs that carry a gradient, and those gradients."""
    pairs = [(o, g) for o, g in zip(unit.outputs, grads, strict=False) if g is not None and o.requires_grad]
    return [o for o, _ in pairs], [g for _, g in pairs]


def _backprop(unit: _Unit, grads: Grads) -> Grads:
    """The unsplit backward: one engine run into every leaf (parameters add to ``.grad``); input gradients."""
    outputs, given = _pairs(unit, grads)
    if outputs:
        torch.autograd.backward(outputs, given)
    return tuple(t.grad if t.requires_grad else None for t in unit.inputs)


def _input_grads(unit: _Unit, grads: Grads) -> Grads:
    """A split ``B``: the gradients of the unit's inputs only, keeping the graph for ``W``."""
    outputs, given = _pairs(unit, grads)
    wanted = [i for i, t in enumerate(unit.inputs) if t.requires_grad]
    found: list[torch.Tensor | None] = [None] * len(unit.inputs)
    if outputs and wanted:
        values = torch.autograd.grad(outputs, [unit.inputs[i] for i in wanted], given, retain_graph=True,
                                     allow_unused=True)
        for i, value in zip(wanted, values, strict=True):
            found[i] = value
    return tuple(found)


def _weight_grads(unit: _Unit, params: list[torch.Tensor]) -> None:
    """A split ``W``: the unit's parameter gradients from the output gradients ``B`` kept, added to ``.grad``."""
    outputs, given = _pairs(unit, unit.grads)
    if outputs and params:
        torch.autograd.backward(outputs, given, inputs=params)
