"""Table 2: throughput, bubble and execution time per space, system and stage count, measured here.

The paper's Table 2 comes from a GPU cluster; this one is measured on the machine that ran
the workflow, so only ratios between systems run side by side mean anything. Several seeds
give the median, as DESIGN.md asks for noisy shared machines. Throughput is also shown
normalised to GPipe at the same space and stage count (empty when GPipe did not run there).
"""

from __future__ import annotations

import pandas as pd

from naspipe.report.inputs import ReportInputs, system_rank
from naspipe.report.section import Table

METRICS = ("throughput_samples_s", "bubble_ratio", "exec_s")


def system_frame(inputs: ReportInputs) -> pd.DataFrame:
    """One row per (space, system, stages): medians over seeds, throughput relative to gpipe."""
    columns = ["space", "system", "stages", "seeds", *METRICS, "throughput_vs_gpipe"]
    raw = pd.DataFrame([{"space": r.space, "system": r.system, "stages": r.stages, "seed": r.seed,
                         **{m: float(r.metrics[m]) for m in METRICS}} for r in inputs.runs])
    if raw.empty:
        return pd.DataFrame(columns=columns)
    grouped = raw.groupby(["space", "system", "stages"], as_index=False)
    frame = grouped[list(METRICS)].median().merge(grouped["seed"].nunique().rename(columns={"seed": "seeds"}))
    gpipe = frame[frame["system"] == "gpipe"].set_index(["space", "stages"])["throughput_samples_s"]
    keys = list(zip(frame["space"], frame["stages"], strict=True))
    frame["throughput_vs_gpipe"] = [frame["throughput_samples_s"].iat[i] / gpipe[k] if k in gpipe.index else float("nan")
                                    for i, k in enumerate(keys)]
    frame = frame.assign(_rank=[system_rank(s) for s in frame["system"]]).sort_values(["space", "_rank", "stages"])
    return frame[columns].reset_index(drop=True)


def build(inputs: ReportInputs) -> Table:
    frame = system_frame(inputs)
    title = "Table 2: throughput, bubble and execution time per system (measured on this machine)"
    return Table("table2_systems", title, frame, _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No runs were given."
    text = [("Measured on this machine, not on the paper's GPU cluster: compare systems with each other, not with "
             "the paper's absolute numbers.")]
    for space, group in frame.groupby("space", sort=True):
        both = group.groupby("stages")["system"].agg(lambda s: {"csp", "gpipe"} <= set(s))
        top = int(both[both].index.max()) if both.any() else int(group["stages"].max())
        at = group[group["stages"] == top].set_index("system")
        if "csp" in at.index and "gpipe" in at.index:
            text.append(f"In `{space}` at D={top}, CSP runs at {at.at['csp', 'throughput_vs_gpipe']:.2f}x GPipe's "
                        f"throughput with bubble {at.at['csp', 'bubble_ratio']:.2f} against GPipe's "
                        f"{at.at['gpipe', 'bubble_ratio']:.2f}.")
        else:
            best = at["throughput_samples_s"].idxmax()
            text.append(f"In `{space}` at D={top}, {best} has the highest throughput "
                        f"({at.at[best, 'throughput_samples_s']:.4g} samples/s).")
    return " ".join(text)
