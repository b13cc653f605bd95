""""What this run shows": one line per phenomenon of the paper, with this run's own numbers.

The claims section checks the paper's numbers; this section tells a reader which of the
paper's *phenomena* the run they just made actually shows, and why not where it does not:

- training learns: the rolling-mean loss at the end against the start, per space (CSP's target:
  at most :data:`LOSS_TARGET` of the start), and the same ratio for every other system;
- reproducibility: CSP's final loss is one value at every stage count while the BSP (GPipe)
  and ASP (PipeDream) final losses spread over the stage counts (Table 3);
- search: the search winner, retrained alone, scores better than the median random subnet
  retrained the same way;
- throughput: CSP against GPipe at the largest stage count (Table 2, Figure 5), and what that
  ratio means when every stage process shares the same few CPU cores;
- the machine is used: the workflow's CPU% on its cores, the jobs' CPU seconds over the span
  from the first job's start to the last one's end, from the job clock's records
  (naspipe.plan.jobclock: every job's whole process tree, stage processes included). The
  report is the workflow's last job and cannot time itself: its own CPU is not counted. Jobs
  submitted to SLURM ran on cores of their own allocations: the line then counts and names
  them (job ids, hosts) and says the CPU% is not measured.

Every number is computed from the tables the other sections build (Table 2, Table 3), the
run directories Figure 4 reads and the job clock's file beside them; nothing is typed in. The
pure functions below take those frames, so the section can be checked against the tables it
summarises.
"""

from __future__ import annotations

import csv
import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from naspipe.errors import UsageError
from naspipe.plan import jobclock, paths
from naspipe.report.fig4_loss import read_losses
from naspipe.report.fig5_throughput import largest_stage_rows
from naspipe.report.inputs import ReportInputs, system_rank
from naspipe.report.section import Table
from naspipe.report.table2_systems import system_frame
from naspipe.report.table3_reproducibility import repro_frame

NAME = "run_summary"
TITLE = "What this run shows"
COLUMNS = ["phenomenon", "space", "measured", "target", "shows", "why"]
LOSS_TARGET = 0.70  # the bar for "visibly learns": the end's rolling mean at most 70% of the start's
SPREAD_SYSTEMS = ("gpipe", "pipedream")  # the BSP and ASP baselines whose final loss should move with D
CORE_SHARE = 0.85  # the bar, CPU% >= 170 on 2 cores: 85% of every core busy on average


