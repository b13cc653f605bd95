"""Simulated Figure 5: throughput normalised to GPipe per space at each simulated stage count,
with the paper's value beside each of our bars (hatched).

From :mod:`naspipe.report.sim_table2`'s frame; one panel per stage count, marked with the
hardware spec. The paper's bars are its 8-GPU values (Table 2's GPU ALU ratios, which are
exactly the ranges section 5.1 states; :mod:`naspipe.claims.paper`), drawn in every panel
so agreement and disagreement show at a glance; a reading names the gap per space.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import seaborn as sns
from matplotlib.patches import Patch

from naspipe.claims.paper import PAPER_STAGES, paper_vs_gpipe
from naspipe.report.inputs import ReportInputs, system_rank
from naspipe.report.plotting import no_data, render
from naspipe.report.section import Figure
from naspipe.report.sim_table2 import on_testbed, sim_frame


def paired(frame: pd.DataFrame) -> pd.DataFrame:
    """Our normalised throughput per (stages, space, system) with the paper's 8-GPU value beside it."""
    return frame.merge(paper_vs_gpipe(), on=["space", "system"], how="left")


def draw_panel(ax: Any, rows: pd.DataFrame, title: str) -> None:
    spaces = sorted(rows["space"].unique())
    systems = sorted(rows["system"].unique(), key=system_rank)
    colours = dict(zip(systems, sns.color_palette(n_colors=len(systems)), strict=True))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        at = rows[rows["system"] == system].set_index("space")
        for j, space in enumerate(spaces):
            x = j - 0.4 + width * (i + 0.5)
            if space in at.index:
                if not pd.isna(at.at[space, "throughput_vs_gpipe"]):
                    ax.bar(x - width / 4, at.at[space, "throughput_vs_gpipe"], width / 2, color=colours[system])
                paper = at.at[space, "paper_vs_gpipe"]
                if not pd.isna(paper):
                    ax.bar(x + width / 4, paper, width / 2, color="white", edgecolor=colours[system], hatch="///")
    ax.axhline(1.0, color="black", linewidth=0.8)
    unfit = sorted(rows.loc[rows["throughput_vs_gpipe"].isna(), "space"].unique())
    if unfit:  # GPipe cannot fit one sample there: nothing of ours to normalise, the paper's bars stay
        ax.text(0.02, 0.98, f"GPipe cannot fit one sample: {', '.join(unfit)}", transform=ax.transAxes, va="top",
                fontsize="small")
    ax.set_xticks(range(len(spaces)), spaces)
    ax.set(title=title, ylabel="x GPipe")
    handles = [Patch(color=colours[s], label=s) for s in systems]
    handles.append(Patch(facecolor="white", edgecolor="grey", hatch="///", label=f"paper ({PAPER_STAGES} GPUs)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


def build(inputs: ReportInputs) -> Figure:
    frame = paired(on_testbed(sim_frame(inputs)))
    stages = sorted(frame["stages"].unique()) or [0]

    def draw(axes: Any) -> None:
        axes = list(axes) if len(stages) > 1 else [axes]
        for ax, d in zip(axes, stages, strict=True):
            rows = frame[frame["stages"] == d]
            if rows.empty:
                no_data(ax)
                continue
            hw = ", ".join(sorted(rows["hardware"].unique()))
            draw_panel(ax, rows, f"simulated on {hw}, D={d} (solid) and paper (hatched)")

    return Figure("sim_fig5_throughput", "Figure 5 (simulated): throughput normalised to GPipe, beside the paper's",
                  render(draw, len(stages), width=7.5), _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    frame = frame.dropna(subset=["throughput_vs_gpipe"])
    if frame.empty:
        return "No simulated space has a GPipe run that fits to normalise by."
    csp = frame[frame["system"] == "csp"]
    if csp.empty:
        return "No simulated NASPipe (csp) runs."
    paper = paper_vs_gpipe()
    paper = paper.loc[paper["system"] == "csp", "paper_vs_gpipe"]
    text = [f"Simulated NASPipe ranges {csp['throughput_vs_gpipe'].min():.2f}x-{csp['throughput_vs_gpipe'].max():.2f}x "
            f"GPipe over the spaces and stage counts simulated (paper: {paper.min():.2f}x-{paper.max():.2f}x over "
            "its six spaces on its testbed)."]
    at_paper = csp[(csp["stages"] == PAPER_STAGES) & csp["paper_vs_gpipe"].notna()]
    text += [f"`{r.space}` at D={PAPER_STAGES}: ours {r.throughput_vs_gpipe:.2f}x against the paper's "
             f"{r.paper_vs_gpipe:.2f}x ({r.throughput_vs_gpipe / r.paper_vs_gpipe:.2f} of it)."
             for r in at_paper.itertuples()]
    text.append(f"Hatched bars: the paper's ratio at {PAPER_STAGES} GPUs (Table 2's GPU ALU column over GPipe's, which "
                "is what section 5.1's ranges are).")
    return " ".join(text)
