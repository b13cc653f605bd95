"""What a plan costs: jobs, predicted and reserved GPU-hours per rule, memory per job, disk.

The numbers a cluster user needs before submitting (and an evaluator before approving): the
predicted GPU-hours are the simulator's; the reserved ones are the time limits the jobs ask
for (prediction x safety + start-up), which is what a scheduler charges against a quota. Disk
counts the checkpoints each run keeps: every parameter of the supernet and its optimizer state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from naspipe.plan import jobs as plan_jobs
from naspipe.plan import resources
from naspipe.plan.fit import CACHE_ON, Fitted


@dataclass
class RuleCost:
    rule: str
    jobs: int = 0
    gpus: set[int] | None = None
    predicted_gpu_h: float = 0.0
    reserved_gpu_h: float = 0.0
    disk_bytes: float = 0.0

    def add(self, gpus: int, predicted_s: float, limit_min: int, disk: float = 0.0) -> None:
        self.jobs += 1
        self.gpus = (self.gpus or set()) | {gpus}
        self.predicted_gpu_h += gpus * predicted_s / 3600
        self.reserved_gpu_h += gpus * limit_min / 60
        self.disk_bytes += disk


@dataclass(frozen=True)
class JobRow:
    rule: str
    space: str
    system: str
    stages: int
    seeds: int
    cache: bool
    device_gb: float
    host_gb: float
    batch: int
    predicted_h: float
    limit_h: float
    mem_gb: float  # requested per node
    replicas: int = 1  # a replicated layout's processes per stage

    @property
    def layout(self) -> str:
        """``D``, or ``DxR`` for a replicated layout."""
        return f"{self.stages}x{self.replicas}" if self.replicas > 1 else str(self.stages)


def rule_costs(config: dict[str, Any], fitted: dict[str, Fitted]) -> list[RuleCost]:
    """Per rule that needs a GPU or a cluster job, in workflow order."""
    cuda = config.get("device", "cpu") == "cuda"
    gpu = 1 if cuda else 0
    costs = {rule: RuleCost(rule) for rule in ("synthesize", "prepare", "profile", "train", "ablation", "search",
                                                "retrain", "search_accuracy", "curve")}
    for d in (config.get("datasets") or {}).values():
        if d["kind"].startswith("synthetic"):
            costs["synthesize"].add(0, 0.0, resources.fixed(config, "synthesize", "runtime"))
        costs["prepare"].add(0, 0.0, resources.fixed(config, "prepare", "runtime"))
    for _ in config["spaces"]:
        costs["profile"].add(gpu, 0.0, resources.fixed(config, "profile", "runtime"))
    for f in fitted.values():
        job, e = f.job, f.estimate
        kept = _checkpoints_kept(config, job.sets)
        costs[job.rule].add(job.processes if cuda else 0, e.seconds, resources.train_minutes(config, job.rule, e),
                            kept * e.checkpoint_bytes)
    for job in plan_jobs.train_jobs(config):
        reference = fitted[plan_jobs.reference_run(job.space, job.seed)].estimate
        for rule in ("search", "retrain", "search_accuracy"):
            seconds = resources.search_seconds(config, rule, job.space, reference)
            disk = reference.checkpoint_bytes if rule == "retrain" else 0.0
            costs[rule].add(gpu, seconds, _limit(config, rule, seconds), disk)
    for run in plan_jobs.curve_runs(config):
        reference = fitted[plan_jobs.reference_run(run.split("/")[2], int(run.rsplit("seed", 1)[1]))].estimate
        seconds = resources.search_seconds(config, "curve", run.split("/")[2], reference)
        costs["curve"].add(gpu, seconds, _limit(config, "curve", seconds))
    return [c for c in costs.values() if c.jobs]


def job_rows(config: dict[str, Any], fitted: dict[str, Fitted]) -> list[JobRow]:
    """One row per training job kind (seeds folded): its memory, batch, predicted time and limit."""
    rows: dict[tuple[str, str, str, int, int, bool], JobRow] = {}
    for f in fitted.values():
        job, e = f.job, f.estimate
        system = job.out.split("/")[3]  # the run's name: an ablation's variant, csp-mb rather than its csp
        key = (job.rule, job.space, system, job.stages, job.replicas, CACHE_ON in job.sets)
        seeds = rows[key].seeds + 1 if key in rows else 1
        rows[key] = JobRow(job.rule, job.space, system, job.stages, seeds, key[5], e.device_bytes / 1e9,
                           e.host_bytes / 1e9, e.batch, e.seconds / 3600,
                           resources.train_minutes(config, job.rule, e) / 60,
                           resources.train_mem_mb(config, job.rule, job.processes, e) / 1e3, job.replicas)
    return list(rows.values())


def _limit(config: dict[str, Any], rule: str, seconds: float) -> int:
    explicit = resources.settings(config, rule).get("runtime")
    return int(explicit) if explicit else resources.minutes(config, seconds)


def _checkpoints_kept(config: dict[str, Any], sets: tuple[str, ...]) -> int:
    """The final checkpoint and, with checkpoint_every, the periodic ones kept beside it."""
    values = dict(s.split("=", 1) for s in sets)
    every = int(values.get("checkpoint_every", 0))
    if not every:
        return 1
    return min(int(values.get("keep_checkpoints", 2)), math.ceil(int(config["steps"]) / every) + 1)
