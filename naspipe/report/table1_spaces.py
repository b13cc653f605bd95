"""Table 1: the search spaces of the runs (blocks, candidates, layers, supernet and subnet parameters).

Parameter counts come from each space's shape (analytic sizes, equal to the layers built on
torch's meta device: ``tests/test_space_sizes.py``), so no layer is built and no torch is
imported. The mean subnet size assumes uniform sampling: shared
layers plus, per block, the mean size of its candidates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from naspipe.errors import UsageError
from naspipe.report.inputs import ReportInputs
from naspipe.report.section import Table

if TYPE_CHECKING:
    from naspipe.space.shape import SpaceShape


def layer_params(space: SpaceShape) -> list[int]:
    """Parameter count of every layer of ``space``, from its shape's analytic sizes (no layer is built)."""
    return [space.layer_tensors(layer)[0] for layer in range(space.structure.num_layers)]


def space_row(name: str, options: dict[str, Any], shared_policy: str) -> dict[str, Any]:
    from naspipe.space import make_shape

    try:
        space = make_shape(name, options, shared_policy)
    except ValueError as exc:
        raise UsageError(f"space {name!r} of the runs: {exc}") from None
    s = space.structure
    params = layer_params(space)
    shared = sum(params[i] for i in range(s.num_layers) if s.is_shared(i))
    per_block = [[params[s.layer_id(b, c)] for c in range(len(block))] for b, block in enumerate(s.blocks)]
    candidates = sorted(set(s.choices_per_block))
    return {
        "space": name,
        "blocks": len(s.blocks),
        "candidates_per_block": "/".join(map(str, candidates)),
        "layers": s.num_layers,
        "positions": s.num_positions,
        "supernet_params": sum(params),
        "mean_subnet_params": round(shared + sum(sum(b) / len(b) for b in per_block)),
    }


def build(inputs: ReportInputs) -> Table:
    rows = []
    for name in sorted({r.space for r in inputs.runs}):
        run = inputs.runs_of(name)[0]
        rows.append(space_row(name, run.space_options, run.shared_policy))
    columns = [
        "space",
        "blocks",
        "candidates_per_block",
        "layers",
        "positions",
        "supernet_params",
        "mean_subnet_params",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    return Table("table1_spaces", "Table 1: search spaces", frame, _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No run names a search space."
    parts = [
        f"`{r.space}` has {r.blocks} choice blocks of {r.candidates_per_block} candidates ({r.layers} layers, "
        f"{r.supernet_params:,} parameters); a subnet trains {r.mean_subnet_params / r.supernet_params:.1%} of them "
        f"on average"
        for r in frame.itertuples()
    ]
    return "; ".join(parts) + ". Every step trains one subnet, so most of the supernet is idle at any time."