def rolling_ends(losses: Sequence[float]) -> tuple[float, float]:
    """Mean loss over the first and over the last window of steps (window as Figure 4's rolling mean)."""
    window = min(len(losses), max(3, len(losses) // 10))
    return statistics.fmean(losses[:window]), statistics.fmean(losses[-window:])


def loss_frame(curves: Mapping[tuple[str, str], Sequence[float]]) -> pd.DataFrame:
    """Per (space, system): the start and end rolling means and their ratio, from per-step losses in step order."""
    rows = []
    for (space, system), losses in curves.items():
        start, end = rolling_ends(losses)
        rows.append({"space": space, "system": system, "steps": len(losses), "start": start, "end": end,
                     "ratio": end / start if start else float("nan")})
    return pd.DataFrame(rows, columns=["space", "system", "steps", "start", "end", "ratio"])


def loss_rows(frame: pd.DataFrame) -> list[dict[str, str]]:
    """One line per space: CSP's end/start ratio against the target, every other system's ratio beside it."""
    rows = []
    for space, group in frame.groupby("space", sort=True):
        group = group.set_index("system")
        others = ", ".join(f"{s} {group.at[s, 'ratio']:.2f}" for s in sorted(group.index, key=system_rank)
                           if s != "csp")
        if "csp" not in group.index:
            rows.append(_row("training loss falls", str(space), f"no csp run; {others}", f"csp <= {LOSS_TARGET:.2f}",
                             "not measured", "csp did not run in this space"))
            continue
        csp = group.loc["csp"]
        shows = bool(csp["ratio"] <= LOSS_TARGET)
        measured = (f"csp {csp['end']:.4g} / {csp['start']:.4g} = {csp['ratio']:.2f} of the start over "
                    f"{int(csp['steps'])} steps" + (f"; {others}" if others else ""))
        why = "" if shows else (f"the loss fell only to {csp['ratio']:.0%} of its start in {int(csp['steps'])} steps: "
                                "too few steps or too low a learning rate for this space (config/README.md)")
        rows.append(_row("training loss falls", str(space), measured, f"csp <= {LOSS_TARGET:.2f} of the start",
                         "yes" if shows else "no", why))
    return rows


def spread_rows(table3: pd.DataFrame) -> list[dict[str, str]]:
    """One line per space: CSP's final loss over the stage counts against the baselines' spread (Table 3)."""
    rows: list[dict[str, str]] = []
    if table3.empty:
        return rows
    for space, group in table3.groupby("space", sort=True):
        csp, reference = _csp_points(group)
        stages = sorted(int(d) for d in csp["stages"].unique())
        values = sorted({str(v) for v in csp["final_loss"]})
        spreads = {s: _spread(group[group["system"] == s]) for s in SPREAD_SYSTEMS}
        at = ",".join(f"{d} (sequential)" if reference and d == 1 else str(d) for d in stages)
        measured = ("csp " + ("not compared" if not values else f"{values[0]} at D={at}" if len(values) == 1
                              else f"{len(values)} different values over D={at}")
                    + "".join(f"; {s} spread {v:.3g}" if v is not None else f"; {s} not run"
                              for s, v in spreads.items()))
        differs = (sorted(int(d) for d in csp.loc[csp["identical_to_sequential"] == "no", "stages"])
                   if "identical_to_sequential" in csp else [])
        why = _spread_why(stages, values, spreads, differs)
        rows.append(_row("csp identical across stage counts, baselines spread", str(space), measured,
                         "csp one value at >= 2 stage counts; gpipe and pipedream spread > 0",
                         "no" if why else "yes", why))
    return rows


def fast_rows(table3: pd.DataFrame) -> list[dict[str, str]]:
    """One line per space that trained csp-mb, the fast NASPipe: one final loss and one weights digest over its
    stage counts, each run identical to its reference sequential-mb (Table 3)."""
    rows: list[dict[str, str]] = []
    if table3.empty or "identical_to_sequential" not in table3:
        return rows
    for space, group in table3.groupby("space", sort=True):
        fast = group[(group["system"] == "csp-mb") & (group["identical_to_sequential"] != "")]
        if fast.empty:
            continue
        fast = fast[fast["seed"] == fast["seed"].min()]
        stages = sorted(int(d) for d in fast["stages"].unique())
        values, weights = sorted({str(v) for v in fast["final_loss"]}), sorted(set(fast["weights"]))
        differs = sorted(int(d) for d in fast.loc[fast["identical_to_sequential"] == "no", "stages"])
        at = ",".join(map(str, stages))
        measured = (f"csp-mb {values[0]}, weights {weights[0]} at D={at}" if len(values) == len(weights) == 1
                    else f"csp-mb {len(values)} losses, {len(weights)} weights digests over D={at}")
        why = (f"csp-mb differs from sequential-mb at D={','.join(map(str, differs))}: the reproducibility contract "
               "is broken" if differs else "csp-mb ran at fewer than two stage counts" if len(stages) < 2
               else "" if len(values) == len(weights) == 1 else "csp-mb's result differs between stage counts")
        rows.append(_row("the fast NASPipe (csp-mb) identical across stage counts", str(space), measured,
                         "one loss and one weights digest at >= 2 stage counts, each identical to sequential-mb",
                         "no" if why else "yes", why))
    return rows


def _csp_points(group: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """CSP's final losses per stage count, and whether the sequential reference stands for D = 1.

    CSP at one stage is the sequential reference by contract (DESIGN.md section 2), and the
    workflow trains only the reference there: where csp did not run at D = 1 and Table 3 says
    every csp run is identical to the reference (losses and weights), the reference is csp's
    D = 1 point, with their common final loss. Where one differs, the reference's loss is not
    in Table 3: csp's own stage counts are compared alone (and a difference is named there)."""
    csp = group[group["system"] == "csp"]
    if csp.empty or (csp["stages"].astype(int) == 1).any() or "identical_to_sequential" not in csp:
        return csp, False
    if not (csp["identical_to_sequential"] == "yes").all():
        return csp, False
    return pd.concat([csp.head(1).assign(stages=1), csp]), True


def _spread(rows: pd.DataFrame) -> float | None:
    """max - min of the final losses over the stage counts (first seed), or None when fewer than two ran."""
    rows = rows[rows["seed"] == rows["seed"].min()] if not rows.empty else rows
    if rows["stages"].nunique() < 2:
        return None
    losses = [float(v) for v in rows["final_loss"]]
    return max(losses) - min(losses)


def _spread_why(stages: list[int], values: list[str], spreads: Mapping[str, float | None],
                differs: list[int]) -> str:
    if differs:
        return (f"csp differs from the sequential reference at D={','.join(map(str, differs))}: the "
                "reproducibility contract is broken")
    if len(stages) < 2:
        return "csp ran at fewer than two stage counts"
    if len(values) != 1:
        return "csp's final loss differs between stage counts: the reproducibility contract is broken"
    flat = [s for s, v in spreads.items() if not v]
    if flat:
        return (f"{', '.join(flat)}: no spread or fewer than two stage counts (a baseline's result moves with D "
                "only where its bulk or in-flight window does)")
    return ""


def search_rows(winners: Mapping[str, tuple[str, float]], random: Mapping[str, Sequence[float]],
                lower_is_better: Mapping[str, bool]) -> list[dict[str, str]]:
    """One line per searched space: the retrained winner against the median retrained random subnet."""
    rows = []
    for space in sorted(winners):
        metric, winner = winners[space]
        scores = list(random.get(space, ()))
        if not scores:
            rows.append(_row("search winner beats random subnets", space, f"winner retrained {metric} {winner:.4g}",
                             "winner better than the median random subnet", "not measured",
                             "no random subnet was retrained in this space (report --random-retrained)"))
            continue
        median = statistics.median(scores)
        better = winner < median if lower_is_better.get(space, False) else winner > median
        why = "" if better else ("the search scores subnets with the shared supernet's weights; after few training "
                                 "steps those scores barely rank the subnets (config/README.md)")
        rows.append(_row("search winner beats random subnets", space,
                         f"winner retrained {metric} {winner:.4g} vs median of {len(scores)} random {median:.4g}",
                         "winner better than the median random subnet", "yes" if better else "no", why))
    return rows


def throughput_rows(table2: pd.DataFrame, cores: int | None) -> list[dict[str, str]]:
    """One line per space: CSP's throughput against GPipe's at the largest stage count (Table 2, Figure 5)."""
    rows = []
    top = largest_stage_rows(table2)
    for space, group in top.groupby("space", sort=True):
        at = group.set_index("system")
        if "csp" not in at.index or "gpipe" not in at.index:
            continue
        stages = int(group["stages"].iloc[0])
        ratio = float(at.at["csp", "throughput_vs_gpipe"])
        measured = (f"csp {ratio:.2f}x gpipe at D={stages}; bubble csp {at.at['csp', 'bubble_ratio']:.2f}, "
                    f"gpipe {at.at['gpipe', 'bubble_ratio']:.2f}")
        crowded = cores is not None and stages > cores
        why = "" if ratio > 1.0 else (
            f"{stages} stage processes share {cores} CPU cores, so stages cannot run at once and CSP's fuller "
            "pipeline buys no time: the ratio measures CSP's scheduling overhead here, not its pipelining gain, "
            "which needs one device per stage (the simulated Figure 5)" if crowded else
            "on CPU, compute per subnet dominates and GPipe's flush bubbles are short")
        rows.append(_row("csp faster than gpipe", str(space), measured, "csp > 1.00x gpipe; the paper: 1.1x-7.8x",
                         "yes" if ratio > 1.0 else "no", why))
    return rows


def read_clock(path: Path) -> pd.DataFrame:
    """The job clock's records (naspipe.plan.jobclock.COLUMNS), one row per finished job."""
    names = [*jobclock.COLUMNS, *jobclock.WHERE]
    try:
        frame = pd.read_csv(path, sep="\t", names=names, header=None, quoting=csv.QUOTE_NONE,
                            dtype=dict.fromkeys(["session", "command", *jobclock.WHERE], str), keep_default_na=False)
        frame[["start", "end", "cpu_s"]] = frame[["start", "end", "cpu_s"]].astype(float)
    except (ValueError, pd.errors.ParserError) as exc:
        raise UsageError(f"{path}: not a job clock file ({jobclock.__name__}): {exc}") from None
    return frame


def session_jobs(clock: pd.DataFrame) -> pd.DataFrame:
    """The jobs of the latest workflow invocation that ran any (a report alone, rerun later, is skipped);
    earlier invocations' records stay in the file and would stretch the span with the idle time between."""
    jobs = clock[~clock["command"].str.contains("naspipe report", regex=False)]
    if jobs.empty:
        return jobs
    latest = jobs.loc[jobs["end"].idxmax(), "session"]
    return jobs[jobs["session"] == latest]


def cpu_percent(jobs: pd.DataFrame) -> tuple[float, float, float]:
    """(CPU%, CPU seconds, span seconds): the jobs' CPU over the first start to the last end."""
    span = float(jobs["end"].max() - jobs["start"].min())
    cpu = float(jobs["cpu_s"].sum())
    return (100.0 * cpu / span if span > 0 else float("nan")), cpu, span


def submitted(jobs: pd.DataFrame, allocation: str) -> pd.DataFrame:
    """The jobs that ran as SLURM jobs of their own: an allocation other than ``allocation`` (the report's own,
    "" outside SLURM; a whole workflow run inside one allocation counts its cores as this machine's)."""
    if "slurm_job" not in jobs.columns:
        return jobs.iloc[0:0]
    ids = jobs["slurm_job"].fillna("").astype(str)
    return jobs[(ids != "") & (ids != allocation)]


def id_ranges(ids: Sequence[str]) -> str:
    """SLURM job ids as runs of consecutive numbers ("41-52, 55"); ids that are not numbers as they are."""
    numbers = sorted({int(i) for i in ids if i.isdigit()})
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    text = [f"{a}-{b}" if b > a else str(a) for a, b in runs]
    return ", ".join([*text, *sorted({i for i in ids if not i.isdigit()})])


def cluster_cpu_row(jobs: pd.DataFrame, cluster: pd.DataFrame, target: str) -> dict[str, str]:
    """The CPU line of a run whose jobs went to SLURM: what each job used is known, the cores it had are not."""
    hosts = ", ".join(sorted(set(cluster["host"].astype(str)) - {""})) or "unknown hosts"
    here = len(jobs) - len(cluster)
    measured = (f"{len(jobs)} jobs, {jobs['cpu_s'].sum():.0f} CPU s (every process of each job): {len(cluster)} SLURM "
                f"jobs ({id_ranges(list(cluster['slurm_job'].astype(str)))}) on {hosts} and {here} on the submitting "
                "host (the report's own job not counted)")
    why = (f"{len(cluster)} of the {len(jobs)} jobs ran in SLURM allocations of their own, whose cores are not this "
           "machine's: CPU% against its cores would mean nothing")
    return _row("cores kept busy", "all", measured, target, "not measured", why)


def cpu_row(jobs: pd.DataFrame | None, cores: int | None, allocation: str = "") -> dict[str, str]:
    """The workflow's CPU% against 85% of every core (170% on 2), from its jobs' clock records; ``allocation``:
    the report's own SLURM job id ("" outside SLURM)."""
    target = f"CPU% >= {100 * CORE_SHARE * cores:.0f} on {cores} cores" if cores else "CPU% near 100 x cores"
    if jobs is not None and not submitted(jobs, allocation).empty:
        return cluster_cpu_row(jobs, submitted(jobs, allocation), target)
    if jobs is None or jobs.empty or not cores:
        why = ("the CPU count of this machine is unknown" if jobs is not None and not jobs.empty else
               f"no job clock records ({jobclock.RECORD}) beside the runs: the report ran outside the workflow")
        return _row("cores kept busy", "all", "not measured", target, "not measured", why)
    percent, cpu, span = cpu_percent(jobs)
    shows = percent >= 100 * CORE_SHARE * cores
    measured = (f"{percent:.0f}% CPU: {len(jobs)} jobs, {cpu:.0f} CPU s (every process of each job) in "
                f"{span:.0f} s from the first job's start to the last one's end (the report's own job not counted)")
    why = "" if shows else (f"on average {percent / cores:.0f}% of each of {cores} cores: fewer ready jobs than "
                            "cores (the tail of the longest chain) or jobs waiting (I/O, locks, other users' load)")
    return _row("cores kept busy", "all", measured, target, "yes" if shows else "no", why)


def workflow_jobs(inputs: ReportInputs) -> pd.DataFrame | None:
    """This run's job clock records, found beside its run directories (None when there are none)."""
    layout = Path(paths.path("run")).parts  # results/runs/SPACE/SYSTEM/RUN: results is the run's parents[3]
    depth = len(layout) - 2
    for run in inputs.runs:
        parents = run.path.absolute().parents
        if len(parents) <= depth or parents[depth - 1].name != layout[1]:
            continue  # a run directory given by hand, outside a workflow's results/
        record = parents[depth] / Path(jobclock.RECORD).relative_to(paths.results())
        if record.is_file():
            return session_jobs(read_clock(record))
    return None


def _row(phenomenon: str, space: str, measured: str, target: str, shows: str, why: str) -> dict[str, str]:
    return {"phenomenon": phenomenon, "space": space, "measured": measured, "target": target, "shows": shows,
            "why": why}


def summary_frame(losses: pd.DataFrame, table3: pd.DataFrame, table2: pd.DataFrame,
                  winners: Mapping[str, tuple[str, float]], random: Mapping[str, Sequence[float]],
                  lower_is_better: Mapping[str, bool], cores: int | None,
                  jobs: pd.DataFrame | None = None, allocation: str = "") -> pd.DataFrame:
    rows = [*loss_rows(losses), *spread_rows(table3), *fast_rows(table3),
            *search_rows(winners, random, lower_is_better), *throughput_rows(table2, cores),
            cpu_row(jobs, cores, allocation)]
    return pd.DataFrame(rows, columns=COLUMNS)


def run_curves(inputs: ReportInputs) -> dict[tuple[str, str], list[float]]:
    """Per (space, system) the per-step losses of its longest run (then the largest stage count, lowest seed)."""
    chosen: dict[tuple[str, str], tuple[tuple[int, int, int], list[float]]] = {}
    for run in inputs.runs:
        rank = (int(run.metrics["subnets"]), run.stages, -run.seed)
        key = (run.space, run.system)
        if key not in chosen or rank > chosen[key][0]:
            losses = read_losses(run)
            chosen[key] = (rank, [losses[y] for y in sorted(losses)])
    return {key: losses for key, (_, losses) in chosen.items()}


def search_winners(inputs: ReportInputs) -> tuple[dict[str, tuple[str, float]], dict[str, bool]]:
    """Per space the retrained winner of CSP's search (the largest stage count), else of any searched run."""
    best: dict[str, tuple[tuple[int, int, int], str, float]] = {}
    lower: dict[str, bool] = {}
    for result in inputs.searches:
        space, system, stages, seed = result.key
        rank = (int(system == "csp"), stages, -seed)
        if space not in best or rank > best[space][0]:
            best[space] = (rank, str(result.best["metric"]), result.accuracy)
            lower[space] = str(result.best["metric"]) == "loss"
    return {s: (metric, value) for s, (_, metric, value) in best.items()}, lower


def random_scores(inputs: ReportInputs, winners: Mapping[str, tuple[str, float]]) -> dict[str, list[float]]:
    """Per searched space, the retrained random subnets' scores in the winner's metric."""
    scores: dict[str, list[float]] = {}
    for frame in inputs.random_retrained:
        for space, group in frame.groupby("space", sort=True):
            if space not in winners:
                continue
            metric = winners[str(space)][0]
            if metric not in group.columns:
                raise UsageError(f"--random-retrained: the rows of space {space!r} lack the search's metric {metric!r}")
            scores.setdefault(str(space), []).extend(float(v) for v in group[metric])
    return scores


def build(inputs: ReportInputs) -> Table:
    winners, lower = search_winners(inputs)
    frame = summary_frame(loss_frame(run_curves(inputs)), repro_frame(inputs), system_frame(inputs), winners,
                          random_scores(inputs, winners), lower, os.cpu_count(), workflow_jobs(inputs),
                          os.environ.get("SLURM_JOB_ID", ""))
    return Table(NAME, TITLE, frame, _reading(frame), body=body(frame))


def body(frame: pd.DataFrame) -> str:
    """One bullet per phenomenon: what was measured, whether it shows, and why not where it does not."""
    if frame.empty:
        return "_No runs: nothing to summarise._\n"
    lines = []
    for row in frame.itertuples(index=False):
        why = f" Why not: {row.why}." if row.why else ""
        lines.append(f"- **{row.phenomenon}** (`{row.space}`): {row.measured} (target: {row.target}). "
                     f"Shows: **{row.shows}**.{why}")
    return "\n".join(lines) + "\n"


def _reading(frame: pd.DataFrame) -> str:
    shown = int((frame["shows"] == "yes").sum()) if not frame.empty else 0
    return (f"{shown} of {len(frame)} phenomena show in this run. Numbers from Tables 2 and 3, the runs' "
            "losses.csv (Figure 4), the retrained search winners and random subnets, and the job clock's "
            f"{jobclock.RECORD}; the CSV has the same lines.")
