"""Figure 7: throughput and bubble ratio against the stage count per system (paper Figure 7, two panels).

Both come from Table 2's medians. More stages add pipeline parallelism only when the
scheduler keeps stages busy: the bubble panel shows how much of the added capacity idles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import seaborn as sns

from naspipe.report.inputs import ReportInputs
from naspipe.report.plotting import no_data, render
from naspipe.report.section import Figure
from naspipe.report.table2_systems import system_frame


def build(inputs: ReportInputs) -> Figure:
    frame = system_frame(inputs)
    return Figure("fig7_scaling", "Figure 7: throughput and bubble against stage count",
                  render_scaling(frame, lambda label: f"{label} against stages"), _reading(frame))


def render_scaling(frame: pd.DataFrame, title: Callable[[str], str]) -> bytes:
    """The two Figure 7 panels (throughput, bubble against D per system), measured or simulated."""
    style = "space" if frame["space"].nunique() > 1 else None

    def draw(axes: Any) -> None:
        for ax, metric, label in zip(axes, ("throughput_samples_s", "bubble_ratio"),
                                     ("throughput (samples/s)", "bubble ratio"), strict=True):
            if frame.empty:
                no_data(ax)
                continue
            marks = {"style": style, "markers": True, "dashes": False} if style else {"marker": "o"}
            sns.lineplot(data=frame, x="stages", y=metric, hue="system", ax=ax, **marks)
            ax.set(title=title(label), xlabel="stages D", ylabel=label)
            ax.set_xticks(sorted(frame["stages"].unique()))
        if not frame.empty:  # one legend, beside the second panel, covering no data
            axes[0].get_legend().remove()
            sns.move_legend(axes[1], "upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)

    return render(draw, 2)


def _reading(frame: pd.DataFrame) -> str:
    multi = frame[frame.groupby(["space", "system"])["stages"].transform("nunique") > 1] if not frame.empty else frame
    if multi.empty:
        return "No system ran at more than one stage count."
    text = []
    for (space, system), group in multi.groupby(["space", "system"], sort=True):
        lo, hi = group.loc[group["stages"].idxmin()], group.loc[group["stages"].idxmax()]
        text.append(f"`{space}` {system}: D={lo.stages} to D={hi.stages} scales throughput "
                    f"{hi.throughput_samples_s / lo.throughput_samples_s:.2f}x, bubble {lo.bubble_ratio:.2f} to "
                    f"{hi.bubble_ratio:.2f}.")
    return " ".join(text)
