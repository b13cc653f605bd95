"""Measuring a space's layers: compute time, parameter copy time and bytes of every distinct layer.

A supernet of 48 blocks x 72 candidates has 3,458 layers but only a few dozen distinct
(operation, input shape) pairs: candidate copies share an op, and every block of one kind
(e.g. all encoder blocks) sees the same input shapes. :func:`profile_space` walks the
positions in order with a real batch, builds and measures one layer per distinct pair, and
records which positions and how many layers each row stands for. A row holds:

- ``fwd_ms``: the forward task as the runtime runs it (under ``torch.no_grad()`` with
  activation recomputation; with grad otherwise), median of ``repeats`` after ``warmup``;
- ``bwd_ms``: the backward task: the recompute forward (with grad, ``ctx.recompute=True``)
  plus autograd backward when ``recompute`` is on, the backward alone otherwise; 0 for a
  layer with nothing to differentiate (a frozen first layer: batch data needs no gradient);
- ``copy_ms``: host-to-device copy of the layer's ``state_dict`` tensors (from pinned
  memory on CUDA; on the CPU a host memcpy into preallocated tensors, device ``cpu``);
- ``param_bytes`` (parameters and persistent buffers, i.e. the ``state_dict``) and
  ``act_bytes`` (bytes of the output state).

``torch.cuda.synchronize()`` brackets every timed call on CUDA. The row type and its CSV
format are in :mod:`naspipe.profile.rows`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from naspipe.errors import UsageError
from naspipe.profile.costs import position_layer_ids, position_role
from naspipe.profile.rows import ProfileRow, positions_text
from naspipe.space.base import LayerContext, SearchSpace, State


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(fn: Callable[[], object], repeats: int, warmup: int, device: torch.device) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return float(statistics.median(times))


def _spec(state: State) -> str:
    return ";".join("x".join(map(str, t.shape)) + ":" + str(t.dtype).removeprefix("torch.") for t in state)


def _state_bytes(state: State) -> int:
    return sum(t.numel() * t.element_size() for t in state)


def _measure_layer(
    layer: torch.nn.Module,
    layer_id: int,
    state: State,
    device: torch.device,
    seed: int,
    repeats: int,
    warmup: int,
    recompute: bool,
    input_grads: bool = True,
) -> tuple[float, float, float, int, int, State]:
    """Returns (fwd_ms, bwd_ms, copy_ms, param_bytes, act_bytes, output state).

    ``input_grads`` False: the inputs are batch data (position 0), nothing to differentiate.
    """
    layer.train()
    first = LayerContext(seed=seed, subnet=0, layer=layer_id, recompute=False)
    again = LayerContext(seed=seed, subnet=0, layer=layer_id, recompute=recompute)

    def leaves() -> State:
        return tuple(t.detach().requires_grad_(input_grads and t.is_floating_point()) for t in state)

    def forward() -> State:
        if recompute:
            with torch.no_grad():
                return layer(state, first)
        return layer(leaves(), first)

    with torch.no_grad():
        output = layer(state, first)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    grads = tuple(torch.randn(t.shape, generator=gen).to(device) if t.is_floating_point() else None for t in output)
    needs_backward = any(p.requires_grad for p in layer.parameters()) or (
        input_grads and any(t.is_floating_point() for t in state)
    )

    fwd_ms = _median_ms(forward, repeats, warmup, device)

    def backward() -> None:
        outs = layer(leaves(), again) if recompute else pending.pop()
        pairs = [(o, g) for o, g in zip(outs, grads, strict=True) if g is not None and o.requires_grad]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        for p in layer.parameters():
            p.grad = None

    if not needs_backward:
        bwd_ms = 0.0
    elif recompute:
        bwd_ms = _median_ms(backward, repeats, warmup, device)
    else:  # time the backward alone: build each graph outside the timed region
        times = []
        for i in range(warmup + repeats):
            pending = [layer(leaves(), first)]
            _sync(device)
            start = time.perf_counter()
            backward()
            _sync(device)
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1e3)
        bwd_ms = float(statistics.median(times))

    # what the context manager moves: parameters and persistent buffers (the state_dict)
    tensors = [t.detach() for t in layer.state_dict(keep_vars=True).values()]
    param_bytes = sum(t.numel() * t.element_size() for t in tensors)
    if not tensors:
        copy_ms = 0.0
    elif device.type == "cuda":
        host = [t.cpu().pin_memory() for t in tensors]
        copy_ms = _median_ms(lambda: [h.to(device, non_blocking=True) for h in host], repeats, warmup, device)
    else:
        host = [t.clone() for t in tensors]
        dest = [torch.empty_like(t) for t in tensors]
        copy_ms = _median_ms(lambda: [d.copy_(h) for d, h in zip(dest, host, strict=True)], repeats, warmup, device)
    return fwd_ms, bwd_ms, copy_ms, param_bytes, _state_bytes(output), output


def profile_space(
    space: SearchSpace,
    device: str | torch.device = "cpu",
    repeats: int = 5,
    warmup: int = 2,
    seed: int = 0,
    recompute: bool = True,
    progress: Callable[[str], None] | None = None,
) -> list[ProfileRow]:
    """Profile every distinct (operation, input shape) of ``space`` once, in position order.

    The input of position ``p`` is the output of candidate 0 at ``p - 1`` on batch 0, so
    every row is measured on real shapes and values. Rows come out in first-seen order.
    """
    if repeats < 1 or warmup < 0:
        raise UsageError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats} warmup={warmup}")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device {str(device)!r} is not available (torch.cuda.is_available() is False)")
    if dev.type not in ("cpu", "cuda"):
        raise UsageError(f"device {str(device)!r} is not supported; use cpu or cuda")
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    threads = torch.get_num_threads()
    structure = space.structure

    found: dict[tuple[str, str], dict[str, Any]] = {}
    # Output of candidate 0 of a position, by key: the next position's input. A key seen
    # again at a later position (same op, same input shape) reuses its stored output, so no
    # layer is built twice.
    outputs: dict[tuple[str, str], State] = {}
    state: State = tuple(t.to(dev) for t in space.batch(0, seed).inputs)
    for position in range(structure.num_positions):
        ids = position_layer_ids(structure, position)
        spec = _spec(state)
        for layer_id in ids:
            op = structure.op_name(layer_id)
            key = (op, spec)
            entry = found.get(key)
            if entry is not None:
                entry["positions"].add(position)
                entry["layers"] += 1
                continue
            if progress is not None:
                progress(f"{op} @ {spec}")
            layer = space.build_layer(layer_id, seed).to(dev)
            fwd, bwd, copy, pbytes, abytes, out = _measure_layer(
                layer, layer_id, state, dev, seed, repeats, warmup, recompute, input_grads=position > 0
            )
            found[key] = {
                "op": op,
                "role": position_role(structure, position),
                "in_shape": spec,
                "positions": {position},
                "layers": 1,
                "fwd_ms": fwd,
                "bwd_ms": bwd,
                "copy_ms": copy,
                "param_bytes": pbytes,
                "act_bytes": abytes,
            }
            if layer_id == ids[0]:
                outputs[key] = tuple(t.detach() for t in out)
            del layer, out
        key0 = (structure.op_name(ids[0]), spec)
        if key0 not in outputs:  # first seen as another position's non-first candidate
            layer = space.build_layer(ids[0], seed).to(dev).train()
            with torch.no_grad():
                outputs[key0] = layer(state, LayerContext(seed=seed, subnet=0, layer=ids[0]))
            del layer
        state = outputs[key0]

    return [
        ProfileRow(
            space=space.name,
            op=e["op"],
            role=e["role"],
            positions=positions_text(e["positions"]),
            layers=e["layers"],
            in_shape=e["in_shape"],
            device=dev.type,
            device_name=device_name,
            threads=threads,
            recompute=recompute,
            repeats=repeats,
            warmup=warmup,
            fwd_ms=e["fwd_ms"],
            bwd_ms=e["bwd_ms"],
            copy_ms=e["copy_ms"],
            param_bytes=e["param_bytes"],
            act_bytes=e["act_bytes"],
        )
        for e in found.values()
    ]
