"""Simulated Figure 7: throughput and bubble against the stage count, per space and system.

From :mod:`naspipe.report.sim_table2`'s frame (the paper's Figure 7 uses NLP.c1 at 4 to 16
GPUs); marked with the hardware spec it was simulated on.
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
    frame = sim_frame(inputs)
    frame = frame[frame["fits"].astype(bool)]
    style = "space" if frame["space"].nunique() > 1 else None
    hw = ", ".join(sorted(frame["hardware"].unique())) or "none"

    def draw(axes: Any) -> None:
        for ax, metric, label in zip(axes, ("throughput_samples_s", "bubble_ratio"),
                                     ("throughput (samples/s)", "bubble ratio"), strict=True):
            if frame.empty:
                no_data(ax)
                continue
            marks = {"style": style, "markers": True, "dashes": False} if style else {"marker": "o"}
            sns.lineplot(data=frame, x="stages", y=metric, hue="system", ax=ax, **marks)
            ax.set(title=f"simulated on {hw}: {label}", xlabel="stages D", ylabel=label)
            ax.set_xticks(sorted(frame["stages"].unique()))

    return Figure("sim_fig7_scaling", "Figure 7 (simulated): throughput and bubble against stage count",
                  render(draw, 2), _reading(frame))


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
