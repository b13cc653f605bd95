"""The published results of a workflow config: the digest of every training run and table, and the check of a
run against them ("your run reproduces the published results bit for bit: 28 of 28 runs").

Why it can hold: under ``numerics: portable`` every job runs the same CPU kernels on any x86-64 machine
(:mod:`naspipe.numerics`), the partitions balance parameter counts (not a timed profile), and what a run trains
is then a function of the code and the config alone. What is timed is left out, by name: a run's
``metrics.json``, ``trace.json`` and ``access_order.csv`` (the order in which in-flight subnets read a shared
layer depends on timing, its bits do not), and the tables in :data:`TIMED_TABLES`.

A record holds, per run, its result files' digests and a digest of its losses every :data:`BLOCK` subnets, and
per table its digest and a short digest of every line: a run that differs then says where it first diverges
(subnets 64-95) and a table the first line that differs, without the repository holding the results.
Imports no torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError
from naspipe.rundigest import file_sha256, recorded_digests

# the training runs' directories under results/ (naspipe.plan.paths): the grid, the ablation, the retrained winners
RUN_ROOTS = ("runs", "ablations", "retrain", "retrain_random")
RUN_FILES = ("weights.sha256", "losses.csv", "layer_hashes.csv")  # what a run trains (not access_order.csv)
TABLES = "tables"
# tables with a column that is a timing (or decided by one): measured on the machine, never published
TIMED_TABLES = {
    "table2_systems": "exec time, throughput, bubble ratio",
    "table4_access_order": "the order in which in-flight subnets read a layer",
    "table5_profile": "the profiled compute and copy times",
    "fig5_throughput": "throughput",
    "fig6_ablation": "throughput, bubble ratio, cache hit rate",
    "fig7_scaling": "utilisation",
    "fig4_loss_vs_time": "training time",
    "fig4_search_score": "training time",
    "run_summary": "wall and CPU time",
    "accounting": "CPU seconds",
    "claims": "verdicts on measured throughput and bubble ratios",
}
BLOCK = 32  # losses per prefix digest: a diverging run is located to BLOCK subnets
SHORT = 16  # hex digits of a prefix or line digest


@dataclass(frozen=True)
class Outcome:
    """One published item (a run or a table) and whether this run reproduces it; ``where``: the first divergence."""

    kind: str
    name: str
    same: bool
    where: str = ""


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:SHORT]


def run_record(run: Path) -> dict[str, Any]:
    """A training run's published record: its result files' digests (from its ``outputs.sha256``) and the digest
    of its losses up to every BLOCK-th subnet."""
    digests = recorded_digests(run) or {}
    files = {name: digests.get(name) or file_sha256(run / name) for name in RUN_FILES if (run / name).is_file()}
    lines = (run / "losses.csv").read_text(encoding="utf-8").splitlines()[1:]
    prefixes = [_short("\n".join(lines[:end])) for end in range(BLOCK, len(lines) + BLOCK, BLOCK)]
    return {"files": files, "subnets": len(lines), "loss_prefixes": prefixes}


def table_record(table: Path) -> dict[str, Any]:
    text = table.read_text(encoding="utf-8")
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "lines": [_short(line) for line in text.splitlines()]}


def _runs(results: Path) -> Iterator[Path]:
    for root in RUN_ROOTS:
        for digests in sorted((results / root).glob("**/outputs.sha256")):
            run = digests.parent
            relative = run.relative_to(results)
            if not any(part.startswith(".") or part == "checkpoints" for part in relative.parts):
                yield run


def collect(results: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Every published item of the results tree ``results`` (and the config it ran)."""
    if not results.is_dir():
        raise UsageError(f"--results {results}: not a directory")
    runs = {str(run.relative_to(results)): run_record(run) for run in _runs(results)}
    tables = {str(t.relative_to(results)): table_record(t) for t in sorted((results / TABLES).glob("*.csv"))
              if t.stem not in TIMED_TABLES}
    return {"config": config, "runs": runs, "tables": tables}


def compare(expected: dict[str, Any], found: dict[str, Any]) -> list[Outcome]:
    """One outcome per published run and table (in the published order); an item this run lacks differs."""
    outcomes = [_compare_run(name, want, found["runs"].get(name)) for name, want in expected["runs"].items()]
    return outcomes + [_compare_table(name, want, found["tables"].get(name))
                       for name, want in expected["tables"].items()]


def _compare_run(name: str, want: dict[str, Any], got: dict[str, Any] | None) -> Outcome:
    if got is None:
        return Outcome("run", name, False, "missing from this run's results")
    if got == want:
        return Outcome("run", name, True)
    files = ", ".join(sorted(f for f in want["files"] if want["files"][f] != got["files"].get(f)))
    for block, (a, b) in enumerate(zip(want["loss_prefixes"], got["loss_prefixes"], strict=False)):
        if a != b:
            first, last = block * BLOCK, min((block + 1) * BLOCK, want["subnets"]) - 1
            return Outcome("run", name, False, f"{files} differ; the losses first differ in subnets {first}-{last}")
    if want["subnets"] != got["subnets"]:
        return Outcome("run", name, False, f"{got['subnets']} subnets trained, {want['subnets']} published")
    return Outcome("run", name, False, f"{files} differ; every loss is the same (the weights moved, not the loss)")


def _compare_table(name: str, want: dict[str, Any], got: dict[str, Any] | None) -> Outcome:
    if got is None:
        return Outcome("table", name, False, "missing from this run's results")
    if got["sha256"] == want["sha256"]:
        return Outcome("table", name, True)
    for line, (a, b) in enumerate(zip(want["lines"], got["lines"], strict=False), start=1):
        if a != b:
            return Outcome("table", name, False, f"line {line} is the first that differs")
    return Outcome("table", name, False, f"{len(got['lines'])} lines, {len(want['lines'])} published")


def config_differences(expected: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """The top-level config keys in which this run's config differs from the published one."""
    a, b = expected.get("config", {}), found.get("config", {})
    return sorted(k for k in set(a) | set(b) if _canonical(a.get(k)) != _canonical(b.get(k)))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def summary(outcomes: list[Outcome], differing_keys: list[str], source: str) -> str:
    """The verdict as markdown: one sentence when every item matches, else the ones that differ and where."""
    runs = [o for o in outcomes if o.kind == "run"]
    tables = [o for o in outcomes if o.kind == "table"]
    same_runs, same_tables = sum(o.same for o in runs), sum(o.same for o in tables)
    lines = ["# Published results", ""]
    if not outcomes:
        lines.append(f"Nothing is published yet ({source} is empty); results/published.json is this run's record: "
                     "copied there, it publishes this run (docs/numerics.md).")
    elif same_runs == len(runs) and same_tables == len(tables):
        lines.append(f"Your run reproduces the published results bit for bit: {same_runs} of {len(runs)} runs and "
                     f"{same_tables} of {len(tables)} tables ({source}).")
    else:
        lines.append(f"Your run reproduces {same_runs} of {len(runs)} published runs and {same_tables} of "
                     f"{len(tables)} tables bit for bit ({source}). These differ:")
        lines += [""] + [f"- {o.kind} `{o.name}`: {o.where}" for o in outcomes if not o.same]
    if differing_keys:
        lines += ["", f"This run's config differs from the published one in: {', '.join(differing_keys)}."]
    excluded = ", ".join(sorted(TIMED_TABLES))
    lines += ["", f"Not published (timings, by name): each run's metrics.json, trace.json and access_order.csv, "
              f"the figures, and the tables {excluded}."]
    return "\n".join(lines) + "\n"
