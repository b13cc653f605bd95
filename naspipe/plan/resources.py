"""Every rule's cluster resources from one place: the config's ``resources`` block, with defaults.

Partition, GPUs, CPUs (the threads the command runs: ``threads_per_stage`` per stage process,
the same for the search-phase jobs' ``--threads``), memory and a time limit for every rule that
can run on the cluster. Training time limits are the simulator's prediction times ``safety``
plus ``startup_min`` minutes (never a flat day per job); search-phase limits scale the same
prediction of one subnet's compute by the forward passes the job makes. A rule without a
configured partition gets ``resources.partition`` (GPU rules) or ``resources.cpu_partition``.
"""

from __future__ import annotations

import math
from typing import Any

from naspipe.plan.cost import Estimate

GPU_RULES = ("train", "ablation", "profile", "search", "retrain", "search_accuracy", "curve")
CPU_RULES = ("synthesize", "prepare")
DEFAULTS: dict[str, dict[str, int]] = {  # cpus, mem_mb, runtime (minutes) when the config gives none
    "synthesize": {"cpus": 1, "mem_mb": 2000, "runtime": 30},
    "prepare": {"cpus": 1, "mem_mb": 8000, "runtime": 240},
    "profile": {"cpus": 1, "mem_mb": 16000, "runtime": 60},
}
SAFETY = 2.0  # time limit = predicted time x SAFETY + STARTUP_MIN (config: resources.safety, startup_min)
STARTUP_MIN = 15
FORWARD_SHARE = 1 / 3  # a forward pass's share of a subnet's forward + backward + update


def settings(config: dict[str, Any], rule: str) -> dict[str, Any]:
    block = config.get("resources") or {}
    own = dict(block.get("ablation" if rule == "ablation" and "ablation" in block else rule, {}))
    if rule == "ablation":
        own = {**block.get("train", {}), **own}
    return own


def partition(config: dict[str, Any], rule: str) -> str:
    block = config.get("resources") or {}
    default = block.get("cpu_partition" if rule in CPU_RULES else "partition", "")
    return str(settings(config, rule).get("partition", default))


def gpus_per_node(config: dict[str, Any]) -> int:
    block = config.get("resources") or {}
    return int(settings(config, "train").get("gpus_per_node", block.get("gpus_per_node", 8)))


def minutes(config: dict[str, Any], seconds: float) -> int:
    """A time limit in minutes for a job predicted to take ``seconds``."""
    block = config.get("resources") or {}
    safety, startup = float(block.get("safety", SAFETY)), int(block.get("startup_min", STARTUP_MIN))
    return math.ceil(seconds * safety / 60) + startup


def cpus(config: dict[str, Any], rule: str) -> int:
    """CPUs per task: the threads the command runs."""
    if rule in DEFAULTS:
        return int(settings(config, rule).get("cpus", DEFAULTS[rule]["cpus"]))
    per_stage = int(config.get("threads_per_stage", 1))
    return int(settings(config, rule).get("cpus_per_stage", per_stage)) if rule in ("train", "ablation") \
        else int(settings(config, rule).get("cpus", per_stage))


def fixed(config: dict[str, Any], rule: str, key: str) -> int:
    """``mem_mb`` or ``runtime`` of a rule without a prediction (its config value or the default)."""
    return int(settings(config, rule).get(key, DEFAULTS[rule][key]))


def local_threads(config: dict[str, Any], stages: int, estimate: Estimate | None, replicas: int = 1) -> int:
    """Cores a training job holds on one machine (Snakemake's ``threads``, bounded by ``--cores``).

    On cuda every stage process drives its GPU: D x ``threads_per_stage``. On cpu the D stage processes
    take turns more than they overlap: the simulator's busy stages per step (one subnet's compute over
    its time at the pipeline's rate, ``exec_s / step_seconds``) is 0.7-1.1 for the default config's
    tiny spaces at D = 2 and 4 and up to 2 for pipedream at D = 4 (measured bubbles agree: 0.48 at
    D = 2, 0.76 at D = 4 for csp). Holding D cores for them left one of two cores idle whenever a
    D = 2 or 4 run trained; the nearest whole number of busy cores lets another job use the rest.
    """
    per_stage = int(config.get("threads_per_stage", 1))
    processes = stages * replicas  # a replicated layout: the estimate is one replica's, and every replica is as busy
    if config.get("device", "cpu") == "cuda" or estimate is None or estimate.step_seconds <= 0:
        return processes * per_stage
    busy = round(per_stage * replicas * estimate.exec_s / estimate.step_seconds)
    return max(1, min(processes * per_stage, busy))


def train_mem_mb(config: dict[str, Any], rule: str, stages: int, estimate: Estimate | None) -> int:
    """Memory per node: the stage processes on the node, or the host store the model predicts there."""
    cuda = config.get("device", "cpu") == "cuda"
    per_node = min(stages, gpus_per_node(config)) if cuda else stages
    floor = int(settings(config, rule).get("mem_mb_per_stage", 2000)) * per_node
    host = 0 if estimate is None else math.ceil(estimate.host_bytes * 1.25 / 1e6)  # 25% over the model
    return max(floor, host)


def train_minutes(config: dict[str, Any], rule: str, estimate: Estimate | None) -> int:
    if "runtime" in settings(config, rule):  # an explicit limit wins
        return int(settings(config, rule)["runtime"])
    return minutes(config, estimate.seconds) if estimate is not None else 120


def search_forwards(config: dict[str, Any], rule: str, space: str) -> int:
    """Forward passes (subnet x batch) a search-phase job makes; retrain counts its training steps x 3."""
    s = {**(config.get("search") or {}), **((config["spaces"][space] or {}).get("search") or {})}
    batches = int(s.get("batches", 4)) + int(s.get("calib_batches", 8))
    if rule == "search":
        return int(s.get("population", 8)) * int(s.get("generations", 4)) * batches
    if rule == "retrain":
        return 3 * int(s.get("retrain_steps", 64))
    if rule == "curve":
        every = int(s.get("checkpoint_every", 0))
        checkpoints = math.ceil(int(config["steps"]) / every) + 1 if every else 1
        return checkpoints * int(s.get("curve_subnets", 4)) * batches
    return batches  # search_accuracy


def search_seconds(config: dict[str, Any], rule: str, space: str, reference: Estimate) -> float:
    """Predicted seconds of a one-GPU search-phase job from the reference's per-subnet compute."""
    return search_forwards(config, rule, space) * reference.exec_s * FORWARD_SHARE


def search_mem_mb(config: dict[str, Any], rule: str, reference: Estimate | None) -> int:
    """A search-phase job loads the whole supernet on the host (its weights file) plus its working set."""
    if "mem_mb" in settings(config, rule):
        return int(settings(config, rule)["mem_mb"])
    weights = 0 if reference is None else reference.params * 4
    return max(4000, math.ceil(weights * 1.5 / 1e6))
