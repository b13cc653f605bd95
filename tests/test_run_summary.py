"""The "what this run shows" section: parsed back and checked against the tables it summarises.

The pure functions get tables built to pass (loss halves, csp one final loss with the
baselines spread, a winner above every random subnet, csp faster than gpipe) and built to
fail (a flat loss, a baseline without spread, a winner below the median, csp slower on more
stage processes than cores); each verdict and number is read back from the rendered
markdown. One test runs ``naspipe report`` on real toy runs and checks the section's lines
against the written Table 3 and the runs' own losses; another puts a run in a workflow's
results/ layout beside a job clock file and checks the CPU line against that file.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from naspipe.cli import main as cli_main
from naspipe.plan import jobclock
from naspipe.report import run_summary as rs
from tests.test_report import report_args, runs  # noqa: F401  (the module-scoped runs fixture)

BULLET = re.compile(r"^- \*\*(?P<phenomenon>[^*]+)\*\* \(`(?P<space>[^`]+)`\): (?P<measured>.*) \(target: "
                    r"(?P<target>[^)]*)\)\. Shows: \*\*(?P<shows>[^*]+)\*\*\.(?: Why not: (?P<why>.*)\.)?$")


def parse(body: str) -> list[dict[str, str]]:
    """The section's bullets as dicts; every non-empty line must be one bullet."""
    lines = [line for line in body.splitlines() if line]
    parsed = [BULLET.match(line) for line in lines]
    assert all(parsed), [line for line, m in zip(lines, parsed, strict=True) if not m]
    return [m.groupdict() for m in parsed if m]


def table3(csp: dict[int, float], gpipe: dict[int, float], pipedream: dict[int, float]) -> pd.DataFrame:
    rows = [{"space": "nlp.tiny", "system": system, "stages": d, "seed": 0, "final_loss": repr(v)}
            for system, values in (("csp", csp), ("gpipe", gpipe), ("pipedream", pipedream))
            for d, v in values.items()]
    return pd.DataFrame(rows)


def table2(csp_vs_gpipe: float, stages: int) -> pd.DataFrame:
    return pd.DataFrame([
        {"space": "cv.tiny", "system": "csp", "stages": stages, "throughput_vs_gpipe": csp_vs_gpipe,
         "bubble_ratio": 0.3},
        {"space": "cv.tiny", "system": "gpipe", "stages": stages, "throughput_vs_gpipe": 1.0, "bubble_ratio": 0.5},
    ])


def summary(curves: dict[tuple[str, str], list[float]], t3: pd.DataFrame, t2: pd.DataFrame,
            winners: dict[str, tuple[str, float]], random: dict[str, list[float]]) -> list[dict[str, str]]:
    frame = rs.summary_frame(rs.loss_frame(curves), t3, t2, winners, random, {}, 2)
    return parse(rs.body(frame))


PASSING = dict(
    curves={("nlp.tiny", "csp"): [4.0] * 10 + [2.0] * 10, ("nlp.tiny", "gpipe"): [4.0] * 10 + [3.0] * 10},
    t3=table3({1: 3.25, 2: 3.25, 4: 3.25}, {1: 3.25, 2: 3.5, 4: 3.75}, {1: 3.25, 2: 3.3, 4: 3.2}),
    t2=table2(1.25, 4),
    winners={"cv.tiny": ("top1", 0.5)},
    random={"cv.tiny": [0.2, 0.3, 0.6]},
)


def test_every_phenomenon_shows_on_tables_built_to_pass():
    lines = summary(**PASSING)
    assert [line["shows"] for line in lines] == ["yes", "yes", "yes", "yes", "not measured"]
    loss, spread, search, speed, cpu = lines
    assert loss["measured"].startswith("csp 2 / 4 = 0.50 of the start over 20 steps; gpipe 0.75")
    assert "csp 3.25 at D=1,2,4; gpipe spread 0.5; pipedream spread 0.1" == spread["measured"]
    assert search["measured"] == "winner retrained top1 0.5 vs median of 3 random 0.3"
    assert speed["measured"].startswith("csp 1.25x gpipe at D=4")
    assert "no job clock records" in cpu["why"]
    assert all(line["why"] is None for line in lines[:4])


