"""Simulated Figure 7: throughput and bubble against the stage count, per hardware spec, space and system.

From :mod:`naspipe.report.sim_table2`'s frame (the paper's Figure 7 uses NLP.c1 at 4 to 16 GPUs): for
each hardware spec simulated (the paper plan simulates its testbed and the plan's own hardware), samples/s
and bubble against D for every system, so a reader sees which systems gain from more GPUs on which machine.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import seaborn as sns

from naspipe.report.inputs import ReportInputs
from naspipe.report.plotting import render_facets
from naspipe.report.section import Figure
from naspipe.report.sim_table2 import sim_frame

METRICS = {"throughput_samples_s": "throughput (samples/s)", "bubble_ratio": "bubble ratio"}


def build(inputs: ReportInputs) -> Figure:
    frame = sim_frame(inputs)
    frame = frame[frame["fits"].astype(bool)]
    facets = [f"{hw}|{metric}" for hw in sorted(frame["hardware"].unique()) for metric in METRICS]
    style = "space" if frame["space"].nunique() > 1 else None

    def draw(ax: Any, facet: str) -> None:
        hw, metric = facet.split("|")
        rows = frame[frame["hardware"] == hw]
        marks = {"style": style, "markers": True, "dashes": False} if style else {"marker": "o"}
        sns.lineplot(data=rows, x="stages", y=metric, hue="system", ax=ax, **marks)
        ax.set(title=f"simulated on {hw}: {METRICS[metric]}", xlabel="stages D", ylabel=METRICS[metric])
        ax.set_xticks(sorted(rows["stages"].unique()))
        if metric == "throughput_samples_s":
            ax.get_legend().remove()
        else:
            sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize="small")

    return Figure("sim_fig7_scaling", "Figure 7 (simulated): throughput and bubble against stage count",
                  render_facets(draw, facets), _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty or frame["stages"].nunique() < 2:
        return "No simulated system ran at more than one stage count."
    text = []
    for (hw, space, system), group in frame.groupby(["hardware", "space", "system"], sort=True):
        if group["stages"].nunique() < 2:
            continue
        lo, hi = group.loc[group["stages"].idxmin()], group.loc[group["stages"].idxmax()]
        text.append(f"`{space}` {system} on {hw}: D={lo.stages} to D={hi.stages} scales simulated throughput "
                    f"{hi.throughput_samples_s / lo.throughput_samples_s:.2f}x.")
    return " ".join(text)
