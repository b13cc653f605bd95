"""Figure 4 (search quality): the score of a fixed subnet sample against training time, per system.

Each curve is one run (per system its largest stage count, and the sequential reference)
scored at every checkpoint by ``naspipe evaluate --every-checkpoint``: the mean over the
sampled subnets of the space's metric (BLEU for NLP, top-1 for CV, loss otherwise) at the
checkpoint's wall time since the run started. The paper's point: systems that keep the
sequential semantics reach the same scores, a faster one sooner.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import seaborn as sns

from naspipe.report.inputs import ReportInputs
from naspipe.report.plotting import render_facets
from naspipe.report.section import Figure

METRIC_ORDER = ("bleu", "top1", "loss")


def curve_frame(inputs: ReportInputs) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    for frame in inputs.curves:
        metric = next((m for m in METRIC_ORDER if m in frame.columns), None)
        if metric is None:
            continue
        for (space, system, stages, seed, step, wall), group in frame.groupby(
                ["space", "system", "stages", "seed", "step", "wall_s"], sort=False):
            if wall == "":
                continue
            rows.append({"space": space, "run": f"{system} D={stages} seed {seed}", "step": int(step),
                         "time_s": float(wall), "metric": metric, "score": group[metric].astype(float).mean()})
    frame = pd.DataFrame(rows, columns=["space", "run", "step", "time_s", "metric", "score"])
    return frame.sort_values(["space", "run", "step"]).reset_index(drop=True)


def build(inputs: ReportInputs) -> Figure:
    frame = curve_frame(inputs)
    spaces = sorted(frame["space"].unique())

    def draw(ax: Any, space: str) -> None:
        part = frame[frame["space"] == space]
        sns.lineplot(data=part, x="time_s", y="score", hue="run", marker="o", ax=ax, estimator=None, sort=False)
        ax.set(title=f"{space}: subnet score against training time", xlabel="training time (s)",
               ylabel=f"mean {part['metric'].iloc[0]} of the sampled subnets")

    return Figure("fig4_search_score", "Figure 4 (search quality): subnet score against training time",
                  render_facets(draw, spaces), _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No score-over-time curve was given (set search.checkpoint_every for more than the final point)."
    text = []
    for space, group in frame.groupby("space", sort=True):
        last = group.sort_values("step").groupby("run").tail(1).sort_values("time_s")
        first = last.iloc[0]
        text.append(f"In `{space}` {first['run']} reaches its final {first['metric']} {first['score']:.4g} first "
                    f"({first['time_s']:.3g} s); final scores range {last['score'].min():.4g}-"
                    f"{last['score'].max():.4g}.")
    return " ".join(text)
