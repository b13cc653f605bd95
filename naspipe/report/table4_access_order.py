"""Table 4: the access order of one layer in every run of a space (paper Table 4).

The layer is the busiest trainable layer of the space's sequential run (or its first run),
chosen once per space so that every row shows the same layer; each row is cut after
:data:`LIMIT` accesses. CSP rows repeat the sequential ``yF-yB`` pairs; BSP rows interleave
the users of a bulk; ASP rows follow 1F1B.
"""

from __future__ import annotations

import pandas as pd

from naspipe.report.access_order import busiest_layer, order_row, read_access
from naspipe.report.inputs import ReportInputs
from naspipe.report.section import Table

LIMIT = 10
COLUMNS = ["space", "layer", "op", "system", "stages", "seed", "access_order"]


def access_frame(inputs: ReportInputs) -> pd.DataFrame:
    rows = []
    for space in sorted({r.space for r in inputs.runs}):
        runs = inputs.runs_of(space)
        seed = min(r.seed for r in runs)
        runs = [r for r in runs if r.seed == seed]
        accesses = {r.path: read_access(r.path) for r in runs}
        reference = next((r for r in runs if r.system == "sequential"), runs[0])
        layer = busiest_layer(accesses[reference.path])
        op = accesses[reference.path].ops.get(layer, "?")
        rows += [{"space": space, "layer": layer, "op": op, "system": r.system, "stages": r.stages, "seed": seed,
                  "access_order": order_row(accesses[r.path], layer, LIMIT)} for r in runs]
    return pd.DataFrame(rows, columns=COLUMNS)


def build(inputs: ReportInputs) -> Table:
    frame = access_frame(inputs)
    return Table("table4_access_order", "Table 4: access order of one layer (F: forward, B: backward of subnet y)",
                 frame, _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No runs were given."
    text = []
    for space, group in frame.groupby("space", sort=True):
        reference = group.iloc[0]
        same = sorted({f"{r.system} D={r.stages}" for r in group.itertuples()
                       if r.access_order == reference.access_order and r.Index != reference.name})
        other = sorted({f"{r.system} D={r.stages}" for r in group.itertuples()
                        if r.access_order != reference.access_order})
        text.append(f"In `{space}` layer {reference.layer} ({reference.op}) is accessed in the order of "
                    f"{reference.system} D={reference.stages} by " + (", ".join(same) or "no other run")
                    + (f"; {', '.join(other)} reorder its accesses." if other else "."))
    return " ".join(text)
