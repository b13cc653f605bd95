"""A stage's arithmetic for micro-batched subnets: each subnet's batch in parts, and a split backward.

What the sequential reference computes with ``micro_batches`` = m and ``split_backward`` (the
same at any stage count, so csp equals it bit for bit):

- **Parts.** Subnet ``y``'s batch (a pure function of (seed, y)) is cut into m parts along
  dimension 0 of every input and target by :func:`torch.tensor_split`, which depends on m and the
  batch only. Part ``j`` runs forward with its own dropout masks
  (:class:`~naspipe.space.base.LayerContext` ``micro``; part 0 keeps the unsplit seeds) and its own
  batch-norm statistics (:class:`~naspipe.space.ops.common.BatchNorm`).
- **Loss.** Part ``j``'s loss is the space's loss on the part times ``rows_j / rows``: the parts'
  losses then sum to the sample-weighted mean, which is the whole batch's mean loss whenever every
  sample weighs the same in it (toy, cv; nlp averages over non-padding tokens, so there it is the mean
  of the parts' token means weighted by their samples, as GPipe's micro-batches give). The subnet's
  reported loss is the scaled losses summed in part order (float32). m = 1 is not scaled.
- **Gradients.** Each part's backward adds its weight gradients to ``.grad`` (a windowed shared
  layer's: to an explicit sum) in part order, part 0 first; the policy runs a subnet's
  gradient-summing tasks on a stage in part order. One optimizer step per layer at the update.
- **Split backward.** The part's graph is cut at every layer. ``B`` walks the layers from the last,
  computing only each layer's input gradient (:func:`torch.autograd.grad` with the graph kept), so
  the stage's input gradient leaves at once; it keeps each layer's output gradient. ``W`` then runs
  one engine pass per layer from those output gradients to the layer's own parameters
  (``inputs=``), which is the plain backward's arithmetic for them: a parameter used at two sites in
  a layer gets both contributions summed by the engine, once (unlike hook-based splits that
  re-accumulate per site, pytorch issue 180952). With recomputation on, ``B`` re-runs the forward.

Only csp and sequential run micro-batched schedules, so no stash (gradient or weight) is involved.
"""

from __future__ import annotations

import time

import torch
from torch.func import functional_call

from naspipe.config.validation import check_parts as check_parts  # launch checks parts from here; torch-free there
from naspipe.errors import UsageError
from naspipe.runtime.executor import Grads, ParamGrads, StageExecutor, _leaf, _trainable, _Unit
from naspipe.space.base import Batch, LayerContext, State

Part = tuple[int, int]  # (subnet, micro-batch)


def split_batch(batch: Batch, parts: int) -> tuple[list[Batch], list[float]]:
    """The batch's ``parts`` parts along dimension 0 and each part's loss scale (its share of the rows)."""
    rows = int(batch.inputs[0].shape[0])
    if rows < parts:
        raise UsageError(f"micro_batches {parts} exceeds the batch's {rows} samples")
    inputs = [torch.tensor_split(t, parts) for t in batch.inputs]
    targets = [torch.tensor_split(t, parts) for t in batch.targets]
    cut = [Batch(tuple(s[j] for s in inputs), tuple(s[j] for s in targets)) for j in range(parts)]
    scales = [1.0 if parts == 1 else int(b.inputs[0].shape[0]) / rows for b in cut]
    return cut, scales


