"""Figure 6: NASPipe's ablations (paper section 5.3) beside the full system.

Each ablation run (``naspipe report --ablations DIR ...``, written by the workflow's
``ablation`` rule) is labelled by what it switches off: ``naspipe`` (csp with the device
cache, the predictor and per-subnet partitions with mirroring), ``no-predictor`` (the cache
fetches on demand), ``no-mirroring`` (one static partition for every subnet),
``no-scheduler`` (one subnet in the pipeline at a time). Throughput is normalised to ``naspipe`` at the same
space and stage count (which cancels the machine's speed); the bubble ratio is beside it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import seaborn as sns

from naspipe import systems
from naspipe.report.inputs import ReportInputs
from naspipe.report.plotting import no_data, render
from naspipe.report.runinfo import RunInfo
from naspipe.report.section import Figure


def variant(run: RunInfo) -> str:
    """What the run switches off, from its config (the workflow's variant names)."""
    config = run.metrics["config"]
    cache = config.get("cache", {})
    ablation = systems.get(run.system).ablation if run.system in systems.names() else None
    if ablation is not None:
        name = ablation  # an ablation system is named by the part it switches off
    elif run.system == "csp" and cache.get("enabled") and not cache.get("horizon"):
        name = "no-predictor"  # the full system with the predictor's horizon at 0
    elif run.system == "csp":
        name = "naspipe" if config.get("partition_mode") == "per-subnet" else "no-mirroring"
    else:
        name = run.system
    return name if cache.get("enabled", False) else f"{name} (no cache)"


def ablation_frame(inputs: ReportInputs) -> pd.DataFrame:
    rows = [{"space": r.space, "stages": r.stages, "seed": r.seed, "variant": variant(r),
             "throughput": r.metrics["throughput_samples_s"], "bubble_ratio": r.metrics["bubble_ratio"],
             "cache_hit_rate": r.metrics.get("cache_hit_rate", float("nan"))} for r in inputs.ablations]
    frame = pd.DataFrame(rows, columns=["space", "stages", "seed", "variant", "throughput", "bubble_ratio",
                                        "cache_hit_rate"])
    if frame.empty:
        return frame.assign(throughput_vs_naspipe=pd.Series(dtype=float))
    frame = frame.groupby(["space", "stages", "variant"], as_index=False).median(numeric_only=True)
    full = frame[frame["variant"] == "naspipe"].set_index(["space", "stages"])["throughput"]
    keys = pd.MultiIndex.from_frame(frame[["space", "stages"]])
    frame["throughput_vs_naspipe"] = frame["throughput"].to_numpy() / full.reindex(keys).to_numpy()
    return frame.sort_values(["space", "stages", "variant"]).reset_index(drop=True)


def build(inputs: ReportInputs) -> Figure:
    frame = ablation_frame(inputs)

    def draw(ax: Any) -> None:
        rows = frame.dropna(subset=["throughput_vs_naspipe"])
        if rows.empty:
            no_data(ax)
            return
        sns.barplot(data=rows, x="space", y="throughput_vs_naspipe", hue="variant", ax=ax)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set(title="ablations: throughput normalised to NASPipe", ylabel="x NASPipe")

    return Figure("fig6_ablation", "Figure 6: ablations (no predictor, no mirroring, no scheduler)", render(draw),
                  _reading(frame), data=frame)


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No ablation runs were given (the workflow's `ablation` rule writes them)."
    text = []
    for (space, stages), group in frame.groupby(["space", "stages"], sort=True):
        parts = ", ".join(f"{r.variant} {r.throughput:.1f} samples/s (bubble {r.bubble_ratio:.2f})"
                          for r in group.itertuples())
        text.append(f"`{space}` at D={int(stages)}: {parts}.")
    return " ".join(text)
