"""Where a training job can run: one machine (``with-gpus``) or a SLURM allocation over nodes (``srun``).

A cuda job with D stages needs D GPUs. On one machine they come from ``--resources gpu=N``; a job
with D > N could never start (or, before this check, silently claimed more GPUs than the cap), so
the plan is refused with the stage counts that need a cluster. Under SLURM a job with more stages
than ``gpus_per_node`` spans nodes with one task per stage; ``srun`` is used only there.
"""

from __future__ import annotations

import math

from naspipe.errors import UsageError


def nodes(stages: int, gpus_per_node: int, cuda: bool) -> int:
    """Nodes a job spans: one GPU per stage, ``gpus_per_node`` per node (one node on cpu)."""
    return math.ceil(stages / gpus_per_node) if cuda else 1


def check_local(stage_counts: set[int], gpus: int | None, cuda: bool) -> None:
    """Refuse a local plan whose jobs need more GPUs than ``--resources gpu=N`` allows (one line)."""
    if not cuda or gpus is None:
        return
    too_big = sorted(d for d in stage_counts if d > gpus)
    if too_big:
        counts = ", ".join(str(d) for d in too_big)
        raise UsageError(f"jobs of {counts} GPUs (stages x replicas) need more than the {gpus} GPUs of --resources "
                         f"gpu={gpus}: run them on a cluster (--profile profiles/slurm) or leave them out of "
                         "stages/layouts/ablation.stages")
