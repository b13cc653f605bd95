"""Per-layer optimizer state that only the layer's own updates touch.

Each layer has its own torch optimizer (created on its first update), so momentum, Adam
moments and step counts belong to the layer and move with it; a layer a subnet did not use
is never stepped (no decay, no step count). ``foreach`` and ``fused`` are off so that the
same single-tensor kernels run on every device and stage count.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from naspipe.config import OptimizerConfig


class LayerOptimizers:
    def __init__(self, layers: Mapping[int, nn.Module], config: OptimizerConfig) -> None:
        # torch.optim imports torch._dynamo (~1.2 CPU s, with sympy) on its first optimizer; do it here, at
        # set-up, so that the import is not billed to the first training step (naspipe.determinism no longer
        # imports it; stages forked from the forkserver find it preloaded)
        importlib.import_module("torch._dynamo")
        self._layers = layers
        self._config = config
        self._optimizers: dict[int, torch.optim.Optimizer] = {}
        self._frozen: set[int] = set()  # layers with nothing to train (pooling, skip): asked once, not per update

    def _make(self, layer: int) -> torch.optim.Optimizer | None:
        params = [p for p in self._layers[layer].parameters() if p.requires_grad]
        if not params:
            return None
        c = self._config
        if c.name == "adam":
            return torch.optim.Adam(params, lr=c.lr, betas=c.betas, eps=c.eps, weight_decay=c.weight_decay,
                                    foreach=False, fused=False)
        return torch.optim.SGD(params, lr=c.lr, momentum=c.momentum, weight_decay=c.weight_decay, foreach=False)

    def get(self, layer: int) -> torch.optim.Optimizer | None:
        optimizer = self._optimizers.get(layer)
        if optimizer is None and layer not in self._frozen:
            optimizer = self._make(layer)
            if optimizer is None:
                self._frozen.add(layer)
            else:
                self._optimizers[layer] = optimizer
        return optimizer

    def peek(self, layer: int) -> torch.optim.Optimizer | None:
        """The layer's optimizer if it exists (never creates one)."""
        return self._optimizers.get(layer)

    def step(self, layer: int) -> None:
        """Apply the layer's gradient, then drop it (so the next backward assigns, not adds)."""
        optimizer = self._optimizers.get(layer)  # every step but a layer's first: no call to get
        if optimizer is None:
            optimizer = self.get(layer)
            if optimizer is None:
                return
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def state_dicts(self) -> dict[int, dict[str, Any]]:
        return {layer: opt.state_dict() for layer, opt in self._optimizers.items()}

    def load_state_dict(self, layer: int, state: dict[str, Any]) -> None:
        optimizer = self.get(layer)
        if optimizer is not None:
            optimizer.load_state_dict(state)
