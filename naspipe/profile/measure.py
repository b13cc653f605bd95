"""Per-layer profiling: compute time, parameter copy time and bytes of every distinct layer.

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

``torch.cuda.synchronize()`` brackets every timed call on CUDA. Rows are written and read as
CSV (:func:`write_profile_csv` is atomic); :func:`layer_costs_from_profile` turns them into
one cost per supernet position for the partitioner, :func:`render_table5` into the
markdown of the paper's Table 5.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_text
from naspipe.space.base import LayerContext, SearchSpace, State

ROLES = ("prefix", "block", "suffix")


@dataclass(frozen=True)
class ProfileRow:
    """One distinct (operation, input shape) of a space, measured once."""

    space: str
    op: str
    role: str  # prefix | block | suffix
    positions: str  # positions this row covers, e.g. "1-24" or "11;22"
    layers: int  # how many layers of the supernet this row stands for
    in_shape: str  # e.g. "8x64x512:float32;8x64:int64"
    device: str  # "cpu" or "cuda"
    device_name: str
    threads: int
    recompute: bool
    repeats: int
    warmup: int
    fwd_ms: float
    bwd_ms: float
    copy_ms: float
    param_bytes: int
    act_bytes: int

    @property
    def position_set(self) -> frozenset[int]:
        return frozenset(_parse_positions(self.positions))


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ProfileRow))


# -- measuring ------------------------------------------------------------------------------------
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


def _positions_text(positions: Iterable[int]) -> str:
    ordered = sorted(set(positions))
    runs: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ";".join(runs)


def _parse_positions(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, text.split(";")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _position_layer_ids(space: SearchSpace, position: int) -> list[int]:
    s = space.structure
    n_prefix, n_blocks = len(s.prefix), len(s.blocks)
    if position < n_prefix:
        return [position]
    if position < n_prefix + n_blocks:
        block = position - n_prefix
        return [s.layer_id(block, c) for c in range(len(s.blocks[block]))]
    return [s.num_layers - len(s.suffix) + (position - n_prefix - n_blocks)]


def _role(space: SearchSpace, position: int) -> str:
    s = space.structure
    if position < len(s.prefix):
        return "prefix"
    return "block" if position < len(s.prefix) + len(s.blocks) else "suffix"


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
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
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
        copy_ms = _median_ms(lambda: [d.copy_(h) for d, h in zip(dest, host)], repeats, warmup, device)
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
        ids = _position_layer_ids(space, position)
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
                "role": _role(space, position),
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
            positions=_positions_text(e["positions"]),
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


# -- CSV --------------------------------------------------------------------------------------
def write_profile_csv(rows: Sequence[ProfileRow], path: str | os.PathLike[str]) -> None:
    """Write ``rows`` as CSV atomically (temporary sibling file + ``os.replace``)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        record = asdict(row)
        for key in ("fwd_ms", "bwd_ms", "copy_ms"):
            record[key] = repr(float(record[key]))  # round-trips exactly
        writer.writerow(record)
    atomic_write_text(Path(path), buffer.getvalue())


_CONVERT: dict[str, Callable[[str], Any]] = {
    "layers": int,
    "threads": int,
    "repeats": int,
    "warmup": int,
    "param_bytes": int,
    "act_bytes": int,
    "fwd_ms": float,
    "bwd_ms": float,
    "copy_ms": float,
}


def _to_bool(text: str) -> bool:
    if text in ("True", "true", "1"):
        return True
    if text in ("False", "false", "0"):
        return False
    raise ValueError(text)


def read_profile_csv(path: str | os.PathLike[str]) -> list[ProfileRow]:
    """Rows of a CSV written by :func:`write_profile_csv`; UsageError naming the file/line on problems."""
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{target}: cannot read profile ({exc.strerror or exc})") from exc
    reader = csv.DictReader(io.StringIO(text))
    missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
    if missing:
        raise UsageError(f"{target}: not a profile CSV (missing column {missing[0]!r})")
    rows = []
    for line, record in enumerate(reader, start=2):
        values: dict[str, Any] = {}
        for name in FIELDS:
            raw = record.get(name)
            try:
                if raw is None:
                    raise ValueError("missing")
                if name == "recompute":
                    values[name] = _to_bool(raw)
                else:
                    values[name] = _CONVERT.get(name, str)(raw)
            except ValueError:
                raise UsageError(f"{target}:{line}: bad value {raw!r} in column {name!r}") from None
        if values["role"] not in ROLES:
            raise UsageError(f"{target}:{line}: bad value {values['role']!r} in column 'role'")
        try:
            _parse_positions(values["positions"])
        except ValueError:
            raise UsageError(f"{target}:{line}: bad value {values['positions']!r} in column 'positions'") from None
        rows.append(ProfileRow(**values))
    return rows


