"""VPipe-style parameter swapping: the supernet lives in host memory, layers visit the device.

A :class:`HostSwapper` owns the authoritative copy of every layer's tensors (parameters and
persistent buffers, by ``state_dict`` name) in host memory (pinned on CUDA). While a layer
is not resident, its tensors in the working module are empty placeholders, so any use of
a layer that was not fetched fails loudly instead of computing with stale values. The
stage worker fetches a task's layers right before the task (synchronously: no prediction,
no prefetch) and evicts them right after, writing back only what the task changed:

- forward: buffers (batch-norm running statistics move in the non-recompute forward);
- update: parameters and the layer's optimizer state (fetched with it);
- a subnet's stashed gradients (BSP keeps them from its backward to its update) go to the
  host after the backward and come back for the update (:meth:`stash_out`/:meth:`stash_in`).

Every copy is real: on CUDA a host-to-device or device-to-host copy; on the CPU, where host
and device are the same memory, a ``clone``/``copy_`` into separate storage, so the work
and the byte counts are those of the real system. ``swap_bytes`` counts bytes copied in
either direction and ``swap_wait_s`` the time the stage spent waiting on copies (all of
it, since copies are synchronous).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

import torch
from torch import nn

from naspipe.runtime.optim import LayerOptimizers

Grads = list[torch.Tensor | None]


class HostSwapper:
    def __init__(self, layers: Mapping[int, nn.Module], optimizers: LayerOptimizers, device: torch.device) -> None:
        self.device = device
        self.optimizers = optimizers
        self._pin = device.type == "cuda"
        self._live: dict[int, dict[str, torch.Tensor]] = {}  # the module's tensor objects, by name
        self._host: dict[int, dict[str, torch.Tensor]] = {}
        self._resident: set[int] = set()
        self.swap_bytes = 0
        self.swap_wait_s = 0.0
        self.fetches = 0
        restored = set(optimizers.state_dicts())  # optimizers that exist (from a checkpoint)
        self._names: dict[int, dict[str, str]] = {}  # every state_dict name -> the name it moves under
        for layer, module in layers.items():
            live: dict[str, torch.Tensor] = {}
            first: dict[int, str] = {}
            for name, tensor in module.state_dict(keep_vars=True).items():
                first.setdefault(id(tensor), name)  # tied tensors move once
                live.setdefault(first[id(tensor)], tensor)
            self._names[layer] = {name: first[id(t)] for name, t in module.state_dict(keep_vars=True).items()}
            self._live[layer] = live
            self._host[layer] = {name: self._host_copy(t.detach()) for name, t in live.items()}
            for tensor in live.values():
                tensor.data = self._placeholder(tensor)
            if layer in restored:
                self._optimizer_to_host(layer, count=False)

    # -- what the worker calls ----------------------------------------------
    def fetch(self, layers: Iterable[int], optimizer: bool = False) -> None:
        """Copy ``layers`` (and with ``optimizer`` their optimizer state) to the device."""
        start = time.perf_counter()
        for layer in layers:
            if layer in self._resident:
                continue
            for name, tensor in self._live[layer].items():
                tensor.data = self._to_device(self._host[layer][name])
            if optimizer:
                self._optimizer_to_device(layer)
            self._resident.add(layer)
            self.fetches += 1
        self._sync()
        self.swap_wait_s += time.perf_counter() - start

    def evict(
        self, layers: Iterable[int], params: bool = False, buffers: bool = False, optimizer: bool = False
    ) -> None:
        """Drop ``layers`` from the device, first writing back what the task changed."""
        start = time.perf_counter()
        for layer in layers:
            if layer not in self._resident:
                continue
            module_params = self._param_names(layer)
            for name, tensor in self._live[layer].items():
                is_param = name in module_params
                if (params and is_param) or (buffers and not is_param):
                    self._write_back(self._host[layer][name], tensor.data)
                tensor.data = self._placeholder(tensor)
            if optimizer:
                self._optimizer_to_host(layer, count=True)
            self._resident.discard(layer)
        self._sync()
        self.swap_wait_s += time.perf_counter() - start

    def stash_out(self, grads: Grads) -> Grads:
        """A subnet's gradients of one layer, parked in host memory until its update."""
        start = time.perf_counter()
        out = [None if g is None else self._host_copy(g, count=True) for g in grads]
        self._sync()
        self.swap_wait_s += time.perf_counter() - start
        return out

    def stash_in(self, grads: Grads) -> Grads:
        start = time.perf_counter()
        out = [None if g is None else self._to_device(g) for g in grads]
        self._sync()
        self.swap_wait_s += time.perf_counter() - start
        return out

    def host_state(self, layer: int) -> dict[str, torch.Tensor]:
        """The layer's current tensors (host copies), keyed like ``module.state_dict()``."""
        host = self._host[layer]
        return {name: host[canonical] for name, canonical in self._names[layer].items()}

    def stats(self) -> dict[str, float]:
        return {"swap_bytes": float(self.swap_bytes), "swap_wait_s": self.swap_wait_s,
                "swap_fetches": float(self.fetches)}

    # -- copies ---------------------------------------------------------------
    def _host_copy(self, tensor: torch.Tensor, count: bool = False) -> torch.Tensor:
        host = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=self._pin)
        host.copy_(tensor)
        if count:
            self.swap_bytes += _nbytes(tensor)
        return host

    def _to_device(self, host: torch.Tensor) -> torch.Tensor:
        self.swap_bytes += _nbytes(host)
        if host.device == self.device:  # CPU: host and device memory are one; still a real copy
            return host.clone()
        return host.to(self.device, copy=True)

    def _write_back(self, host: torch.Tensor, device_tensor: torch.Tensor) -> None:
        self.swap_bytes += _nbytes(device_tensor)
        host.copy_(device_tensor)

    def _placeholder(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.empty(0, dtype=tensor.dtype, device=self.device)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- optimizer state (moves with its layer) ------------------------------
    def _optimizer_states(self, layer: int) -> list[dict]:
        params = self._live[layer]
        if not any(isinstance(t, nn.Parameter) and t.requires_grad for t in params.values()):
            return []
        optimizer = self.optimizers.get(layer)
        return [] if optimizer is None else list(optimizer.state.values())

    def _optimizer_to_device(self, layer: int) -> None:
        for state in self._optimizer_states(layer):
            for key, value in state.items():
                if _movable(value):
                    state[key] = self._to_device(value)

    def _optimizer_to_host(self, layer: int, count: bool) -> None:
        for state in self._optimizer_states(layer):
            for key, value in state.items():
                if _movable(value):
                    state[key] = self._host_copy(value, count=count)

    def _param_names(self, layer: int) -> set[str]:
        return {name for name, t in self._live[layer].items() if isinstance(t, nn.Parameter)}


def _movable(value: object) -> bool:
    """Optimizer-state tensors that live with the parameters (not Adam's scalar step count)."""
    return isinstance(value, torch.Tensor) and value.dim() > 0


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
