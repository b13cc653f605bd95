"""Where a workflow run's time goes, and the wall time it needs on C quiet cores (issue 21).

    snakemake --cores 2 --configfile config/config.yaml
    python benchmarks/workflow_makespan.py results/benchmarks/jobclock.tsv [--cores 2]

The job clock's file (naspipe.plan.jobclock, written by every workflow run) has one line per job:
its session, start, end, the CPU seconds of its whole process tree, the command; it is exact, and
its span (first start to last end) gives the run's measured CPU%. The older GNU time file
(``NASPIPE_JOB_TIMES=/abs/times.txt``: wall, user and system seconds, the command) is read too.
A job is named by its output (the command's last ``--out``, or ``--spec-out``). Printed: CPU seconds
per rule, the total, and two lower bounds of the wall time on C cores that no job order beats:
the total CPU over C (every core busy all the time) and the critical path (the longest chain of
jobs that must run one after another: dataset -> profile -> partition -> train -> search ->
retrain -> search accuracy, then the report), each job at its measured CPU seconds. CPU seconds
barely change with the machine's load (wall seconds do), so a loaded machine's run still models
a quiet one; start-up of the workflow itself (DAG building, ~10 s) comes on top.

GNU time misses the stage processes of a multi-stage training run (they are children of
multiprocessing's fork server, which nobody waits for), and Snakemake's ``benchmark:`` files
(``--benchmarks``) sample the process tree every 0.5 s for a job's first ~15 s and every 30 s after,
and miss what a job spends after the last sample: from those two, each job counts the larger, a
lower bound. The job clock counts every descendant.
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict
from pathlib import Path

RULES = (  # (rule, the pattern of its output) in the order of the chain
    ("synthesize", r"results/raw/"), ("prepare", r"results/data/"), ("profile", r"results/profiles/"),
    ("partition", r"results/partitions/"), ("train", r"results/runs/"), ("ablation", r"results/ablations/"),
    ("search_accuracy", r"results/search/.*\.accuracy\.csv$"), ("search", r"results/search/"),
    ("retrain_random", r"results/retrain_random/"), ("retrain", r"results/retrain/"), ("curve", r"results/curves/"),
    ("compare", r"results/reproducibility/"), ("simulate", r"results/sim/"), ("calibrate", r"results/calibration/"),
    ("report", r"^results/?$"), ("tables", r"results/tables/"),
)


def fields(line: str) -> tuple[float, float, str] | None:
    """(wall s, cpu s, command) of a job clock or GNU time line; None for GNU time's own notes."""
    clock = line.split("\t", 4)
    if len(clock) == 5:
        return float(clock[2]) - float(clock[1]), float(clock[3]), clock[4]
    parts = line.split(" ", 3)
    if len(parts) < 4 or not re.fullmatch(r"[\d.]+", parts[0]):
        return None
    return float(parts[0]), float(parts[1]) + float(parts[2]), parts[3]


def span(path: Path) -> float | None:
    """A job clock file's first start to last end, the report's job left out (None for GNU time files)."""
    rows = [line.split("\t", 4) for line in path.read_text().splitlines()]
    rows = [r for r in rows if len(r) == 5 and "naspipe report" not in r[4]]
    return max(float(r[2]) for r in rows) - min(float(r[1]) for r in rows) if rows else None


def parse(path: Path) -> list[tuple[str, str, float, float]]:
    """(rule, output, wall s, cpu s) per job."""
    jobs = []
    for line in path.read_text().splitlines():
        job = fields(line)
        if job is None:
            continue
        wall, cpu, command = job
        outs = re.findall(r"--(?:spec-)?out (\S+)", command)
        out = outs[-1] if outs else command
        rule = next((name for name, pattern in RULES if re.search(pattern, out)), "other")
        jobs.append((rule, out, wall, cpu))
    return jobs


def benchmark_cpu(root: Path, rule: str, out: str) -> float:
    """The ``cpu_time`` of a job's Snakemake benchmark file (0 when there is none)."""
    tail = re.sub(r"^results/[^/]+/?", "", out.rstrip("/"))
    tail = re.sub(r"(\.accuracy)?\.(csv|json|yaml)$", "", tail)
    candidates = [root / rule / f"{tail}.tsv"] if tail else []
    for candidate in [*candidates, root / f"{rule}.tsv"]:  # a rule without wildcards: RULE.tsv
        if candidate.is_file():
            lines = candidate.read_text().splitlines()
            header, last = lines[0].split("\t"), lines[-1].split("\t")
            return float(last[header.index("cpu_time")])
    return 0.0


def chains(jobs: list[tuple[str, str, float, float]]) -> dict[str, float]:
    """CPU seconds of each training run's chain (its space's data, profile, partition included)."""
    cpu = {out.rstrip("/"): c for _, out, _, c in jobs}
    prefix: dict[str, float] = defaultdict(float)  # space -> profile (+ its dataset's jobs, all spaces: upper)
    data = sum(c for rule, _, _, c in jobs if rule in ("synthesize", "prepare")) / 2
    for out, c in cpu.items():
        m = re.match(r"results/profiles/([^/]+)\.csv", out)
        if m:
            prefix[m.group(1)] += c + data
    out_chains = {}
    for out, c in cpu.items():
        m = re.match(r"results/runs/([^/]+)/([^/]+)/D(\d+)-seed(\d+)$", out)
        if not m:
            continue
        space, tail = m.group(1), out.removeprefix("results/runs/")
        partition = cpu.get(f"results/partitions/{space}/D{m.group(3)}.json", 0.0)
        search_phase = sum(cpu.get(f"results/{top}/{tail}{suffix}", 0.0)
                           for top, suffix in (("search", ""), ("retrain", ""), ("search", ".accuracy.csv")))
        curve = cpu.get(f"results/curves/{tail}.csv", 0.0)
        out_chains[out] = prefix[space] + partition + c + max(search_phase, curve)
    return out_chains


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("times", type=Path)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--benchmarks", type=Path, help="the run's results/benchmarks (Snakemake benchmark files)")
    args = parser.parse_args()
    jobs = parse(args.times)
    if args.benchmarks is not None:
        jobs = [(r, o, w, max(c, benchmark_cpu(args.benchmarks, r, o))) for r, o, w, c in jobs]
    per_rule: dict[str, list[float]] = defaultdict(list)
    for rule, _, _, c in jobs:
        per_rule[rule].append(c)
    total = sum(c for *_, c in jobs)
    print(f"{'rule':<16} {'jobs':>5} {'CPU s':>8} {'median':>7} {'share':>6}")
    for rule, cs in sorted(per_rule.items(), key=lambda kv: -sum(kv[1])):
        print(f"{rule:<16} {len(cs):>5} {sum(cs):>8.1f} {statistics.median(cs):>7.2f} {sum(cs) / total:>6.1%}")
    report = sum(per_rule.get("report", [0.0]))
    path = chains(jobs)
    longest = max(path, key=path.__getitem__) if path else ""
    critical = (path.get(longest, 0.0)) + report
    print(f"total {len(jobs)} jobs, {total:.1f} CPU s; on {args.cores} cores >= {total / args.cores:.1f} s")
    print(f"critical path {critical:.1f} CPU s (through {longest}, then the report)")
    print(f"model: quiet-machine wall >= {max(total / args.cores, critical):.1f} s "
          f"({max(total / args.cores, critical) / 60:.1f} min)")
    measured = span(args.times)
    if measured:
        print(f"measured: {measured:.1f} s from the first job's start to the last one's end (report left out), "
              f"CPU {100 * (total - report) / measured:.0f}%")


if __name__ == "__main__":
    main()