def test_each_phenomenon_fails_with_its_reason_on_tables_built_to_fail():
    lines = summary(
        curves={("nlp.tiny", "csp"): [4.0] * 10 + [3.5] * 10},
        t3=table3({1: 3.25, 2: 3.5}, {1: 3.25, 2: 3.25}, {1: 3.25}),
        t2=table2(0.9, 4),
        winners={"cv.tiny": ("top1", 0.25), "nlp.tiny": ("bleu", 1.0)},
        random={"cv.tiny": [0.2, 0.3, 0.6]},
    )
    assert [line["shows"] for line in lines] == ["no", "no", "no", "not measured", "no", "not measured"]
    loss, spread, search, unsearched, speed, _ = lines
    assert loss["measured"].startswith("csp 3.5 / 4 = 0.88") and "88%" in loss["why"]
    assert spread["measured"] == "csp 2 different values over D=1,2; gpipe spread 0; pipedream not run"
    assert "reproducibility contract is broken" in spread["why"]
    assert "median of 3 random 0.3" in search["measured"] and "supernet" in search["why"]
    assert unsearched["space"] == "nlp.tiny" and "--random-retrained" in unsearched["why"]
    assert "4 stage processes share 2 CPU cores" in speed["why"]


def test_a_space_without_a_csp_comparison_says_so():
    t3 = table3({}, {1: 3.25, 2: 3.5}, {1: 3.25, 2: 3.3})
    (line,) = parse(rs.body(pd.DataFrame(rs.spread_rows(t3), columns=rs.COLUMNS)))
    assert line["measured"].startswith("csp not compared; gpipe spread 0.25")
    assert line["shows"] == "no" and line["why"] == "csp ran at fewer than two stage counts"


def test_the_sequential_reference_stands_for_csp_at_one_stage():
    t3 = table3({2: 3.25}, {1: 3.25, 2: 3.5}, {1: 3.25, 2: 3.3})
    t3["identical_to_sequential"] = ["yes" if system == "csp" else "no" for system in t3["system"]]
    (line,) = parse(rs.body(pd.DataFrame(rs.spread_rows(t3), columns=rs.COLUMNS)))
    assert line["measured"].startswith("csp 3.25 at D=1 (sequential),2; gpipe spread 0.25")
    assert line["shows"] == "yes"
    t3.loc[t3["system"] == "csp", "identical_to_sequential"] = "no"  # csp differs from the reference
    (line,) = parse(rs.body(pd.DataFrame(rs.spread_rows(t3), columns=rs.COLUMNS)))
    assert line["shows"] == "no" and line["why"].startswith("csp differs from the sequential reference at D=2")


def test_a_baseline_without_spread_is_named():
    t3 = table3({1: 3.25, 2: 3.25}, {1: 3.25, 2: 3.25}, {1: 3.25, 2: 3.5})
    (line,) = parse(rs.body(pd.DataFrame(rs.spread_rows(t3), columns=rs.COLUMNS)))
    assert line["shows"] == "no" and line["why"].startswith("gpipe: no spread")


def test_lower_is_better_metrics_flip_the_comparison():
    rows = rs.search_rows({"nlp.tiny": ("loss", 2.0)}, {"nlp.tiny": [2.5, 3.0, 1.0]}, {"nlp.tiny": True})
    assert rows[0]["shows"] == "yes"


def test_rolling_ends_use_figure4s_window():
    assert rs.rolling_ends([5.0, 4.0, 3.0, 2.0, 1.0]) == (4.0, 2.0)  # window 3 for short runs
    assert rs.rolling_ends(list(range(40, 0, -1))) == (38.5, 2.5)  # window n // 10 = 4


