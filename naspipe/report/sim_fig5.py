"""Simulated Figure 5: throughput normalised to GPipe per space at each simulated stage count.

From :mod:`naspipe.report.sim_table2`'s frame; one panel row per stage count, marked with
the hardware spec: the paper's Figure 5 on the paper's testbed (or any other spec).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import seaborn as sns

from naspipe.report.inputs import ReportInputs
from naspipe.report.plotting import no_data, render
from naspipe.report.section import Figure
from naspipe.report.sim_table2 import sim_frame


def build(inputs: ReportInputs) -> Figure:
    frame = sim_frame(inputs).dropna(subset=["throughput_vs_gpipe"])
    stages = sorted(frame["stages"].unique()) or [0]

    def draw(axes: Any) -> None:
        axes = list(axes) if len(stages) > 1 else [axes]
        for ax, d in zip(axes, stages, strict=True):
            rows = frame[frame["stages"] == d]
            if rows.empty:
                no_data(ax)
                continue
            sns.barplot(data=rows, x="space", y="throughput_vs_gpipe", hue="system", ax=ax)
            ax.axhline(1.0, color="black", linewidth=0.8)
            hw = ", ".join(sorted(rows["hardware"].unique()))
            ax.set(title=f"simulated on {hw}, D={d}: throughput / GPipe", ylabel="x GPipe")

    return Figure("sim_fig5_throughput", "Figure 5 (simulated): throughput normalised to GPipe",
                  render(draw, len(stages)), _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No simulated space has a GPipe run that fits to normalise by."
    csp = frame[frame["system"] == "csp"]
    if csp.empty:
        return "No simulated NASPipe (csp) runs."
    return (f"Simulated NASPipe ranges {csp['throughput_vs_gpipe'].min():.2f}x-{csp['throughput_vs_gpipe'].max():.2f}x "
            "GPipe over the spaces and stage counts simulated (paper: 1.1x-7.8x on its testbed).")
