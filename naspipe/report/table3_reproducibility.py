"""Table 3: final loss and weights of every run against the sequential reference (paper Table 3).

The paper's claim is that NASPipe's loss is identical at 4, 8 and 16 GPUs while BSP and ASP
baselines drift. Here each row is one run of a ``naspipe reproducibility`` file: its final
loss as an exact ``repr``, a short weights digest, and either ``identical`` or where it first
diverged from sequential (subnet step and first differing layers).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from naspipe.report.inputs import ReportInputs, system_rank
from naspipe.report.section import Table

COLUMNS = ["space", "system", "stages", "seed", "final_loss", "weights", "identical_to_sequential", "first_divergence"]


def divergence_text(divergence: dict[str, Any] | None) -> str:
    if divergence is None:
        return ""
    step = divergence.get("step")
    layers = ",".join(map(str, divergence.get("layers") or []))
    where = f"step {step}" if step is not None else "losses equal"
    return f"{where}; layers {layers}" if layers else where


def repro_frame(inputs: ReportInputs) -> pd.DataFrame:
    rows = [{"space": doc["space"], "system": e["system"], "stages": int(e["stages"]), "seed": int(e["seed"]),
             "final_loss": repr(e["final_loss"]), "weights": str(e["weights_sha256"])[:12],
             "identical_to_sequential": "yes" if e["identical"] else "no",
             "first_divergence": divergence_text(e["first_divergence"])}
            for doc in inputs.reproducibility for e in doc["runs"]]
    frame = pd.DataFrame(rows, columns=COLUMNS).drop_duplicates(["space", "system", "stages", "seed"])
    if frame.empty:
        return frame
    frame = frame.assign(_rank=[system_rank(s) for s in frame["system"]]).sort_values(["space", "_rank", "stages", "seed"])
    return frame[COLUMNS].reset_index(drop=True)


def build(inputs: ReportInputs) -> Table:
    frame = repro_frame(inputs)
    return Table("table3_reproducibility", "Table 3: final loss and weights across stage counts against sequential",
                 frame, _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No reproducibility file was given."
    text = []
    for (space, system), group in frame.groupby(["space", "system"], sort=False):
        stages = ", ".join(f"D={d}" for d in sorted(group["stages"].unique()))
        same = group["identical_to_sequential"] == "yes"
        if same.all():
            text.append(f"`{space}` {system}: identical to sequential at {stages}.")
            continue
        digests = group.groupby("seed")["weights"].nunique().max()
        spread = (f"{digests} different weights over the stage counts" if digests > 1
                  else "the same weights at every stage count")
        text.append(f"`{space}` {system}: differs from sequential in {int((~same).sum())} of {len(group)} runs "
                    f"({stages}), with {spread}.")
    return " ".join(text)
