"""Simulated Figure 7: throughput against the stage count, a panel per hardware spec and space, a line per system.

From :mod:`naspipe.report.sim_table2`'s frame (the paper's Figure 7 uses NLP.c1 at 4 to 16 GPUs): for each
hardware spec simulated (the paper plan simulates its testbed and the plan's own hardware) and each space,
samples/s against D for every system, so a reader sees which systems gain from more GPUs on which machine
and space; the bubble ratio of every run is in the simulated Table 2. A panel per space, not a marker per
space: the spaces' throughputs differ by an order of magnitude, and one panel's lines then crossed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import seaborn as sns

from naspipe.report.inputs import ReportInputs, system_rank
from naspipe.report.plotting import render_facets
from naspipe.report.section import Figure
from naspipe.report.sim_gpus import layout_frame
from naspipe.report.sim_table2 import sim_frame

PANELS_PER_ROW = 4


LAYOUT = " (stages x replicas)"  # the label of a system's line on GPU counts, each in its chosen layout


def build(inputs: ReportInputs) -> Figure:
    frame = sim_frame(inputs)
    frame = frame[frame["fits"].astype(bool)]
    layouts = layout_frame(inputs)
    if not layouts.empty:  # on as many GPUs as stages, beside: the layout chosen for each GPU count
        frame = pd.concat([frame, layouts.assign(system=layouts["system"] + LAYOUT, stages=layouts["gpus"])[
            ["hardware", "space", "system", "stages", "throughput_samples_s"]]], ignore_index=True)
    facets = [f"{hw}|{space}" for hw in sorted(frame["hardware"].unique())
              for space in sorted(frame[frame["hardware"] == hw]["space"].unique())]
    order = sorted(frame["system"].unique(), key=lambda s: (system_rank(s.removesuffix(LAYOUT)), s))

    def draw(ax: Any, facet: str) -> None:
        hw, space = facet.split("|")
        rows = frame[(frame["hardware"] == hw) & (frame["space"] == space)]
        sns.lineplot(data=rows, x="stages", y="throughput_samples_s", hue="system", hue_order=order, marker="o",
                     ax=ax)
        ax.set(title=f"{space} on {hw}", xlabel="GPUs (stages D; D x R with replicas)", ylabel="throughput (samples/s)")
        ticks = sorted(rows["stages"].unique())
        if ticks and ticks[-1] > 4 * ticks[0]:
            ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        sns.move_legend(ax, "best", frameon=False, fontsize="small")

    return Figure("sim_fig7_scaling", "Figure 7 (simulated): throughput against stage count, per space",
                  render_facets(draw, facets, wrap=PANELS_PER_ROW), _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty or frame["stages"].nunique() < 2:
        return "No simulated system ran at more than one stage count."
    text = []
    for (hw, space, system), group in frame.groupby(["hardware", "space", "system"], sort=True):
        if group["stages"].nunique() < 2:
            continue
        lo, hi = group.loc[group["stages"].idxmin()], group.loc[group["stages"].idxmax()]
        unit = "GPUs " if system.endswith(LAYOUT) else "D="  # (a layout line: GPU counts, each its own layout)
        text.append(f"`{space}` {system} on {hw}: {unit}{lo.stages} to {unit}{hi.stages} scales simulated "
                    f"throughput {hi.throughput_samples_s / lo.throughput_samples_s:.2f}x.")
    return " ".join(text)
