"""Turn profile rows into one cost per supernet position, the partitioner's input.

Torch-free: it needs only the space's structure, so the training job can price positions
from a profile CSV without importing the measuring code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from naspipe.errors import UsageError
from naspipe.floats import plain_sum
from naspipe.profile.rows import ProfileRow
from naspipe.space.shape import FLOAT32_BYTES
from naspipe.space.structure import SpaceStructure

if TYPE_CHECKING:
    from naspipe.space.shape import SpaceShape


def position_layer_ids(structure: SpaceStructure, position: int) -> list[int]:
    """The layer ids at ``position``: the shared layer, or every candidate of the block."""
    s = structure
    n_prefix, n_blocks = len(s.prefix), len(s.blocks)
    if position < n_prefix:
        return [position]
    if position < n_prefix + n_blocks:
        block = position - n_prefix
        return [s.layer_id(block, c) for c in range(len(s.blocks[block]))]
    return [s.num_layers - len(s.suffix) + (position - n_prefix - n_blocks)]


def position_means(structure: SpaceStructure, layer_cost: Callable[[int], float]) -> list[float]:
    """One cost per position from one per layer: a shared layer's own, a block's mean over its
    candidates (a static partition balances what a position costs on average over the stream)."""
    means = []
    for position in range(structure.num_positions):
        ids = position_layer_ids(structure, position)
        means.append(plain_sum(layer_cost(lid) for lid in ids) / len(ids))  # the same bits on 3.12
    return means


def position_role(structure: SpaceStructure, position: int) -> str:
    """``prefix``, ``block`` or ``suffix``: where ``position`` lies in the chain."""
    if position < len(structure.prefix):
        return "prefix"
    return "block" if position < len(structure.prefix) + len(structure.blocks) else "suffix"


def layer_costs_from_profile(space: SpaceShape, rows: Sequence[ProfileRow]) -> list[float]:
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
        for layer_id in position_layer_ids(s, position):
            op = s.op_name(layer_id)
            match = [cost for where, cost in covered.get(op, ()) if position in where]
            if not match:
                raise UsageError(f"profile has no row for op {op!r} at position {position} of space {space.name!r}")
            values.append(match[0])
        costs.append(plain_sum(values) / len(values))
    return costs


def check_profile_fits(space: SpaceShape, rows: Sequence[ProfileRow], source: str) -> None:
    """UsageError unless ``rows`` were measured on ``space`` as configured: its name, positions inside it,
    and each layer's parameter bytes as its options give them.

    A profile of the same space at another ``dim`` covers the same ops and positions, so matching
    by op and position alone priced a run with another supernet's timings, silently. Parameter
    bytes follow from the options that size a layer (``dim``, ``vocab``, ``channels`` ...);
    options that size only activations (``seq_len``, ``batch_size``) are not recorded in a
    profile and cannot be checked here.
    """
    s = space.structure
    for line, row in enumerate(rows, start=2):
        where = f"{source}:{line}"
        if row.space != space.name:
            raise UsageError(f"{where}: a profile of space {row.space!r}, not of {space.name!r} (measure this one "
                             f"with naspipe profile --space {space.name})")
        past = max(row.position_set)
        if past >= s.num_positions:
            raise UsageError(f"{where}: position {past} is past the end of space {space.name!r} "
                             f"({s.num_positions} positions: the profile was measured with other options)")
        for position in sorted(row.position_set):
            for layer in position_layer_ids(s, position):
                if s.op_name(layer) == row.op:
                    _check_layer_bytes(space, layer, row.param_bytes, f"{where}: op {row.op!r} at position {position}")


def _check_layer_bytes(space: SpaceShape, layer: int, measured: int, where: str) -> None:
    """A profile measures a layer's ``state_dict`` bytes: its float32 parameters plus the persistent buffers,
    so at least the parameters' bytes and at most those plus every buffer (non-persistent ones are not saved)."""
    params, most = space.layer_tensors(layer)
    least = FLOAT32_BYTES * params
    if not least <= measured <= most:
        expected = str(least) if least == most else f"{least} to {most}"
        raise UsageError(f"{where} has {measured} parameter bytes in the profile but {expected} in space "
                         f"{space.name!r} with this run's options (the profile was measured with other options; "
                         "profile the space with the run's --set space.* values)")
