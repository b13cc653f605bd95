"""The job clock (naspipe.plan.jobclock): a job's CPU seconds include processes it never waits for.

A multi-stage training job's stage processes are children of multiprocessing's fork server, which
nobody waits for; GNU time misses them. Here a command leaves an orphan that burns CPU after the
command has exited: the clock, a child subreaper, must adopt it, wait for it and count its CPU.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from naspipe.plan import jobclock

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux's")
def test_an_orphan_that_outlives_the_command_is_counted(tmp_path: Path) -> None:
    record = tmp_path / "clock.tsv"
    # the burner is re-parented when the shell exits, which it does at once
    orphan = f"({shlex.quote(sys.executable)} -c {shlex.quote(BURN)} &); exit 3"
    done = subprocess.run([sys.executable, "-m", "naspipe.plan.jobclock", str(record), "s1", "--",
                           "bash", "-c", orphan], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr  # the command's own status comes back
    (line,) = record.read_text().splitlines()
    session, start, end, cpu, command, host, slurm_job = line.split("\t")
    assert session == "s1" and float(end) - float(start) >= 0.4 and command.startswith("bash -c (")
    assert (host, slurm_job) == jobclock.where()  # where it ran: this host, no SLURM job (unless the suite runs in one)
    assert float(cpu) >= 0.35  # the orphan's 0.4 CPU s (GNU time reports 0.00 for the same command)


def test_records_are_one_line_per_job_with_tabs_flattened(tmp_path: Path) -> None:
    record = tmp_path / "clock.tsv"
    jobclock.append(record, jobclock.record_line("s", 1.0, 2.5, 0.25, ["echo", "a\tb\nc"]))
    jobclock.append(record, jobclock.record_line("s", 2.0, 3.0, 0.5, ["true"]))
    assert record.read_text().splitlines() == ["s\t1.000\t2.500\t0.250\techo a b c", "s\t2.000\t3.000\t0.500\ttrue"]


def test_one_session_per_invocation_inherited_by_its_jobs() -> None:
    """The submitting snakemake makes the session and exports it; a SLURM job (a new snakemake reading the
    Snakefile again, in the exported environment) gets the same one instead of making its own."""
    submitting: dict[str, str] = {}
    made = jobclock.session_of(submitting)
    assert submitting == {jobclock.SESSION_ENV: made} and jobclock.session_of(dict(submitting)) == made
    assert jobclock.session_of({}) != "" and jobclock.session_of({jobclock.SESSION_ENV: "7-1"}) == "7-1"


def test_a_usage_error_names_the_form() -> None:
    done = subprocess.run([sys.executable, "-m", "naspipe.plan.jobclock", "clock.tsv", "s"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("usage: python -m naspipe.plan.jobclock FILE SESSION --")


def test_the_workflow_prefix_and_suffix_time_a_compound_command_whole(tmp_path: Path) -> None:
    """A multi-node job's command is `export MASTER_ADDR=...; srun ...`: the clock must run all of it, in bash
    with -euo pipefail, and record it on one line (the job's `--out` is how benchmarks name it)."""
    record = tmp_path / "clock.tsv"
    # the prefix calls `python`, as workflow jobs do with the venv first on PATH (the Makefile puts it there)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = "export A=$((20000 + 7)); echo \"$A\" > out.txt; echo done --out out.txt"
    script = f"set -euo pipefail; {jobclock.prefix('1-2', str(record))} {command} {jobclock.SUFFIX}"
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.txt").read_text() == "20007\n" and done.stdout == "done --out out.txt\n"
    (line,) = record.read_text().splitlines()
    assert line.split("\t")[4] == f"bash -euo pipefail -c {command}"
    failing = f"{jobclock.prefix('1-2', str(record))} false; echo not reached {jobclock.SUFFIX}"
    failed = subprocess.run(["bash", "-c", failing], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert failed.returncode == 1
