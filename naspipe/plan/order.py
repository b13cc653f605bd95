"""Which ready job Snakemake starts first: a rule's ``priority``, longest remaining chain first.

On a few cores the workflow's wall time is set by its longest chain of dependent jobs, not by
its total work: per training run, train -> search -> retrain -> search accuracy runs one job
after another, and the report waits for the last of them. Snakemake starts ready jobs in
priority order, so a rule's priority is the length of the chain it heads (its own rank in the
chain): the heads of long chains start first, and jobs nothing waits on (the simulations, the
calibration, the ablation runs) fill the cores while a chain's tail runs, longest first. Without it
Snakemake started the sixty short simulations first and left the search chains for the end
(docs/workflow.md, "Job order").
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

from naspipe import systems
from naspipe.plan.jobs import REFERENCE_SYSTEM

# rule -> jobs still to run after it on its longest chain to the report (higher: started first)
PRIORITY: dict[str, int] = {
    "fetch": 9,
    "synthesize": 8,
    "prepare": 7,
    "profile": 6,
    "partition": 5,
    "train": 4,
    "search": 3,
    "retrain": 2,
    "retrain_random": 2,
    "search_accuracy": 1,
    "random_accuracy": 1,
    "curve": 1,
    "compare": 1,
    # nothing waits on these but the report: the long ones (a D = 4 training run, a ~13 CPU s fit) before
    # the ~3 CPU s simulations, so the last job to start is a short one
    "ablation": 1,
    "calibrate": 1,
    "attribute": 1,
    "bubble_models": 1,
    "simulate": 0,
    "report": 0,
    "published": 0,  # reads the report's tables: last
}


# the search-phase rules whose results are keyed by content (naspipe.plan.memo)
KEYED = ("search", "retrain", "search_accuracy")


def priority(rule: str) -> int | Callable[[Any], float]:
    """The rule's Snakemake ``priority`` (a rule missing from the table is an error, not a silent 0).

    Within a keyed rule, the reference run's job goes first and the jobs expected to copy its result
    last (see ``share_offset``), so a copy rarely waits on its key's lock with a core idle.
    """
    level = PRIORITY[rule]
    if rule == "train":  # the reference's training first: its search heads the random-subnet retrains too
        return lambda w: level + max(0.0, share_offset(str(w.system), int(w.stages)))
    if rule not in KEYED:
        return level
    return lambda w: level + share_offset(str(w.system), int(w.stages))


def share_offset(system: str, stages: int) -> float:
    """+0.5 for the reference (sequential, one stage); -0.5 for runs expected to end with its weights
    bit for bit (a causal system such as csp at any stage count, any system at one stage); else 0.

    Only an order: a run that does not reproduce the reference computes its own key, a little later.
    """
    if systems.base_name(system) == REFERENCE_SYSTEM and stages == 1:
        return 0.5
    return -0.5 if stages == 1 or systems.get(systems.base_name(system)).causal else 0.0


def job_times_prefix(environ: Mapping[str, str]) -> str:
    """With ``NASPIPE_JOB_TIMES=FILE``: GNU time before every job's command, appending its wall, user and
    system seconds and the command to FILE (benchmarks/workflow_makespan.py models the run from them).

    Snakemake's own ``benchmark:`` files sample a job's CPU every 30 s after its first 30 and miss what
    it spends after the last sample: on a loaded machine most training and search jobs run that long.
    """
    file = environ.get("NASPIPE_JOB_TIMES", "")
    return f"/usr/bin/time -a -o {shlex.quote(file)} -f '%e %U %S %C' " if file else ""