@pytest.fixture(scope="module")
def summarised(runs, tmp_path_factory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("summary")
    assert cli_main(report_args(runs, out)) == 0
    return out


def test_the_report_opens_with_the_claims_then_what_this_run_shows(summarised):
    text = (summarised / "report.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:3] == ["## The paper's claims, checked", "## What this run shows", "## What ran"]


def test_the_section_agrees_with_the_tables_and_runs_it_summarises(summarised, runs):  # noqa: F811
    section = (summarised / "tables" / "run_summary.md").read_text()
    lines = parse(section.split("\n\n", 1)[1].rsplit("\n\n", 1)[0])
    frame = pd.read_csv(summarised / "tables" / "run_summary.csv", dtype=str, keep_default_na=False)
    assert [line["measured"] for line in lines] == list(frame["measured"])
    losses = pd.read_csv(Path(runs["csp2"]) / "losses.csv")["loss_hex"].map(float.fromhex).tolist()
    start, end = rs.rolling_ends(losses)
    (loss,) = [line for line in lines if line["phenomenon"] == "training loss falls"]
    assert loss["measured"].startswith(f"csp {end:.4g} / {start:.4g} = {end / start:.2f}")
    t3 = pd.read_csv(summarised / "tables" / "table3_reproducibility.csv", dtype=str)
    csp_loss = t3.loc[t3["system"] == "csp", "final_loss"].iloc[0]
    gpipe = t3.loc[t3["system"] == "gpipe", "final_loss"].astype(float)
    (spread,) = [line for line in lines if line["phenomenon"].startswith("csp identical")]
    assert t3.loc[t3["system"] == "csp", "identical_to_sequential"].tolist() == ["yes"]
    assert spread["measured"].startswith(
        f"csp {csp_loss} at D=1 (sequential),2; gpipe spread {gpipe.max() - gpipe.min():.3g}")
    assert spread["shows"] == "no" and spread["why"].startswith("pipedream: no spread")


def clock(*jobs: tuple[str, float, float, float, str]) -> pd.DataFrame:
    return pd.DataFrame(jobs, columns=list(jobclock.COLUMNS))


def test_cpu_line_is_the_jobs_cpu_over_their_span_against_85_percent_of_every_core():
    jobs = clock(("s", 100.0, 160.0, 110.0, "python -m naspipe train"), ("s", 101.0, 200.0, 64.0, "python -m x"))
    (line,) = parse(rs.body(pd.DataFrame([rs.cpu_row(jobs, 2)], columns=rs.COLUMNS)))
    assert line["measured"].startswith("174% CPU: 2 jobs, 174 CPU s (every process of each job) in 100 s")
    assert line["target"] == "CPU% >= 170 on 2 cores" and line["shows"] == "yes" and line["why"] is None
    (line,) = parse(rs.body(pd.DataFrame([rs.cpu_row(jobs, 4)], columns=rs.COLUMNS)))
    assert line["target"] == "CPU% >= 340 on 4 cores" and line["shows"] == "no"
    assert line["why"].startswith("on average 44% of each of 4 cores")


def test_cpu_line_counts_the_latest_invocation_and_never_a_report():
    old = ("a", 0.0, 50.0, 90.0, "python -m naspipe train")
    report = ("b", 100.0, 110.0, 9.0, "python -m naspipe report --runs x")
    new = [("b", 60.0, 80.0, 30.0, "python -m naspipe search"), ("b", 61.0, 90.0, 40.0, "python -m naspipe train")]
    jobs = rs.session_jobs(clock(old, *new, report, ("c", 200.0, 201.0, 0.5, "python -m naspipe report")))
    assert rs.cpu_percent(jobs) == (100.0 * 70.0 / 30.0, 70.0, 30.0)


def test_cpu_line_of_a_cluster_run_names_its_slurm_jobs_and_measures_no_cpu_percent(tmp_path):
    """Jobs submitted to SLURM ran on their allocations' cores: counted and named (ids, hosts), CPU% not measured."""
    record = tmp_path / "jobclock.tsv"
    for line in (jobclock.record_line("s", 0.0, 50.0, 40.0, ["naspipe partition"], ("login", "")),
                 *(jobclock.record_line("s", 1.0 + i, 60.0, 20.0, ["naspipe train"], ("n1", str(40 + i)))
                   for i in (1, 2, 3, 5)),
                 jobclock.record_line("s", 2.0, 70.0, 10.0, ["naspipe search"], ("n2", "47"))):
        jobclock.append(record, line)
    (line,) = parse(rs.body(pd.DataFrame([rs.cpu_row(rs.read_clock(record), 2)], columns=rs.COLUMNS)))
    assert line["measured"] == ("6 jobs, 130 CPU s (every process of each job): 5 SLURM jobs (41-43, 45, 47) on "
                                "n1, n2 and 1 on the submitting host (the report's own job not counted)")
    assert line["shows"] == "not measured" and line["why"].startswith("5 of the 6 jobs ran in SLURM allocations")
    # the whole workflow inside one allocation (the report's own): its jobs used this machine's cores
    inside = rs.read_clock(record)
    inside["slurm_job"] = "9"
    (line,) = parse(rs.body(pd.DataFrame([rs.cpu_row(inside, 2, "9")], columns=rs.COLUMNS)))
    assert line["measured"].startswith("186% CPU: 6 jobs, 130 CPU s")


def test_a_job_clock_file_without_the_place_columns_still_reads(tmp_path):
    old = tmp_path / "jobclock.tsv"
    old.write_text("s\t1.000\t2.000\t0.500\tpython -m naspipe train\n")
    (row,) = rs.read_clock(old).to_dict("records")
    assert (row["cpu_s"], row["host"], row["slurm_job"]) == (0.5, "", "")


def test_a_broken_job_clock_file_is_named(tmp_path):
    bad = tmp_path / "jobclock.tsv"
    bad.write_text("s\tnot-a-time\t2\t3\tcmd\n")
    with pytest.raises(rs.UsageError, match="jobclock.tsv: not a job clock file"):
        rs.read_clock(bad)


def test_the_report_reads_the_job_clock_beside_a_workflows_runs(runs, tmp_path):  # noqa: F811
    """A run in results/runs/... with results/benchmarks/jobclock.tsv beside it: the CPU line is that file's."""
    run = tmp_path / "results" / "runs" / "toy" / "sequential" / "D1-seed0"
    shutil.copytree(runs["seq"], run)
    record = tmp_path / jobclock.RECORD
    record.parent.mkdir(parents=True)
    for line in (jobclock.record_line("1-2", 10.0, 70.0, 100.0, ["python", "-m", "naspipe", "train"]),
                 jobclock.record_line("1-2", 12.0, 110.0, 80.0, ["python", "-m", "naspipe", "search"]),
                 jobclock.record_line("0-1", 0.0, 5.0, 9.0, ["python", "-m", "naspipe", "train"])):
        jobclock.append(record, line)
    out = tmp_path / "out"
    assert cli_main(["report", "--runs", str(run), "--out", str(out)]) == 0
    frame = pd.read_csv(out / "tables" / "run_summary.csv", dtype=str, keep_default_na=False)
    (cpu,) = frame[frame["phenomenon"] == "cores kept busy"].to_dict("records")
    assert cpu["measured"].startswith("180% CPU: 2 jobs, 180 CPU s (every process of each job) in 100 s")
    section = (out / "tables" / "run_summary.md").read_text()
    assert any(line["measured"] == cpu["measured"] for line in parse(section.split("\n\n", 1)[1].rsplit("\n\n", 1)[0]))


def test_the_fast_naspipe_is_one_result_at_every_stage_count_or_says_where_not():
    """csp-mb's line (issue 40): one loss and one weights digest over its stage counts, each identical to its
    reference sequential-mb; a run that differs is named with its stage count."""
    rows = [{"space": "nlp.tiny", "system": "csp-mb", "stages": d, "seed": 0, "final_loss": "2.5",
             "weights": "abc", "identical_to_sequential": "yes"} for d in (1, 2, 4)]
    t3 = pd.DataFrame(rows)
    (line,) = parse(rs.body(pd.DataFrame(rs.fast_rows(t3), columns=rs.COLUMNS)))
    assert line["measured"] == "csp-mb 2.5, weights abc at D=1,2,4" and line["shows"] == "yes"
    t3.loc[t3["stages"] == 4, ["identical_to_sequential", "weights"]] = ["no", "def"]
    (line,) = parse(rs.body(pd.DataFrame(rs.fast_rows(t3), columns=rs.COLUMNS)))
    assert line["shows"] == "no" and line["why"].startswith("csp-mb differs from sequential-mb at D=4")
    assert rs.fast_rows(table3({2: 3.25}, {1: 3.25, 2: 3.5}, {1: 3.25, 2: 3.3}).assign(
        identical_to_sequential="yes")) == []  # no csp-mb: no line
