"""Simulated Figure 7: throughput and bubble against the stage count, per space and system.

From :mod:`naspipe.report.sim_table2`'s frame (the paper's Figure 7 uses NLP.c1 at 4 to 16
GPUs); marked with the hardware spec it was simulated on.
"""

from __future__ import annotations

import pandas as pd

from naspipe.report.fig7_scaling import render_scaling
from naspipe.report.inputs import ReportInputs
from naspipe.report.section import Figure
from naspipe.report.sim_table2 import sim_frame


def build(inputs: ReportInputs) -> Figure:
    frame = sim_frame(inputs)
    frame = frame[frame["fits"].astype(bool)]
    hw = ", ".join(sorted(frame["hardware"].unique())) or "none"
    return Figure("sim_fig7_scaling", "Figure 7 (simulated): throughput and bubble against stage count",
                  render_scaling(frame, lambda label: f"simulated on {hw}: {label}"), _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty or frame["stages"].nunique() < 2:
        return "No simulated system ran at more than one stage count."
    text = []
    for (space, system), group in frame.groupby(["space", "system"], sort=True):
        if group["stages"].nunique() < 2:
            continue
        lo, hi = group.loc[group["stages"].idxmin()], group.loc[group["stages"].idxmax()]
        text.append(f"`{space}` {system}: D={lo.stages} to D={hi.stages} scales simulated throughput "
                    f"{hi.throughput_samples_s / lo.throughput_samples_s:.2f}x.")
    return " ".join(text)
