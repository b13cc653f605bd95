"""Table 4: the access order of one layer, as the paper prints it (``2F-2B-5F-5B-7F-7B``).

Each run's ``access_order.csv`` lists, per layer, the forwards (``yF``) and backwards
(``yB``) of subnets that touched it, in the order its stage ran them. Under CSP every
subnet's ``F``/``B`` pair comes before the next user's, in subnet order, at every stage
count; under BSP (GPipe, VPipe) the users of a bulk interleave (``2F-5F-5B-2B``) and all
read one version; under ASP (PipeDream) the interleaving follows 1F1B.

The command that prints it, ``naspipe access-order``, is :mod:`naspipe.commands.access_order`.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from naspipe import systems
from naspipe.errors import UsageError

if TYPE_CHECKING:
    from naspipe.space.structure import SpaceStructure


@dataclass(frozen=True)
class RunAccess:
    path: Path
    label: str  # e.g. "gpipe D=4 B=4"
    ops: dict[int, str]
    accesses: dict[int, list[str]]  # layer -> ["2F", "2B", ...]
    trainable: frozenset[int] | None = None  # None: unknown (no readable metrics.json)
    num_layers: int | None = None  # the space's layer count; None: unknown
    # trainable layers the CSP version rule orders: windowed shared layers follow the window rule instead
    ordered: frozenset[int] | None = None


def read_access(run_dir: Path) -> RunAccess:
    path = run_dir / "access_order.csv"
    try:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    if rows and not {"layer", "op", "accesses"} <= rows[0].keys():
        raise UsageError(f"{path}: expected columns layer, op, accesses")
    ops = {int(r["layer"]): r["op"] for r in rows}
    accesses = {int(r["layer"]): r["accesses"].split("-") if r["accesses"] else [] for r in rows}
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return RunAccess(run_dir, str(run_dir), ops, accesses)
    structure = _structure(metrics.get("config", {}))
    if structure is None:
        return RunAccess(run_dir, _label(metrics), ops, accesses)
    trainable = frozenset(lid for lid in ops if structure.is_trainable(lid))
    ordered = frozenset(lid for lid in trainable if not structure.is_windowed(lid))
    return RunAccess(run_dir, _label(metrics), ops, accesses, trainable, structure.num_layers, ordered)


def _label(metrics: dict) -> str:
    config = metrics.get("config", {})
    system, stages = metrics.get("system", "?"), metrics.get("stages", "?")
    label = f"{system} D={stages}"
    if system in systems.with_capability("bulk_synchronous"):  # its bulk size is part of what ran
        label += f" B={config.get('bulk_size') or stages}"
    return label


def _structure(config: dict) -> SpaceStructure | None:
    """The run's space structure (trainable layers, layer count); None when the config cannot build it."""
    from naspipe.space import make_shape

    try:
        space = config["space"]
        return make_shape(space["name"], {k: v for k, v in space.items() if k != "name"},
                          config.get("shared_policy", "frozen")).structure
    except (KeyError, TypeError, ValueError):
        return None


def busiest_layer(run: RunAccess) -> int:
    """The trainable layer touched most often (lowest id on ties): a default worth showing.

    Windowed shared layers are left out: every subnet touches them, but the window rule, not
    the per-layer CSP order that Table 4 shows, decides when (their order is not sequential's).
    """
    allowed = run.ordered if run.ordered is not None else run.trainable
    candidates = [lid for lid in run.accesses if allowed is None or lid in allowed] or list(run.accesses)
    if not candidates:
        raise UsageError(f"{run.path}: access_order.csv lists no layer")
    return min(candidates, key=lambda lid: (-len(run.accesses[lid]), lid))


def order_row(run: RunAccess, layer: int, limit: int | None = None) -> str:
    """The paper-style row for ``layer``: ``2F-2B-5F-5B-7F-7B`` (``...`` when cut at ``limit``)."""
    seq = run.accesses.get(layer, [])
    if not seq:
        return "(not accessed)"
    shown = seq if limit is None or len(seq) <= limit else seq[:limit] + ["..."]
    return "-".join(shown)


def check_layer(runs: list[RunAccess], layer: int) -> None:
    """UsageError unless ``layer`` is a layer id of every run's space (known: from its metrics.json)."""
    if layer < 0:
        raise UsageError(f"--layer {layer}: layer ids start at 0")
    for run in runs:
        if run.num_layers is not None and layer >= run.num_layers:
            raise UsageError(f"--layer {layer}: out of range; {run.path} has layers 0..{run.num_layers - 1}")


def render_table(runs: list[RunAccess], layer: int | None = None, limit: int | None = None) -> str:
    if not runs:
        raise UsageError("access-order needs at least one run directory")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: must be >= 1")
    if layer is not None:
        check_layer(runs, layer)
    layer = busiest_layer(runs[0]) if layer is None else layer
    op = next((r.ops[layer] for r in runs if layer in r.ops), "?")
    width = max(len(r.label) for r in runs)
    lines = [f"Table 4: access order of layer {layer} ({op})"]
    lines += [f"{r.label:<{width}}  {order_row(r, layer, limit)}" for r in runs]
    return "\n".join(lines)