class MicroExecutor:
    """A stage's forward, backward, weight and update tasks of micro-batch parts (module docstring).

    It runs on the stage's :class:`StageExecutor` (its layers, optimizers, windows, batches)."""

    def __init__(self, base: StageExecutor, parts: int, split: bool) -> None:
        if base.stash_gradients or base.stash_weights:
            raise ValueError("micro-batched schedules keep no gradient or weight stash")
        self.base, self.parts, self.split = base, parts, split
        # The last stage keeps a part's activations for its backward, which the policy runs right after the
        # forward (a backward comes first there): recomputing would cost a forward per part for no memory saved.
        # Recomputation changes no bit (it replays the forward's calls), so neither does where it is skipped.
        self.recompute = base.recompute and not base.is_last
        self._batches: dict[int, tuple[list[Batch], list[float]]] = {}  # subnet -> its parts, until their last use
        self._uses: dict[int, int] = {}  # parts whose batch's last use here is done, per subnet
        self._inputs: dict[Part, State] = {}  # recomputation: each part's stage input, until its backward
        self._graphs: dict[Part, list[_Unit]] = {}  # no recomputation: the forward's graph; split: B's, until W
        self._window_sums: dict[int, dict[int, ParamGrads]] = {}  # subnet -> windowed layer -> summed gradients
        self.last_recompute_s = 0.0

    # -- the batch ----------------------------------------------------------
    def part_batch(self, subnet: int, micro: int) -> Batch:
        """Part ``micro`` of ``subnet``'s batch (split once per stage, kept until its last use here)."""
        split = self._batches.get(subnet)
        if split is None:
            split = self._batches[subnet] = split_batch(self.base.batch_of(subnet), self.parts)
        return split[0][micro]

    def _used(self, subnet: int, backward: bool) -> None:
        """A part's last use of the batch here is done (stage 0 feeds inputs in the forward; the last stage
        reads targets in the forward and, recomputing, again in the backward): the last part frees it."""
        if backward != (self.base.is_last and self.recompute) or subnet not in self._batches:
            return
        done = self._uses.get(subnet, 0) + 1
        if done == self.parts:
            del self._batches[subnet]
            self._uses.pop(subnet, None)
        else:
            self._uses[subnet] = done

    # -- tasks --------------------------------------------------------------
    def forward(self, subnet: int, micro: int, layer_ids: tuple[int, ...], inputs: State) -> State | torch.Tensor:
        """The part's stage output, or on the last stage its scaled loss (detached)."""
        part = (subnet, micro)
        if self.recompute:
            self._inputs[part] = inputs
            outputs = self._graph(subnet, micro, layer_ids, inputs, recompute=False, grad=False)[-1].outputs
        else:
            graph = self._graphs[part] = self._graph(subnet, micro, layer_ids, inputs, recompute=False, grad=True)
            outputs = tuple(t.detach() for t in graph[-1].outputs)
        self._used(subnet, backward=False)
        return outputs[0] if self.base.is_last else outputs

    def backward(self, subnet: int, micro: int, layer_ids: tuple[int, ...], grads: Grads | None) -> Grads:
        """The part's input gradients; unsplit, also its weight gradients (split: kept for :meth:`weight`)."""
        part = (subnet, micro)
        if self.recompute:
            start = time.perf_counter()
            graph = self._graph(subnet, micro, layer_ids, self._inputs.pop(part), recompute=True, grad=True)
            self.last_recompute_s = time.perf_counter() - start
        else:
            graph = self._graphs.pop(part)
        self._used(subnet, backward=True)
        if self.base.is_last:
            grads = (torch.ones_like(graph[-1].outputs[0]),)
        if grads is None:
            raise RuntimeError(f"subnet {subnet}.{micro}: a stage other than the last needs its output's gradient")
        if not self.split:
            grads = _backprop_all(graph[0], grads)
            self._sum_window_grads(subnet, graph)
            return grads
        for unit in reversed(graph):  # last layer first; each keeps its output's gradient for W
            unit.grads, grads = grads, _input_grads(unit, grads)
        self._graphs[part] = graph
        return grads

    def weight(self, subnet: int, micro: int) -> None:
        """A split backward's second half: the part's weight gradients, added in part order."""
        graph = self._graphs.pop((subnet, micro))
        for unit in graph:
            _weight_grads(unit, self._params(unit))
        self._sum_window_grads(subnet, graph)

    def update(self, layer_ids: tuple[int, ...], subnet: int) -> None:
        """One optimizer step per layer with the parts' summed gradients (windowed layers: into the window)."""
        sums = self._window_sums.pop(subnet, None)
        if sums:
            self.base.keep_window_grads(subnet, sums)
        self.base.update(layer_ids, subnet=subnet)

    # -- graphs -------------------------------------------------------------
    def _graph(self, subnet: int, micro: int, layer_ids: tuple[int, ...], inputs: State, recompute: bool,
               grad: bool) -> list[_Unit]:
        """The part's graph on this stage: one unit (unsplit) or one per layer (split), each from detached
        input leaves (stage 0's batch as is); on the last stage the last unit's output is the scaled loss.
        ``grad`` False: the same calls without recording (a forward whose backward recomputes)."""
        groups = [(layer,) for layer in layer_ids] if self.split and layer_ids else [layer_ids]
        units: list[_Unit] = []
        state = inputs
        with torch.set_grad_enabled(grad):
            for group in groups:
                leaves = state if not units and self.base.is_first else tuple(_leaf(t) for t in state)
                unit = _Unit(leaves, leaves, group)
                state = leaves
                for layer in group:
                    state = self._call(unit, LayerContext(self.base.seed, subnet, layer, recompute, micro), state)
                unit.outputs = state
                units.append(unit)
            if self.base.is_last:
                units[-1].outputs = (self._loss(subnet, micro, state),)
        return units

    def _call(self, unit: _Unit, ctx: LayerContext, state: State) -> State:
        """One layer; a windowed shared layer on the version its window gives the subnet, as leaves."""
        module, windows = self.base.layers[ctx.layer], self.base.windows
        with self.base.cast():  # the run's precision (bf16 autocast or nothing), per layer as the base executor
            if windows is None or ctx.layer not in windows:
                return module(state, ctx)
            weights = {n: t.detach().requires_grad_() for n, t in windows.read(ctx.layer, ctx.subnet).items()}
            unit.weights[ctx.layer] = weights
            return functional_call(module, weights, (state, ctx))

    def _loss(self, subnet: int, micro: int, state: State) -> torch.Tensor:
        batch = self.part_batch(subnet, micro)
        scale = self._batches[subnet][1][micro]
        device = state[0].device
        with self.base.cast():
            loss = self.base.space.loss(state, Batch(batch.inputs, tuple(t.to(device) for t in batch.targets)))
        return loss if scale == 1.0 else loss * scale

    def _params(self, unit: _Unit) -> list[torch.Tensor]:
        """What a unit's weight gradients are taken for: its layers' trainable parameters (a windowed
        layer's version leaves instead)."""
        params: list[torch.Tensor] = []
        for layer in unit.layers:
            weights = unit.weights.get(layer)
            params.extend(weights.values() if weights is not None else _trainable(self.base.layers[layer]))
        return params

    def _sum_window_grads(self, subnet: int, graph: list[_Unit]) -> None:
        """Windowed shared layers: each part's gradients (on its own leaves) summed in part order."""
        sums = self._window_sums.setdefault(subnet, {})
        for unit in graph:
            for layer, weights in unit.weights.items():
                grads = [w.grad for w in weights.values()]
                before = sums.get(layer)
                sums[layer] = grads if before is None else [_add(a, b) for a, b in zip(before, grads, strict=True)]


def _add(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    """``a + b`` as ``.grad`` accumulation computes it (a missing term adds nothing)."""
    if a is None:
        return b
    return a if b is None else a + b


def _pairs(unit: _Unit, grads: Grads) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The unit's outputs that carry a gradient, and those gradients."""
    pairs = [(o, g) for o, g in zip(unit.outputs, grads, strict=False) if g is not None and o.requires_grad]
    return [o for o, _ in pairs], [g for _, g in pairs]


def _backprop_all(unit: _Unit, grads: Grads) -> Grads:
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
