"""Figure 5: throughput normalised to GPipe per space, one bar per system, at the largest stage count
(where GPipe and another system both ran).

Normalising by GPipe at the same space and stage count cancels the machine's speed, which is
the only fair comparison on a shared CPU box (the paper reports 1.1x-7.8x for NASPipe).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import seaborn as sns

from naspipe.report.inputs import ReportInputs
from naspipe.report.plotting import no_data, render
from naspipe.report.section import Figure
from naspipe.report.table2_systems import system_frame


def largest_stage_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Per space, the rows at its largest stage count where GPipe and another system both ran."""
    rows = frame.dropna(subset=["throughput_vs_gpipe"])
    compared = rows[rows.groupby(["space", "stages"])["system"].transform("nunique") > 1]
    rows = compared if not compared.empty else rows
    if rows.empty:
        return rows
    top = rows.groupby("space")["stages"].transform("max")
    return rows[rows["stages"] == top].reset_index(drop=True)


def build(inputs: ReportInputs) -> Figure:
    rows = largest_stage_rows(system_frame(inputs))

    def draw(ax: Any) -> None:
        if rows.empty:
            no_data(ax)
            return
        sns.barplot(data=rows, x="space", y="throughput_vs_gpipe", hue="system", ax=ax)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set(title="throughput normalised to GPipe (largest stage count)", ylabel="x GPipe")
        ax.legend(title="system", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them

    return Figure("fig5_throughput", "Figure 5: throughput normalised to GPipe", render(draw), _reading(rows))


def _reading(rows: pd.DataFrame) -> str:
    if rows.empty:
        return "No space has a GPipe run to normalise by."
    text = []
    for space, group in rows.groupby("space", sort=True):
        parts = ", ".join(f"{r.system} {r.throughput_vs_gpipe:.2f}x" for r in group.itertuples() if r.system != "gpipe")
        text.append(f"`{space}` at D={int(group['stages'].iloc[0])}: {parts or 'only GPipe ran'}.")
    return " ".join(text) + " Bars above 1 are faster than GPipe on this machine."
