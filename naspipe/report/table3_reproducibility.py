"""Table 3: final loss and weights of every run against the sequential reference (paper Table 3).

The paper's claim is that NASPipe's loss is identical at 4, 8 and 16 GPUs while BSP and ASP
baselines drift, and so is the "search accuracy": the score of the best subnet searched out of
the trained supernet (``search_best``, scored with the supernet's weights) once retrained
alone (``search_accuracy``; ``naspipe search`` then ``naspipe train --subnet``).
Here each row is one run of a ``naspipe reproducibility`` file: its final
loss as an exact ``repr``, a short weights digest, and either ``identical`` or where it first
diverged from sequential (subnet step and first differing layers).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from naspipe.report.inputs import ReportInputs, system_rank
from naspipe.report.section import Table

COLUMNS = ["space", "system", "stages", "replicas", "seed", "final_loss", "weights", "identical_to_sequential",
           "first_divergence"]
SEARCH_COLUMNS = ["search_metric", "search_best", "search_accuracy"]
KEYS = ["space", "system", "stages", "replicas", "seed"]  # one run (replicas: processes per stage of a layout)


def divergence_text(divergence: dict[str, Any] | None) -> str:
    if divergence is None:
        return ""
    step = divergence.get("step")
    layers = ",".join(map(str, divergence.get("layers") or []))
    where = f"step {step}" if step is not None else "losses equal"
    return f"{where}; layers {layers}" if layers else where


def repro_frame(inputs: ReportInputs) -> pd.DataFrame:
    rows = [
        {
            "space": doc["space"],
            "system": e["system"],
            "stages": int(e["stages"]),
            "replicas": int(e.get("replicas", 1)),  # (a file written before replicas existed: one per stage)
            "seed": int(e["seed"]),
            "final_loss": repr(e["final_loss"]),
            "weights": str(e["weights_sha256"])[:12],
            "identical_to_sequential": "yes" if e["identical"] else "no",
            "first_divergence": divergence_text(e["first_divergence"]),
        }
        for doc in inputs.reproducibility
        for e in doc["runs"]
    ]
    frame = pd.DataFrame(rows, columns=COLUMNS).drop_duplicates(KEYS)
    if frame.empty:
        return frame
    frame = frame.assign(_rank=[system_rank(s) for s in frame["system"]]).sort_values(
        ["space", "_rank", "stages", "replicas", "seed"]
    )
    return frame[COLUMNS].reset_index(drop=True)


def with_search(frame: pd.DataFrame, inputs: ReportInputs) -> pd.DataFrame:
    """Table 3 completed with each run's search result (runs searched but not compared, e.g. the
    sequential reference, get a row of their own)."""
    keys = KEYS
    search = pd.DataFrame([{"space": r.key[0], "system": r.key[1], "stages": r.key[2], "replicas": 1, "seed": r.key[3],
                            "search_metric": r.best["metric"], "search_best": repr(float(r.best["score"])),
                            "search_accuracy": repr(r.accuracy)} for r in inputs.searches],
                          columns=keys + SEARCH_COLUMNS).drop_duplicates(keys)
    if search.empty:
        return frame
    merged = frame.merge(search, on=keys, how="outer").fillna("")
    merged = merged.assign(_rank=[system_rank(s) for s in merged["system"]]).sort_values(
        ["space", "_rank", "stages", "replicas", "seed"])
    return merged[COLUMNS + SEARCH_COLUMNS].reset_index(drop=True)


def build(inputs: ReportInputs) -> Table:
    frame = with_search(repro_frame(inputs), inputs)
    return Table(
        "table3_reproducibility",
        "Table 3: final loss, weights and search accuracy across stage counts against sequential",
        frame,
        _reading(frame) + _search_reading(frame),
    )


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No reproducibility file was given."
    text = []
    compared = frame[frame["identical_to_sequential"] != ""]  # the reference itself has a search row only
    for (space, system), group in compared.groupby(["space", "system"], sort=False):
        layouts = sorted(set(zip(group["stages"], group["replicas"], strict=True)))
        stages = ", ".join(f"D={d}" + (f"xR={r}" if r > 1 else "") for d, r in layouts)
        same = group["identical_to_sequential"] == "yes"
        if same.all():
            text.append(f"`{space}` {system}: identical to sequential at {stages}.")
            continue
        digests = group.groupby("seed")["weights"].nunique().max()
        spread = (
            f"{digests} different weights over the stage counts"
            if digests > 1
            else "the same weights at every stage count"
        )
        text.append(
            f"`{space}` {system}: differs from sequential in {int((~same).sum())} of {len(group)} runs "
            f"({stages}), with {spread}."
        )
    return " ".join(text)


def _search_reading(frame: pd.DataFrame) -> str:
    if "search_accuracy" not in frame.columns:
        return ""
    text = []
    searched = frame[frame["search_accuracy"] != ""]
    for (space, system), group in searched.groupby(["space", "system"], sort=False):
        values = sorted(set(group["search_accuracy"]))
        stages = ", ".join(f"D={d}" for d in sorted(group["stages"].unique()))
        verdict = (f"the same search accuracy {float(values[0]):.4g} at {stages}" if len(values) == 1
                   else f"{len(values)} different search accuracies over {stages}")
        text.append(f"`{space}` {system}: {verdict}.")
    return (" Search: " + " ".join(text)) if text else ""
