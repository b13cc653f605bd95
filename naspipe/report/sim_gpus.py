"""Simulated Table 2 by GPU count: the fast NASPipe on G GPUs, each in the layout chosen for G (issue 42).

Stages stop paying at the partition's bound (a block cannot be split; the image spaces' first block runs at the
stem's resolution), so beyond it more GPUs help only as replicas: each of a stage's R replicas runs m / R of a
subnet's parts, and the replicas sum their gradients in part order, the same bits at any layout. For every GPU
count of ``simulate.gpus``, ``naspipe simulate --gpus G`` simulates each layout D x R = G the run allows and
keeps the fastest that fits; this table gives its layout and figures, csp-mb on G stages alone where that was
simulated, PipeDream on G stages (asynchronous: the speed that reproducibility gives up) and the throughput
against the fewest GPUs simulated. Each layout runs at its own batch (``simulate.batch``), as every row of the
stage-count table does: the bits are the same across layouts at one batch, not across batches.
"""

from __future__ import annotations

import pandas as pd

from naspipe.report.inputs import ReportInputs
from naspipe.report.section import Table
from naspipe.report.sim_table2 import sim_frame

COLUMNS = ["hardware", "space", "system", "gpus", "stages", "replicas", "batch", "throughput_samples_s",
           "bubble_ratio", "efficiency", "vs_fewest_gpus", "stages_only_samples_s", "pipedream_samples_s",
           "vs_pipedream", "layouts_tried"]


def layout_frame(inputs: ReportInputs) -> pd.DataFrame:
    """One row per simulated (hardware, space, system, GPU count) run whose layout was chosen (``--gpus``)."""
    rows = []
    for r in inputs.simulated:
        search = r.metrics.get("layout_search")
        if not search:
            continue
        tried = " ".join(f"{t['stages']}x{t['replicas']}:{float(t['throughput_samples_s']):.0f}"
                         for t in search["tried"])
        rows.append({"hardware": r.metrics.get("hardware", "?"), "space": r.space, "system": r.system,
                     "gpus": int(search["gpus"]), "stages": int(search["stages"]),
                     "replicas": int(search["replicas"]), "batch": int(r.metrics.get("batch_size", 0)),
                     "throughput_samples_s": float(r.metrics["throughput_samples_s"]),
                     "bubble_ratio": float(r.metrics["bubble_ratio"]),
                     "efficiency": float(r.metrics.get("efficiency", float("nan"))), "layouts_tried": tried})
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.DataFrame(rows).sort_values(["hardware", "space", "system", "gpus"]).reset_index(drop=True)
    fewest = frame.groupby(["hardware", "space", "system"])["throughput_samples_s"].transform("first")
    frame["vs_fewest_gpus"] = frame["throughput_samples_s"] / fewest
    stages = sim_frame(inputs).set_index(["hardware", "space", "system", "stages"])["throughput_samples_s"]
    frame["stages_only_samples_s"] = [_at(stages, (h, s, y, g)) for h, s, y, g in
                                      zip(frame["hardware"], frame["space"], frame["system"], frame["gpus"],
                                          strict=True)]
    frame["pipedream_samples_s"] = [_at(stages, (h, s, "pipedream", g)) for h, s, g in
                                    zip(frame["hardware"], frame["space"], frame["gpus"], strict=True)]
    frame["vs_pipedream"] = frame["throughput_samples_s"] / frame["pipedream_samples_s"]
    return frame[COLUMNS]


def _at(series: pd.Series, key: tuple[object, ...]) -> float:
    return float(series[key]) if key in series.index else float("nan")


def build(inputs: ReportInputs) -> Table:
    frame = layout_frame(inputs)
    return Table("sim_table2_gpus", "Table 2 (simulated) by GPU count: the fast NASPipe in the layout chosen for "
                 "each count", frame, _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No run was simulated on a GPU count (`simulate.gpus`)."
    text = ["Simulated (`naspipe simulate --gpus G`), not measured; stages x replicas is the layout kept."]
    for (hw, space, system), group in frame.groupby(["hardware", "space", "system"], sort=True):
        lo, hi = group.iloc[0], group.iloc[-1]
        versus = group.dropna(subset=["vs_pipedream"])
        against = (f"; against PipeDream on as many stages {versus['vs_pipedream'].min():.2f}x to "
                   f"{versus['vs_pipedream'].max():.2f}x" if not versus.empty else "")
        text.append(f"`{space}` {system} on {hw}: {lo.gpus} to {hi.gpus} GPUs scale {hi.vs_fewest_gpus:.2f}x "
                    f"({lo.stages}x{lo.replicas} to {hi.stages}x{hi.replicas}){against}.")
    return " ".join(text)
