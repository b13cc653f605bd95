"""Figure 4: training loss against time per system, one panel per space (paper Figure 4).

A step's time is when its subnet's forward ends on the last stage (the ``forward`` trace
event with ``args.subnet == y`` on the last stage's row); a run whose trace lacks it falls
back to ``(y + 1) * makespan_s / subnets``, i.e. steps spread evenly over the run. Each
system shows its run at the largest stage count (lowest seed), with a rolling mean so the
curves read through the per-batch noise (in time order: a pipelined step may finish
before an earlier one). Losses are identical for CSP and sequential, so a
faster system reaches each loss earlier: the gap between curves is the speedup.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pandas as pd
import seaborn as sns

from naspipe.errors import UsageError
from naspipe.report.inputs import ReportInputs
from naspipe.report.plotting import render_facets
from naspipe.report.runinfo import RunInfo
from naspipe.report.section import Figure


def read_losses(run: RunInfo) -> dict[int, float]:
    path = run.path / "losses.csv"
    try:
        with path.open(encoding="utf-8", newline="") as f:
            return {int(r["subnet"]): float.fromhex(r["loss_hex"]) for r in csv.DictReader(f)}
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    except (KeyError, ValueError) as exc:
        raise UsageError(f"{path}: malformed losses ({exc})") from None


def step_times(run: RunInfo, steps: list[int]) -> dict[int, float]:
    """Seconds from the run's start to the end of each step's forward on the last stage."""
    ends = _forward_ends(run.path / "trace.json", run.stages - 1)
    per_step = float(run.metrics["makespan_s"]) / max(int(run.metrics["subnets"]), 1)
    return {y: ends.get(y, (y + 1) * per_step) for y in steps}


def _forward_ends(path: Path, last_stage: int) -> dict[int, float]:
    try:
        events = json.loads(path.read_text(encoding="utf-8")).get("traceEvents", [])
    except (OSError, json.JSONDecodeError, AttributeError):
        return {}
    ends: dict[int, float] = {}
    for e in events:
        subnet = e.get("args", {}).get("subnet") if isinstance(e, dict) else None
        if e.get("cat") == "forward" and e.get("tid") == last_stage and isinstance(subnet, int) and "ts" in e:
            ends[subnet] = max(ends.get(subnet, 0.0), (float(e["ts"]) + float(e.get("dur", 0.0))) / 1e6)
    return ends


def shown_runs(inputs: ReportInputs, space: str) -> list[RunInfo]:
    """Per system, the run at its largest stage count (lowest seed among those)."""
    best: dict[str, RunInfo] = {}
    for run in inputs.runs_of(space):
        held = best.get(run.system)
        if held is None or (run.stages, -run.seed) > (held.stages, -held.seed):
            best[run.system] = run
    return list(best.values())


def loss_frame(inputs: ReportInputs) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    for space in inputs.spaces:
        for run in shown_runs(inputs, space):
            losses = read_losses(run)
            times = step_times(run, sorted(losses))
            order = sorted(losses, key=lambda y: (times[y], y))  # in time: pipelined steps may end out of order
            window = min(len(losses), max(3, len(losses) // 10)) or 1
            smooth = pd.Series([losses[y] for y in order]).rolling(window, min_periods=1).mean()
            rows += [{"space": space, "run": f"{run.system} D={run.stages}", "step": y, "time_s": times[y],
                      "loss": losses[y], "loss_smooth": float(s)} for y, s in zip(order, smooth, strict=True)]
    return pd.DataFrame(rows, columns=["space", "run", "step", "time_s", "loss", "loss_smooth"])


def build(inputs: ReportInputs) -> Figure:
    frame = loss_frame(inputs)
    spaces = sorted(frame["space"].unique())

    def draw(ax: Any, space: str) -> None:
        sns.lineplot(data=frame[frame["space"] == space], x="time_s", y="loss_smooth", hue="run", ax=ax,
                     estimator=None, sort=False)
        ax.set(title=f"{space}: training loss (rolling mean)", xlabel="time (s)", ylabel="loss")

    png = render_facets(draw, spaces)
    return Figure("fig4_loss_vs_time", "Figure 4: training loss against time", png, _reading(frame))


def _reading(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No runs were given."
    text = []
    for space, group in frame.groupby("space", sort=True):
        ends = group.groupby("run")["time_s"].max().sort_values()
        text.append(f"In `{space}` {ends.index[0]} finishes its {group['step'].max() + 1} steps first "
                    f"({ends.iloc[0]:.3g} s) and {ends.index[-1]} last ({ends.iloc[-1]:.3g} s).")
    return " ".join(text) + " Curves of systems identical to sequential have the same shape, shifted in time."
