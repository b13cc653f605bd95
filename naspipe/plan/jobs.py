"""The training jobs of a workflow configuration and the ``naspipe train`` settings of each.

One list for everyone who needs it: the Snakemake rules (their outputs and ``--set``
arguments), the fit check, the resources and ``naspipe plan``. A job is a run directory
and the settings that make it; the search-phase jobs follow the training runs one to one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from naspipe import systems
from naspipe.plan import paths

REFERENCE_SYSTEM = "sequential"  # every comparison is against sequential training on one stage
ABLATION_SYSTEMS = {  # variant -> (system, partition_mode)
    "naspipe": ("csp", "per-subnet"),
    "no-predictor": ("csp-no-predictor", "per-subnet"),
    "no-mirroring": ("csp", "static"),
    "no-scheduler": ("csp-no-scheduler", "per-subnet"),
}


@dataclass(frozen=True)
class TrainJob:
    """One training run of the plan: rule ``train`` or ``ablation``."""

    rule: str
    space: str
    system: str  # what ``naspipe train --system`` takes (``csp`` for a run of csp-mb: its ``sets`` add the parts)
    stages: int
    seed: int
    out: str  # its run directory
    sets: tuple[str, ...]  # `--set` pairs beyond the space's data and the partition file
    steps: int  # `--steps`: the config's `steps`, or `ablation.steps` for an ablation run
    replicas: int = 1  # processes per stage (a replicated layout: its ``sets`` say so too)

    @property
    def name(self) -> str:
        return self.out.removeprefix(paths.results() + "/")

    @property
    def processes(self) -> int:
        """Processes (GPUs) the run uses: D x R."""
        return self.stages * self.replicas


def run_dir(space: str, system: str, stages: int, seed: int, replicas: int = 1) -> str:
    if replicas > 1:
        return paths.path("replicated_run", space=space, system=system, stages=stages, replicas=replicas, seed=seed)
    return paths.path("run", space=space, system=system, stages=stages, seed=seed)


REPLICATED_SYSTEMS = ("csp-mb",)  # the systems the config's ``layouts`` train (csp's micro-batched schedule)


def layouts(config: dict[str, Any]) -> list[tuple[int, int]]:
    """The config's replicated layouts as ``(stages, replicas)``, in the config's order."""
    return [(int(d), int(r)) for d, _, r in (str(text).partition("x") for text in config.get("layouts") or [])]


def replicated_runs(config: dict[str, Any], space: str, system: str, seed: int) -> list[str]:
    """The runs of ``system`` at the config's replicated layouts (none for a system that does not replicate)."""
    if system not in REPLICATED_SYSTEMS or system not in config["systems"]:
        return []
    return [run_dir(space, system, d, seed, r) for d, r in layouts(config)]


def reference_system(system: str = REFERENCE_SYSTEM) -> str:
    """What a run of ``system`` (a name of the config's ``systems``) is compared with: sequential training with
    the same schedule settings (``sequential-mb`` for a micro-batched ``-mb`` system, whose parts change the
    bits), on one stage."""
    return REFERENCE_SYSTEM + systems.MICRO_SUFFIX if systems.is_micro_name(system) else REFERENCE_SYSTEM


def reference_run(space: str, seed: int, system: str = REFERENCE_SYSTEM) -> str:
    return run_dir(space, reference_system(system), 1, seed)


def reference_systems(config: dict[str, Any]) -> list[str]:
    """The references the config trains: sequential always (the claims judge the paper's csp against it), and
    sequential-mb when a micro-batched system is trained."""
    return sorted({REFERENCE_SYSTEM} | {reference_system(system) for system in config["systems"]})


def system_runs(config: dict[str, Any], space: str, system: str, seed: int) -> list[str]:
    """The runs of one system over every stage count and replicated layout (the reference itself left out): what
    Table 3 compares with the reference."""
    return stage_runs(config, space, system, seed) + replicated_runs(config, space, system, seed)


def stage_runs(config: dict[str, Any], space: str, system: str, seed: int) -> list[str]:
    """The runs of one system at the config's stage counts, fewest stages first (the reference left out)."""
    runs = [run_dir(space, system, d, seed) for d in sorted(config["stages"])]
    return [r for r in runs if r != reference_run(space, seed, system)]


def micro(config: dict[str, Any], simulated: bool = False) -> dict[str, Any]:
    """The config's ``micro`` block with the schema's defaults (a config read without the schema has none);
    ``simulated``: with ``simulate.micro``'s keys over it (the simulated spaces are not the trained ones)."""
    block = {**systems.MICRO_SCHEDULE, **(config.get("micro") or {})}
    if simulated:
        block.update((config.get("simulate") or {}).get("micro") or {})
    return block


