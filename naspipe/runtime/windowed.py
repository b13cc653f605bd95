"""A stage's windowed shared layers, in tensors: the older version, the accumulator, the update.

The rule is :mod:`naspipe.scheduling.windows` (pure arithmetic); this module holds what it
needs per layer, and nothing more: the module's own parameters are the newest version
``S_a`` (``a`` windows applied), ``older`` is ``S_{a-1}``, ``acc`` the running sum of the open
window's gradients. A subnet reads ``S_r``, ``r = max(0, w - 1)``, which is always one of the
two (the scheduler waits until it is): the module's tensors when ``r == a``, else ``older``.

Applying a window moves the module's current storage to ``older`` untouched and steps a copy
(``p.data`` is replaced, never written in place), so a forward that kept the old tensors for
its backward (recomputation off) still differentiates exactly what it read. Tensors handed to
a forward come from ``p.data`` (a fresh version counter), so the later step does not trip
autograd's in-place check on them.

Everything here is a function of the subnet ids that reached it, in order: the same calls
with the same gradients give the same bits on one stage or sixteen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn

from naspipe.runtime.optim import LayerOptimizers
from naspipe.scheduling.windows import SharedWindow

Tensors = list[torch.Tensor]
OLDER, ACC = "window.older.", "window.acc."  # key prefixes of the window's state in a checkpoint shard


class SharedWindows:
    def __init__(self, layers: Mapping[int, nn.Module], windowed: Iterable[int], rule: SharedWindow,
                 optimizers: LayerOptimizers) -> None:
        self.rule = rule
        self._modules = {lid: layers[lid] for lid in windowed if lid in layers}
        self._optimizers = optimizers
        self._applied = dict.fromkeys(self._modules, 0)
        self._next = dict.fromkeys(self._modules, 0)  # the next subnet to accumulate (subnet order)
        self._older: dict[int, Tensors] = {}
        self._acc: dict[int, Tensors] = {}
        self._pending: dict[int, dict[int, list[torch.Tensor | None]]] = {}  # updates ahead of the sum's turn

    def __contains__(self, layer: int) -> bool:
        return layer in self._modules

    def names(self, layer: int) -> list[str]:
        return [n for n, p in self._modules[layer].named_parameters() if p.requires_grad]

    def read(self, layer: int, subnet: int) -> dict[str, torch.Tensor]:
        """The tensors of the version ``subnet`` reads, by parameter name (detached, not yet leaves)."""
        want, applied = self.rule.read_version(subnet), self._applied[layer]
        if want == applied:
            tensors = [p.data for p in _trainable(self._modules[layer])]
        elif want == applied - 1 and layer in self._older:
            tensors = self._older[layer]
        else:
            raise RuntimeError(f"subnet {subnet} reads shared layer {layer} at version {want}, "
                               f"but {applied} windows are applied here (the scheduler let it run early)")
        return dict(zip(self.names(layer), tensors, strict=True))

    def accumulate(self, layer: int, subnet: int, grads: list[torch.Tensor | None]) -> None:
        """At ``subnet``'s update: its gradients, and those of every update done before in id order,
        join the window's sum in subnet order; a closed window is applied. An update that overtook an
        earlier subnet's leaves its gradients waiting for that one (the scheduler counts alike)."""
        if subnet < self._next[layer] or subnet in self._pending.setdefault(layer, {}):
            raise RuntimeError(f"shared layer {layer}: subnet {subnet} accumulated twice")
        pending = self._pending[layer]
        pending[subnet] = grads
        while self._next[layer] in pending:
            self._add(layer, self._next[layer], pending.pop(self._next[layer]))

    def _add(self, layer: int, subnet: int, grads: list[torch.Tensor | None]) -> None:
        params = _trainable(self._modules[layer])
        full = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]
        if self.rule.opens_window(subnet) or layer not in self._acc:
            self._acc[layer] = [g.detach().clone() for g in full]
        else:
            for total, g in zip(self._acc[layer], full, strict=True):
                total.add_(g)
        self._next[layer] = subnet + 1
        if self.rule.closes_window(subnet):
            self._apply(layer)

    def _apply(self, layer: int) -> None:
        """``S_{a+1}`` = the layer's optimizer step on ``S_a`` with the window's mean gradient."""
        params = _trainable(self._modules[layer])
        self._older[layer] = [p.data for p in params]
        for p, total in zip(params, self._acc.pop(layer), strict=True):
            p.data = p.data.clone()
            p.grad = total.div_(self.rule.size)
        self._optimizers.step(layer)
        self._applied[layer] += 1

    # -- checkpoints ----------------------------------------------------------
    def state(self, layer: int) -> dict[str, torch.Tensor]:
        """The window's part of a checkpoint shard: the older version and the open window's sum."""
        names, out = self.names(layer), {}
        for prefix, store in ((OLDER, self._older), (ACC, self._acc)):
            for name, tensor in zip(names, store.get(layer, []), strict=False):
                out[prefix + name] = tensor
        return out

    def resume(self, start: int) -> None:
        """Continue after subnets ``< start``: that many accumulated, their closed windows applied."""
        for layer in self._modules:
            self._applied[layer], self._next[layer] = self.rule.applied_before(start), start

    def load(self, layer: int, state: Mapping[str, torch.Tensor], start: int) -> None:
        """Restore :meth:`state` of ``layer`` (saved once subnets ``< start`` were done); checks it is whole."""
        names = self.names(layer)
        for prefix, store, needed in ((OLDER, self._older, self.rule.applied_before(start) >= 1),
                                      (ACC, self._acc, not self.rule.opens_window(start))):
            if not needed:
                continue
            missing = [n for n in names if prefix + n not in state]
            if missing:
                raise ValueError(f"shared layer {layer}: the checkpoint at step {start} lacks {prefix}{missing[0]}")
            device = next(iter(_trainable(self._modules[layer]))).device
            store[layer] = [state[prefix + n].to(device).clone() for n in names]

    def extra_bytes(self) -> int:
        """Bytes held beyond the modules: the older versions and the accumulators."""
        held = sum(t.numel() * t.element_size() for store in (self._older, self._acc)
                   for tensors in store.values() for t in tensors)
        return held + sum(t.numel() * t.element_size() for waiting in self._pending.values()
                          for grads in waiting.values() for t in grads if t is not None)


def split_state(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A shard's tensors as (the module's, the window's)."""
    module = {k: v for k, v in state.items() if not k.startswith((OLDER, ACC))}
    window = {k: v for k, v in state.items() if k.startswith((OLDER, ACC))}
    return module, window


def _trainable(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]
