"""The search's convergence: best score found so far against generation, per searched run.

One line per search (per space, the searches of each system's largest stage count and of
the sequential reference): the best candidate score after each generation, from the
search's ``candidates.csv``. Searches over CSP runs read bitwise the same supernet as the
sequential one, so their lines coincide.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import seaborn as sns

from naspipe.report.inputs import ReportInputs
from naspipe.report.plotting import render_facets
from naspipe.report.section import Figure


def convergence_frame(inputs: ReportInputs) -> pd.DataFrame:
    shown: dict[tuple[str, str], Any] = {}
    for result in inputs.searches:
        space, system, stages, seed = result.key
        held = shown.get((space, system))
        if held is None or (stages, -seed) > (held.key[2], -held.key[3]):
            shown[(space, system)] = result
    rows: list[dict[str, Any]] = []
    for (space, system), result in sorted(shown.items()):
        scores = result.candidates.assign(generation=result.candidates["generation"].astype(int),
                                          score=result.candidates["score"].astype(float))
        best = scores.groupby("generation")["score"].max().cummax()
        metric = str(result.best["metric"])
        rows += [{"space": space, "search": f"{system} D={result.key[2]}", "generation": int(g),
                  "best_score": float(v), "metric": metric} for g, v in best.items()]
    return pd.DataFrame(rows, columns=["space", "search", "generation", "best_score", "metric"])


def build(inputs: ReportInputs) -> Figure:
    frame = convergence_frame(inputs)
    spaces = sorted(frame["space"].unique())

    def draw(ax: Any, space: str) -> None:
        part = frame[frame["space"] == space]
        metric = part["metric"].iloc[0]
        sns.lineplot(data=part, x="generation", y="best_score", hue="search", marker="o", ax=ax, estimator=None)
        ax.set(title=f"{space}: search convergence", xlabel="generation",
               ylabel=f"best {metric}" if metric != "loss" else "best -loss")

    return Figure("fig_search_convergence", "Search convergence: best score against generation",
                  render_facets(draw, spaces), _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No search was given."
    text = []
    for space, group in frame.groupby("space", sort=True):
        final = group.groupby("search")["best_score"].last()
        gain = group.groupby("search")["best_score"].agg(lambda s: s.iloc[-1] - s.iloc[0])
        text.append(f"In `{space}` the best score after the last generation ranges {final.min():.4g}-"
                    f"{final.max():.4g}; later generations improved on generation 0 by up to {gain.max():.4g}.")
    return " ".join(text)