def system_sets(config: dict[str, Any], system: str, simulated: bool = False) -> list[str]:
    """The schedule's own ``--set`` pairs of a run of ``system``: for a micro-batched (``-mb``) system the
    config's ``micro`` block, the same at every stage count (a count that followed the stage count would
    train differently at each)."""
    if not systems.is_micro_name(system):
        return []
    m = micro(config, simulated)
    return [f"micro_batches={m['micro_batches']}", f"split_backward={str(m['split_backward']).lower()}",
            f"priority={m['priority']}"]


def common_sets(config: dict[str, Any], steps: int | None = None) -> list[str]:
    """Settings every training run of the config shares (threads, device, numerics, checkpoints, train_options);
    ``steps``: the run's length when not the config's ``steps`` (it sets how many checkpoints are kept)."""
    sets = [f"threads={config.get('threads_per_stage', 1)}", f"device={config.get('device', 'cpu')}",
            "progress=off", f"numerics={config.get('numerics', 'native')}"]
    every = (config.get("search") or {}).get("checkpoint_every", 0)
    if every:  # Figure 4's score-over-time curves evaluate these checkpoints
        kept = math.ceil((steps or config["steps"]) / every) + 1
        sets += [f"checkpoint_every={every}", f"keep_checkpoints={kept}"]
    return sets + [f"{key}={value}" for key, value in sorted((config.get("train_options") or {}).items())]


def space_sets(config: dict[str, Any], space: str) -> list[str]:
    """The space's own options as `--set space.KEY=VALUE` (its prepared data is added by the workflow)."""
    options = (config["spaces"][space] or {}).get("options") or {}
    return [f"space.{key}={value}" for key, value in sorted(options.items())]


def train_jobs(config: dict[str, Any]) -> list[TrainJob]:
    """Every `train` job: the reference per space and seed, every system at every stage count."""
    runs = {(space, ref, 1, seed) for space in config["spaces"] for ref in reference_systems(config)
            for seed in config["seeds"]}
    runs |= {(space, system, d, seed) for space in config["spaces"] for system in config["systems"]
             for d in config["stages"] for seed in config["seeds"]}
    return [TrainJob("train", sp, systems.base_name(sy), d, se, run_dir(sp, sy, d, se),
                     (*space_sets(config, sp), *common_sets(config), *system_sets(config, sy)), int(config["steps"]))
            for sp, sy, d, se in sorted(runs)]


def ablation_jobs(config: dict[str, Any]) -> list[TrainJob]:
    """Every `ablation` job (paper Figure 6): each variant of NASPipe over the ablation's stage counts.

    ``ablation.steps`` (default: ``steps``) shortens them: Figure 6 compares rates and bubble ratios, which a
    run reaches within its first checkpoints; the losses it does not read need the full length.
    """
    ablation = config.get("ablation") or {}
    steps = int(ablation.get("steps") or config["steps"])
    jobs = []
    for space in sorted(config["spaces"]):
        for variant in ablation.get("variants", list(ABLATION_SYSTEMS)):
            system, mode = ABLATION_SYSTEMS[variant]
            sets = (*space_sets(config, space), *common_sets(config, steps), f"partition_mode={mode}",
                    "cache.enabled=true",
                    f"cache.budget={ablation.get('cache_budget', '3x')}",
                    f"cache.horizon={ablation.get('horizon', 8)}")
            for stages in ablation.get("stages", []):
                for seed in config["seeds"]:
                    out = paths.path("ablation", space=space, variant=variant, stages=stages, seed=seed)
                    jobs.append(TrainJob("ablation", space, system, stages, seed, out, sets, steps))
    return jobs


def replicated_jobs(config: dict[str, Any]) -> list[TrainJob]:
    """Every ``train`` job of a replicated layout: csp-mb at each of the config's ``layouts``. They are compared
    in Table 3 like every stage count, and left out of the measured tables, searches and curves, which read one
    run per (system, stage count)."""
    jobs = []
    for space in sorted(config["spaces"]):
        for system in REPLICATED_SYSTEMS:
            if system not in config["systems"]:
                continue
            for stages, replicas in layouts(config):
                for seed in config["seeds"]:
                    sets = (*space_sets(config, space), *common_sets(config), *system_sets(config, system),
                            f"replicas={replicas}")
                    jobs.append(TrainJob("train", space, systems.base_name(system), stages, seed,
                                         run_dir(space, system, stages, seed, replicas), sets, int(config["steps"]),
                                         replicas))
    return jobs


def all_training_jobs(config: dict[str, Any]) -> list[TrainJob]:
    return train_jobs(config) + replicated_jobs(config) + ablation_jobs(config)


def curve_runs(config: dict[str, Any]) -> list[str]:
    """Figure 4: per space, system and seed, the run at the largest stage count (and the reference)."""
    runs = {run_dir(space, ref, 1, seed) for space in config["spaces"] for ref in reference_systems(config)
            for seed in config["seeds"]}
    runs |= {stage_runs(config, space, system, seed)[-1] for space in config["spaces"]
             for system in config["systems"] for seed in config["seeds"]
             if stage_runs(config, space, system, seed)}
    return sorted(runs)