# -- consumers --------------------------------------------------------------------------------
def layer_costs_from_profile(space: SearchSpace, rows: Sequence[ProfileRow]) -> list[float]:
    """One cost (ms, forward + backward task) per position of ``space``, for the partitioner.

    Prefix and suffix positions cost their layer's row; a block costs the mean over its
    candidates. Rows are matched by op name and position, so a profile of ``cv.c1`` also
    serves ``cv.c2`` (same positions and ops). UsageError naming the op and position if the
    profile does not cover the space.
    """
    by_op: dict[str, list[ProfileRow]] = {}
    for row in rows:
        by_op.setdefault(row.op, []).append(row)
    covered: dict[str, list[tuple[frozenset[int], float]]] = {
        op: [(r.position_set, r.fwd_ms + r.bwd_ms) for r in group] for op, group in by_op.items()
    }
    s = space.structure
    costs: list[float] = []
    for position in range(s.num_positions):
        values = []
        for layer_id in _position_layer_ids(space, position):
            op = s.op_name(layer_id)
            match = [cost for where, cost in covered.get(op, ()) if position in where]
            if not match:
                raise UsageError(f"profile has no row for op {op!r} at position {position} of space {space.name!r}")
            values.append(match[0])
        costs.append(sum(values) / len(values))
    return costs


def render_table5(rows: Sequence[ProfileRow]) -> str:
    """Markdown table: op, input shape, layers, fwd ms, bwd ms, copy ms, param MiB."""
    lines = [
        "| op | input | layers | fwd ms | bwd ms | copy ms | param MiB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        shape = r.in_shape.split(";")[0].split(":")[0]
        lines.append(
            f"| {r.op} | {shape} | {r.layers} | {r.fwd_ms:.3f} | {r.bwd_ms:.3f} | {r.copy_ms:.3f} "
            f"| {r.param_bytes / 2**20:.3f} |"
        )
    return "\n".join(lines) + "\n"


# -- command line -----------------------------------------------------------------------------
def parse_set_options(items: Iterable[str]) -> dict[str, Any]:
    """``["dim=64", "space.data=null"]`` -> ``{"dim": 64, "data": None}`` (values via yaml.safe_load)."""
    import yaml

    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().removeprefix("space.")
        if not sep or not key:
            raise UsageError(f"--set expects key=value, got {item!r}")
        try:
            options[key] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError as exc:
            raise UsageError(f"--set {key}: cannot parse value {value!r} ({str(exc).splitlines()[0]})") from None
    return options


def add_profile_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``profile`` subcommand; its handler is :func:`run_profile` (``func`` default)."""
    parser = subparsers.add_parser(
        "profile",
        help="measure per-operation compute and copy time of a search space",
        description="Profile each distinct (operation, input shape) of a search space once and write a CSV.",
    )
    parser.add_argument("--space", required=True, help="space preset, e.g. nlp.c1, cv.tiny")
    parser.add_argument(
        "--set", dest="set", action="append", default=[], metavar="KEY=VALUE", help="space option (YAML value)"
    )
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--shared-policy", default="frozen", choices=("frozen", "causal"))
    parser.add_argument(
        "--recompute", action=argparse.BooleanOptionalAction, default=True, help="time tasks as with recomputation"
    )
    parser.add_argument("--out", required=True, help="CSV file to write")
    parser.add_argument("--table", default=None, help="also write the markdown table (Table 5) here")
    parser.add_argument("--quiet", action="store_true")
    parser.set_defaults(func=run_profile)
    return parser


def run_profile(args: argparse.Namespace) -> int:
    from naspipe.space import make_space

    options: Mapping[str, Any] = parse_set_options(getattr(args, "set", None) or [])
    try:
        space = make_space(args.space, options, getattr(args, "shared_policy", "frozen"))
    except UsageError:
        raise
    except ValueError as exc:  # unknown space / option from naspipe.space: same one-line message
        raise UsageError(str(exc)) from None
    quiet = getattr(args, "quiet", False)
    report = None if quiet else (lambda text: print(f"profile {args.space}: {text}", flush=True))
    device = getattr(args, "device", "cpu")
    threads = getattr(args, "threads", None)
    if threads is not None:
        if threads < 1:
            raise UsageError(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    if device.startswith("cuda"):  # time the kernels training runs: deterministic ones
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True)
    rows = profile_space(
        space,
        device=device,
        repeats=args.repeats,
        warmup=args.warmup,
        seed=getattr(args, "seed", 0),
        recompute=getattr(args, "recompute", True),
        progress=report,
    )
    write_profile_csv(rows, args.out)
    table = render_table5(rows)
    if args.table:
        atomic_write_text(args.table, table)
    if not quiet:
        print(table, end="")
    return 0


__all__ = [
    "FIELDS",
    "ProfileRow",
    "add_profile_parser",
    "layer_costs_from_profile",
    "parse_set_options",
    "profile_space",
    "read_profile_csv",
    "render_table5",
    "run_profile",
    "write_profile_csv",
]
