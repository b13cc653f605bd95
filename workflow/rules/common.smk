"""Config access and path helpers for the rule files; the decisions behind them are the package's.

`W` (naspipe.plan.workflow.Workflow, built and checked in the Snakefile) answers which jobs exist and
their commands and resources; naspipe.plan.paths says where every output and log lives.
"""

import os

from naspipe import numerics
from naspipe.plan import jobclock
from naspipe.plan.order import job_times_prefix, priority
from naspipe.plan.paths import benchmarkfile, logfile, path, results
from naspipe.report.sections import report_outputs
from naspipe.plan.workflow import (
    ablation_variants,
    calibration_outputs,
    claims_tables,
    set_args,
    space_options,
)

# every job's command runs under naspipe.plan.jobclock: its whole process tree's CPU seconds, start and end,
# one line per job in jobclock.RECORD (the run summary's CPU%); one session per invocation, made by the
# submitting snakemake and inherited through the environment by every SLURM job (which reads this file again)
JOB_SESSION = jobclock.session_of(os.environ)
# a training job ends with this snakemake, even one killed by SIGKILL (naspipe/runtime/lifecycle.py); the
# package comes from the environment (installed by `make`, or by envs/naspipe.yaml with --use-conda)
# and every job runs the config's CPU kernels (naspipe.numerics): its pins are in the environment before any
# python starts, so profile, search and evaluate compute as the training runs do
shell.prefix(
    f"set -euo pipefail; export NASPIPE_DIE_WITH=$PPID; {numerics.shell_prefix(config['numerics'])}"
    f"{jobclock.prefix(JOB_SESSION)}{job_times_prefix(os.environ)}"
)
shell.suffix(jobclock.SUFFIX)
CONDA_ENV = "../envs/naspipe.yaml"
# the digests of the default config's published results (published.smk), beside the workflow
PUBLISHED = os.path.relpath(
    Path(workflow.current_basedir).parent / "published" / "config.json"
)

SPACES = sorted(config["spaces"])
CUDA = W.cuda
SIMULATE = config.get("simulate") or {}


wildcard_constraints:
    space=r"[a-z]+(\.[a-z0-9]+)?",
    hardware=r"[A-Za-z0-9_.-]+",
    system=r"[a-z-]+",
    stages=r"\d+",
    replicas=r"\d+",
    gpus=r"\d+",
    seed=r"\d+",
    dataset=r"[A-Za-z0-9_.-]+",


def report_file(file, caption, category):
    """A report()-flagged output, captioned by report/CAPTION.rst (absolute: `all` reuses it)."""
    if caption is None:
        return file
    captions = Path(workflow.current_basedir).parent / "report"
    return report(file, caption=str(captions / f"{caption}.rst"), category=category)


REPORT_OUTPUTS = [report_file(*output) for output in report_outputs()]
