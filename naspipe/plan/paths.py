"""Where every workflow output and log lives: one table of path patterns, read by rules, plan and report.

A rule's output is ``path(kind)`` (a pattern with Snakemake wildcards, e.g. ``{space}``) and its log
``logfile(rule, kind)``; code that needs one concrete path fills the same pattern (``path(kind, space=...)``).
Renaming a directory is then one edit here instead of a hunt through rule files, and a run's directory
cannot be spelled two ways by the training rule and the rule that reads it.
"""

from __future__ import annotations

RESULTS = "results"
_RUN = "{space}/{system}/D{stages}-seed{seed}"
# kind -> (top directory under results/, the wildcards' part, suffix)
PATTERNS: dict[str, tuple[str, str, str]] = {
    "raw": ("raw", "{dataset}", ""),
    "data": ("data", "{dataset}", ""),
    "profile": ("profiles", "{space}", ".csv"),
    "profile_table": ("profiles", "{space}", ".md"),
    "partition": ("partitions", "{space}/D{stages}", ".json"),
    "run": ("runs", _RUN, ""),
    "replicated_run": ("runs", "{space}/{system}/D{stages}xR{replicas}-seed{seed}", ""),
    "ablation": ("ablations", "{space}/{variant}/D{stages}-seed{seed}", ""),
    "reproducibility": ("reproducibility", "{space}/{system}-seed{seed}", ".json"),
    "search": ("search", _RUN, ""),
    "accuracy": ("search", _RUN, ".accuracy.csv"),
    "retrain": ("retrain", _RUN, ""),
    "curve": ("curves", _RUN, ".csv"),
    "sim": ("sim", "{hardware}/{space}/{system}/D{stages}", ""),
    "sim_gpus": ("sim", "{hardware}/{space}/{system}/G{gpus}", ""),
    "table": ("tables", "{name}", ".csv"),
    "table_md": ("tables", "{name}", ".md"),
    "figure": ("figures", "{name}", ".png"),
    "fitted_spec": ("calibration", "{name}", ".yaml"),
    "retrain_random": ("retrain_random", "{space}/seed{seed}/r{k}", ""),
    "random_accuracy": ("search", "{space}/random-seed{seed}", ".accuracy.csv"),
}


def path(kind: str, **fields: object) -> str:
    """The path of ``kind`` under results/: a wildcard pattern, or concrete once every field is given."""
    top, tail, suffix = PATTERNS[kind]
    pattern = f"{RESULTS}/{top}/{tail}{suffix}"
    return pattern.format(**fields) if fields else pattern


def logfile(rule: str, kind: str = "") -> str:
    """A rule's log: ``results/logs/RULE/<the output's wildcards>.log`` (``results/logs/RULE.log`` without)."""
    tail = f"/{PATTERNS[kind][1]}" if kind else ""
    return f"{RESULTS}/logs/{rule}{tail}.log"


def benchmarkfile(rule: str, kind: str = "") -> str:
    """A job's Snakemake benchmark (wall s, cpu_time, max RSS): ``results/benchmarks/RULE/<wildcards>.tsv``.

    Kept for every job so the makespan can be modelled from a run's own numbers (docs/workflow.md):
    total CPU seconds over the cores against the critical path, without a second, quiet run.
    """
    tail = f"/{PATTERNS[kind][1]}" if kind else ""
    return f"{RESULTS}/benchmarks/{rule}{tail}.tsv"


def memo_store(kind: str) -> str:
    """Where the search phase's ``kind`` results are kept by content (naspipe.plan.memo), beside the outputs."""
    return f"{RESULTS}/{PATTERNS[kind][0]}/.memo"


def results(name: str = "") -> str:
    """A file or directory directly under results/ (``report.md``), or results/ itself."""
    return f"{RESULTS}/{name}" if name else RESULTS


def moved(run: str, kind: str, suffix: str = "") -> str:
    """The ``kind`` output of a training run directory (its search, curve, ...): same wildcards, other top."""
    top = PATTERNS[kind][0]
    return run.replace(f"{RESULTS}/{PATTERNS['run'][0]}/", f"{RESULTS}/{top}/", 1) + suffix
