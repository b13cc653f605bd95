"""Where a workflow run's time goes, and the wall time it needs on C quiet cores (issue 21).

    NASPIPE_JOB_TIMES=/abs/times.txt snakemake --cores 2 --configfile config/config.yaml
    python benchmarks/workflow_makespan.py /abs/times.txt [--cores 2] [--benchmarks results/benchmarks]

Each line of the times file is one job (GNU time: wall, user and system seconds, the command); the
job is named by its output (the command's last ``--out``, or ``--spec-out``). Printed: CPU seconds
per rule, the total, and two lower bounds of the wall time on C cores that no job order beats:
the total CPU over C (every core busy all the time) and the critical path (the longest chain of
jobs that must run one after another: dataset -> profile -> partition -> train -> search ->
retrain -> search accuracy, then the report), each job at its measured CPU seconds. CPU seconds
barely change with the machine's load (wall seconds do), so a loaded machine's run still models
a quiet one; start-up of the workflow itself (DAG building, ~10 s) comes on top.

GNU time misses the stage processes of a multi-stage training run (they are children of
multiprocessing's fork server, which nobody waits for), and Snakemake's ``benchmark:`` files
(``--benchmarks``) sample the process tree, every 30 s after a job's first 30, and miss what a
job spends after the last sample. Each job counts the larger of the two: a lower bound.
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


def parse(path: Path) -> list[tuple[str, str, float, float]]:
    """(rule, output, wall s, cpu s) per job; GNU time's own notes ("Command exited ...") are skipped."""
    jobs = []
    for line in path.read_text().splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 4 or not re.fullmatch(r"[\d.]+", parts[0]):
            continue
        wall, user, system, command = float(parts[0]), float(parts[1]), float(parts[2]), parts[3]
        outs = re.findall(r"--(?:spec-)?out (\S+)", command)
        out = outs[-1] if outs else command
        rule = next((name for name, pattern in RULES if re.search(pattern, out)), "other")
        jobs.append((rule, out, wall, user + system))
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


if __name__ == "__main__":
    main()
