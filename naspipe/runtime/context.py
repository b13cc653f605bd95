"""The runtime context manager: a stage's layers in host memory, a byte-bounded device cache.

The decisions (what is resident, what to evict, what to prefetch, hits and bytes) are the
pure :class:`naspipe.context.DeviceCache`'s; this module performs them with real copies:

- Host memory holds every layer's authoritative tensors (parameters and buffers; pinned on
  CUDA) and, once a layer has been updated, its optimizer state. A layer that is not on the
  device has empty placeholders in its module, so a use without a fetch fails loudly.
- A layer's parameters, gradients and optimizer state move together: ``in`` copies
  parameters, buffers and optimizer state; an evicted *dirty* layer (updated, or its
  batch-norm statistics moved) is written back first (``out``); a clean one is dropped.
- Copies are asynchronous: on CUDA on their own stream with ``non_blocking=True`` from
  pinned memory; on the CPU on one copy thread (FIFO, so a write-back always lands before a
  later fetch of the same layer reads the host copy). A task waits only for its own layers
  that have not arrived; that wait is ``copy_wait_s``.
- ``cache_peak_bytes`` is the arena's peak: the bytes of every tensor this manager placed on
  the device (copies, their optimizer state) plus the gradients of resident layers, counted
  under a lock with the copy thread. It is what the budget bounds, on every device.
- ``peak_device_bytes`` is the device's own peak: on CUDA ``torch.cuda.max_memory_allocated``
  (activations, workspaces and the CUDA caching allocator's rounding included, so it exceeds
  the budget); on the CPU, which has no separate device memory, the arena's peak.

Values never change in transit (copies are exact), so training stays bitwise equal to the
sequential reference whatever the budget, horizon or timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch import nn

from naspipe.config import OptimizerConfig
from naspipe.context import DeviceCache, Move
from naspipe.runtime.optim import LayerOptimizers

Tensors = list[torch.Tensor]


def layer_bytes(module: nn.Module, optimizer: OptimizerConfig) -> int:
    """Device bytes of a resident layer: parameters, buffers, gradients and optimizer slots."""
    state = sum(_nbytes(t) for t in module.state_dict().values())
    trainable = sum(_nbytes(p) for p in module.parameters() if p.requires_grad)
    return max(1, state + trainable * (1 + optimizer.state_slots))


class _Arena:
    """Bytes this manager holds on the device, and their peak (the CPU's 'device memory')."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes = 0
        self.peak = 0

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.bytes += nbytes
            self.peak = max(self.peak, self.bytes)


class _Copies:
    """FIFO asynchronous copies: a thread on the CPU, a stream on CUDA."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._cuda = device.type == "cuda"
        self._pool = None if self._cuda else ThreadPoolExecutor(1, thread_name_prefix="naspipe-copy")
        self._stream = torch.cuda.Stream(device) if self._cuda else None
        self._last: Future[Any] | None = None

    def fetch(self, hosts: Tensors, allocate: Callable[[int], None]) -> tuple[Callable[[], Tensors],
                                                                               Callable[[], bool]]:
        """Start host-to-device copies; returns (a wait that yields the device tensors, a poll: landed yet?).

        ``allocate(nbytes)`` is told when the device memory is taken (the arena's accounting): on
        CUDA when the copies are issued (the allocation is immediate), on the CPU when they run.
        """
        if self._stream is not None:
            allocate(sum(_nbytes(h) for h in hosts))
            with torch.cuda.stream(self._stream):
                devs = [h.to(self.device, non_blocking=True) for h in hosts]
                event = torch.cuda.Event()
                event.record(self._stream)

            def wait_cuda() -> Tensors:
                event.synchronize()
                for d in devs:
                    d.record_stream(torch.cuda.current_stream(self.device))
                return devs
            return wait_cuda, event.query
        assert self._pool is not None
        def run() -> Tensors:
            allocate(sum(_nbytes(h) for h in hosts))
            return [h.clone() for h in hosts]
        future = self._pool.submit(run)
        self._last = future
        return future.result, future.done

    def write_back(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], done: Callable[[], None]) -> None:
        """Copy device tensors into their host copies (after the compute that wrote them)."""
        if self._stream is not None:
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self._stream):
                for host, dev in pairs:
                    host.copy_(dev, non_blocking=True)
                    dev.record_stream(self._stream)
            done()
            return
        assert self._pool is not None

        def run() -> None:
            for host, dev in pairs:
                host.copy_(dev)
            done()
        self._last = self._pool.submit(run)

    def drain(self) -> None:
        """Every copy started so far has landed."""
        if self._stream is not None:
            self._stream.synchronize()
        elif self._last is not None:
            self._last.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


class ContextManager:
    def __init__(self, layers: Mapping[int, nn.Module], optimizers: LayerOptimizers, device: torch.device,
                 budget: int, sizes: Mapping[int, int]) -> None:
        self.layers, self.optimizers, self.device = layers, optimizers, device
        self.cache = DeviceCache(budget, sizes)
        self.copies = _Copies(device)
        self.arena = _Arena()
        self.copy_wait_s = 0.0
        self._pin = device.type == "cuda"
        self._live: dict[int, dict[str, torch.Tensor]] = {}
        self._host: dict[int, dict[str, torch.Tensor]] = {}
        self._host_opt: dict[int, dict[int, dict[str, torch.Tensor]]] = {}  # layer -> param index -> state
        self._arriving: dict[int, tuple[list[tuple[int, str]], Callable[[], Tensors], Callable[[], bool]]] = {}
        self._device_bytes: dict[int, int] = {}  # arena bytes of each resident layer
        self._grad_bytes: dict[int, int] = {}
        self._names: dict[int, dict[str, str]] = {}
        self.spans: list[tuple[str, float, float]] = []  # (name, start, end) of copy waits, for the trace
        for layer, module in layers.items():
            self._adopt(layer, module)

    # -- what the worker calls ----------------------------------------------
    def begin(self, layers: Iterable[int], upcoming: list[tuple[int, ...]]) -> None:
        """A task starts: fetch what it misses, start the prefetch, wait for its layers."""
        wanted = list(dict.fromkeys(layers))
        for layer in [x for x, (_, _, landed) in self._arriving.items() if landed()]:
            self._install(layer)  # prefetched copies that have landed: resident, so hits
        if self._arriving and not self.cache.room_for(wanted):
            # a copy cannot be evicted mid-flight (landed, it can): without this wait a slow copy thread (a busy
            # core) made a task whose layers fit the budget fail, its room held by prefetched copies on their way
            self._wait_for(list(self._arriving))
        self._perform(self.cache.acquire(wanted, upcoming))
        self._perform(self.cache.prefetch(upcoming))
        self._wait_for(wanted)

    def _wait_for(self, layers: Iterable[int]) -> None:
        """The copies of ``layers`` on their way have landed (installed); the wait counts as ``copy_wait_s``."""
        start = time.perf_counter()
        for layer in layers:
            self._install(layer)
        self.copy_wait_s += time.perf_counter() - start

    def end(self, layers: Iterable[int], dirty: Iterable[int] = ()) -> None:
        """Unpin ``layers``; ``dirty`` ones changed on the device and are written back before eviction."""
        changed = set(dirty)
        ids = list(dict.fromkeys(layers))
        self.cache.release([x for x in ids if x in changed], dirty=True)
        self.cache.release([x for x in ids if x not in changed])

    def note_gradients(self, layers: Iterable[int]) -> None:
        """Count the gradients a backward left on the device (freed by the update)."""
        for layer in layers:
            grads = sum(_nbytes(p.grad) for p in self.layers[layer].parameters() if p.grad is not None)
            self._grad_bytes[layer] = self._grad_bytes.get(layer, 0) + grads
            self.arena.add(grads)

    def after_update(self, layers: Iterable[int]) -> None:
        """The update freed the layers' gradients and may have created their optimizer state."""
        for layer in layers:
            self.arena.add(-self._grad_bytes.pop(layer, 0))
            resident = sum(_nbytes(t.data) for t in self._live[layer].values())
            resident += sum(_nbytes(v) for state in self._optimizer_states(layer).values() for v in state.values()
                            if _movable(v))
            self.arena.add(resident - self._device_bytes.get(layer, 0))
            self._device_bytes[layer] = resident

    def sync(self) -> None:
        """A drain point: write back every dirty layer and wait, so the host copies are current."""
        for move in self.cache.flush():
            self._write_back(move.layer, keep=True)
        self.copies.drain()

    def current_state(self, layer: int) -> dict[str, torch.Tensor]:
        """The layer's newest tensors: the device copy if resident, else the host copy (after pending
        write-backs land), keyed like ``module.state_dict()``. Its optimizer state is current too."""
        if self.cache.holds(layer):
            self._install(layer)
            live = self._live[layer]
            return {name: live[canonical].data for name, canonical in self._names[layer].items()}
        self.copies.drain()
        return self.host_state(layer)

    def replace(self, layer: int, state: Mapping[str, torch.Tensor], optimizer: dict[str, Any] | None) -> None:
        """A newer state of the layer arrived (mirroring): drop the device copy, overwrite the host copy."""
        self._install(layer)
        if self.cache.holds(layer):
            self.cache.discard(layer)
            self.arena.add(-self._device_bytes.pop(layer, 0))
            self._to_placeholders(layer)
        self.copies.drain()  # no write-back of an older state may land after this
        host = self._host[layer]
        for name, canonical in self._names[layer].items():
            host[canonical].copy_(state[name])
        if optimizer is not None:
            self.optimizers.load_state_dict(layer, optimizer)
            self._host_opt[layer] = {}
            for index, opt_state in self._optimizer_states(layer).items():
                host_state = {k: _host_copy(v, self._pin) for k, v in opt_state.items() if _movable(v)}
                self._host_opt[layer][index] = host_state
                opt_state.update(host_state)

    def host_state(self, layer: int) -> dict[str, torch.Tensor]:
        host = self._host[layer]
        return {name: host[canonical] for name, canonical in self._names[layer].items()}

    def stats(self) -> dict[str, float]:
        s = self.cache.stats
        peak = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else self.arena.peak
        return {"cache_hit_rate": s.hit_rate, "cache_uses": float(s.uses), "cache_late": float(s.late),
                "swap_in_bytes": float(s.swap_in_bytes),
                "swap_out_bytes": float(s.swap_out_bytes), "copy_wait_s": self.copy_wait_s,
                "peak_device_bytes": float(peak), "cache_peak_bytes": float(self.arena.peak),
                "cache_budget_bytes": float(self.cache.budget)}

    def close(self) -> None:
        self.copies.close()

    # -- moves ----------------------------------------------------------------
    def _perform(self, moves: list[Move]) -> None:
        for move in moves:
            if move.direction == "in":
                self._start_fetch(move.layer)
            else:
                self._write_back(move.layer, keep=False) if move.direction == "out" else self._drop(move.layer)

    def _start_fetch(self, layer: int) -> None:
        targets = [(-1, name) for name in self._host[layer]]  # (-1: the module, else param index; name or key)
        hosts = list(self._host[layer].values())
        for index, state in self._host_opt.get(layer, {}).items():
            targets += [(index, key) for key in state]
            hosts += list(state.values())
        self._device_bytes[layer] = sum(_nbytes(h) for h in hosts)
        self._arriving[layer] = (targets, *self.copies.fetch(hosts, self.arena.add))

    def _install(self, layer: int) -> None:
        arriving = self._arriving.pop(layer, None)
        if arriving is None:
            return
        targets, wait, _ = arriving
        states = self._optimizer_states(layer)
        for (index, name), dev in zip(targets, wait(), strict=True):
            if index < 0:
                self._live[layer][name].data = dev
            else:
                states[index][name] = dev
        self.cache.arrived(layer)

    def _write_back(self, layer: int, keep: bool) -> None:
        self._install(layer)  # (a layer is never evicted in flight; this is a no-op guard)
        pairs = [(self._host[layer][name], t.data) for name, t in self._live[layer].items()]
        pairs += self._optimizer_pairs(layer, repoint=not keep)
        freed = 0 if keep else self._device_bytes.pop(layer, 0)
        if not keep:
            self._to_placeholders(layer)
        self.copies.write_back(pairs, lambda: self.arena.add(-freed))

    def _drop(self, layer: int) -> None:
        self._install(layer)
        self._optimizer_pairs(layer, repoint=True)  # the state entries point at the (current) host copies again
        self.arena.add(-self._device_bytes.pop(layer, 0))
        self._to_placeholders(layer)

    def _to_placeholders(self, layer: int) -> None:
        for tensor in self._live[layer].values():
            tensor.data = torch.empty(0, dtype=tensor.dtype, device=self.device)

    def _optimizer_pairs(self, layer: int, repoint: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(host, device) for the layer's optimizer state; with ``repoint`` the state then refers to the host."""
        hosts = self._host_opt.setdefault(layer, {})
        pairs = []
        for index, state in self._optimizer_states(layer).items():
            host = hosts.setdefault(index, {})
            for key, value in list(state.items()):
                if not _movable(value) or value is host.get(key):
                    continue
                if key not in host:  # first write-back after the optimizer created it on the device
                    host[key] = torch.empty(value.shape, dtype=value.dtype, pin_memory=self._pin)
                pairs.append((host[key], value))
                if repoint:
                    state[key] = host[key]
        return pairs

    def _optimizer_states(self, layer: int) -> dict[int, dict[str, Any]]:
        """The layer's optimizer state per parameter index (parameters that have state so far)."""
        optimizer = self.optimizers.peek(layer)
        if optimizer is None:
            return {}
        params = [p for group in optimizer.param_groups for p in group["params"]]
        return {i: optimizer.state[p] for i, p in enumerate(params) if p in optimizer.state}

    # -- setup ----------------------------------------------------------------
    def _adopt(self, layer: int, module: nn.Module) -> None:
        live: dict[str, torch.Tensor] = {}
        first: dict[int, str] = {}
        named = module.state_dict(keep_vars=True)
        for name, tensor in named.items():
            first.setdefault(id(tensor), name)  # tied tensors move once
            live.setdefault(first[id(tensor)], tensor)
        self._names[layer] = {name: first[id(t)] for name, t in named.items()}
        self._live[layer] = live
        self._host[layer] = {name: _host_copy(t.detach(), self._pin) for name, t in live.items()}
        for index, state in self._optimizer_states(layer).items():  # restored from a checkpoint
            host_state = {k: _host_copy(v, self._pin) for k, v in state.items() if _movable(v)}
            self._host_opt.setdefault(layer, {})[index] = host_state
            state.update(host_state)
        self._to_placeholders(layer)


def _host_copy(tensor: torch.Tensor, pin: bool) -> torch.Tensor:
    host = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=pin)
    host.copy_(tensor)
    return host


def _movable(value: object) -> bool:
    """Optimizer-state tensors that live with the parameters (not Adam's scalar step count)."""
    return isinstance(value, torch.Tensor) and value.dim() > 0


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
