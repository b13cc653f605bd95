"""``naspipe plan``: what a workflow configuration will cost before anything is submitted.

Prints, for a configuration and the hardware it names: jobs per rule, predicted and reserved
GPU-hours per rule and in total, device and host memory of every training job (seeds folded),
and the disk its checkpoints take. The same fit check as the workflow runs first, so a plan
that prints is one whose every training job fits (exit 2 with one line otherwise).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from naspipe.errors import UsageError
from naspipe.yamlio import read_yaml

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "plan", description="The cost of a workflow configuration: jobs, GPU-hours, memory per job, disk. Every "
        "training job is checked against the config's hardware first (exit 2 naming one that cannot fit).")
    p.add_argument("--configfile", type=Path, required=True, help="workflow configuration (e.g. config/paper.yaml)")
    p.add_argument("--hardware", help="hardware spec to plan for instead of the config's `hardware` key")
    return p


def run(args: argparse.Namespace) -> int:
    from naspipe.plan.fit import fit_jobs
    from naspipe.plan.jobs import all_training_jobs
    from naspipe.plan.summary import job_rows, rule_costs

    config = read_config(args.configfile)
    cuda = config.get("device", "cpu") == "cuda"
    hardware = args.hardware or config.get("hardware") or ("cpu-local" if not cuda else "")
    if not hardware:
        raise UsageError(f"{args.configfile}: hardware: required with device: cuda (or pass --hardware)")
    fitted = fit_jobs(all_training_jobs(config), _estimator(config, hardware, cuda))
    print(render(config, args.configfile, hardware, rule_costs(config, fitted), job_rows(config, fitted)))
    return 0


def read_config(path: Path) -> dict[str, Any]:
    """The workflow config, checked against the workflow's schema (one line naming the key)."""
    data = read_yaml(path, str(path))  # a key given twice is an error, as in the workflow
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of config keys")
    try:
        import jsonschema  # snakemake's dependency: there wherever the workflow runs
    except ImportError:
        return data
    schema = yaml.safe_load(SCHEMA.read_text())
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise UsageError(f"{path}: {key}: {error.message.splitlines()[0]}")
    return data


def _estimator(config: dict[str, Any], hardware: str, cuda: bool) -> Any:
    from naspipe.plan.cost import estimate

    partition_by = "costs" if config.get("partition_costs", "profile") == "profile" else "config"
    return lambda job: estimate(job.space, job.system, job.stages, job.steps, job.sets, hardware,
                                partition_by, cpu=not cuda)


def render(config: dict[str, Any], path: Path, hardware: str, rules: list[Any], rows: list[Any]) -> str:
    """The plan as plain text tables (quoted in docs/cluster.md)."""
    lines = [f"naspipe plan: {path} on {hardware} (every training job fits; device memory at the run's batch)", "",
             f"{'rule':<16}{'jobs':>6}{'GPUs/job':>10}{'predicted GPU-h':>17}{'reserved GPU-h':>16}{'disk GB':>10}"]
    for r in rules:
        gpus = "-".join(str(g) for g in sorted({min(r.gpus), max(r.gpus)})) if r.gpus else "0"
        lines.append(f"{r.rule:<16}{r.jobs:>6}{gpus:>10}{r.predicted_gpu_h:>17.1f}{r.reserved_gpu_h:>16.1f}"
                     f"{r.disk_bytes / 1e9:>10.0f}")
    lines.append(f"{'total':<16}{sum(r.jobs for r in rules):>6}{'':>10}{sum(r.predicted_gpu_h for r in rules):>17.1f}"
                 f"{sum(r.reserved_gpu_h for r in rules):>16.1f}{sum(r.disk_bytes for r in rules) / 1e9:>10.0f}")
    lines += ["", "predicted: the simulator's time on the hardware; reserved: the jobs' time limits x GPUs (profile "
              "and prepare: their configured limits); disk: checkpoints kept", "",
              f"{'rule':<9}{'space':<10}{'system':<18}{'D':>5}{'seeds':>6}{'cache':>6}{'device GB':>10}"
              f"{'host GB':>9}{'batch':>6}{'pred h':>8}{'limit h':>8}{'mem GB/node':>12}"]
    for j in sorted(rows, key=lambda j: (j.rule != "train", j.space, j.system, j.stages, j.replicas)):
        lines.append(f"{j.rule:<9}{j.space:<10}{j.system:<18}{j.layout:>5}{j.seeds:>6}{'on' if j.cache else '':>6}"
                     f"{j.device_gb:>10.1f}{j.host_gb:>9.1f}{j.batch:>6}{j.predicted_h:>8.2f}{j.limit_h:>8.2f}"
                     f"{j.mem_gb:>12.0f}")
    return "\n".join(lines)
