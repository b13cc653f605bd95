"""Each workflow job's CPU seconds, start and end, with every process it spawned counted (issue 21).

    python -m naspipe.plan.jobclock FILE SESSION -- COMMAND [ARGS...]
    python -m naspipe.plan.jobclock FILE SESSION - <<'EOF'   (a bash script on stdin, run with -euo pipefail)

The workflow wraps every job's command in the second form (:func:`prefix` and :data:`SUFFIX` in
workflow/rules/common.smk's ``shell.prefix``/``shell.suffix``), so a command that is several shell
statements (``export MASTER_ADDR=...; srun ...``) is timed whole. It runs the command,
waits for it, reaps every descendant left behind, then appends one tab-separated line to FILE:
``session  start  end  cpu_s  command  host  slurm_job`` (epoch seconds; ``cpu_s`` user + system of the
whole tree; where it ran: the host name and, inside a SLURM allocation, its job id, else empty).

SESSION names one workflow invocation. Under SLURM every job is a new snakemake that reads the Snakefile
again, so the session cannot be made there: the submitting snakemake makes it once (:func:`session_of`) and
exports it in :data:`SESSION_ENV`, which sbatch (``--export=ALL``) and srun pass on to every job.

Why not GNU time or Snakemake's ``benchmark:`` files: a multi-stage training job's stage processes
are children of multiprocessing's fork server, which the job never waits for, so their CPU never
reaches ``time``'s rusage (a D=4 run reported 4.8 CPU s of the 23.0 that /proc/stat counted), and
Snakemake samples a job's process tree every 0.5 s for its first ~15 s and every 30 s after, so it
misses what a job spends after its last sample. Here the clock makes itself a child subreaper
(Linux ``prctl``): orphans such as the fork server are re-parented to it and reaped by it, so
``getrusage(RUSAGE_CHILDREN)`` holds every descendant's CPU, to the kernel's tick. Where prctl is
unavailable it counts what the command itself waits for (as GNU time does). The run summary
(naspipe.report.run_summary) reads FILE for the workflow's CPU%; no torch is imported here.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import MutableMapping, Sequence
from pathlib import Path

from naspipe.plan import paths

RECORD = paths.results("benchmarks/jobclock.tsv")  # relative to the workflow's working directory
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
ORPHAN_WAIT_S = 30.0  # how long descendants may outlive the command before the clock stops waiting
COLUMNS = ("session", "start", "end", "cpu_s", "command")
WHERE = ("host", "slurm_job")  # after the command: files written before these columns existed still read
SESSION_ENV = "NASPIPE_JOB_SESSION"


def session_of(environ: MutableMapping[str, str]) -> str:
    """This workflow invocation's session: the one in ``environ`` (a job of a cluster run), else a new one,
    exported in ``environ`` so that the jobs this process submits or runs inherit it."""
    return environ.setdefault(SESSION_ENV, f"{int(time.time())}-{os.getpid()}")


def where() -> tuple[str, str]:
    """The host this job runs on and its SLURM job id ("" outside an allocation)."""
    return socket.gethostname(), os.environ.get("SLURM_JOB_ID", "")


def become_subreaper() -> bool:
    """Adopt the command's orphans (Linux only); False where the kernel or libc cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(deadline: float) -> None:
    """Wait for every remaining descendant (adopted orphans) until none is left or ``deadline`` passes."""
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def children_cpu() -> float:
    """User + system seconds of every descendant reaped so far (theirs and their own reaped children's)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def record_line(session: str, start: float, end: float, cpu: float, command: Sequence[str],
                place: Sequence[str] = ()) -> str:
    """One line of FILE (tabs and newlines flattened, so a line is always one job); ``place``: :func:`where`."""
    fields = [" ".join(command), *place]
    text = "\t".join(f.replace("\t", " ").replace("\n", " ") for f in fields)
    return f"{session}\t{start:.3f}\t{end:.3f}\t{cpu:.3f}\t{text}\n"


def append(path: Path, line: str) -> None:
    """One ``write`` on an O_APPEND descriptor: concurrent jobs' lines never interleave."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def run(record: Path, session: str, command: Sequence[str]) -> int:
    """Run ``command``, reap its tree, record it; the command's exit status (128 + N if killed by signal N)."""
    start = time.time()
    become_subreaper()
    child = subprocess.Popen(list(command))

    def forward(signum: int, _frame: object) -> None:  # snakemake's cancel: let the command clean up
        child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    status = child.wait()
    reap_orphans(time.monotonic() + ORPHAN_WAIT_S)
    append(record, record_line(session, start, time.time(), children_cpu(), command, where()))
    return status if status >= 0 else 128 - status


HEREDOC = "NASPIPE_JOB_SCRIPT"
SUFFIX = f"\n{HEREDOC}"  # shell.suffix: ends the here-document that :func:`prefix` opens
SHELL = ("bash", "-euo", "pipefail", "-c")  # how a script read from stdin runs (the workflow's shell settings)


def prefix(session: str, record: str = RECORD) -> str:
    """What the workflow's ``shell.prefix`` ends with: the clock reading the job's command as a script from a
    quoted here-document (closed by :data:`SUFFIX`); ``session``: one per workflow invocation."""
    return f"python -m naspipe.plan.jobclock {shlex.quote(record)} {shlex.quote(session)} - <<'{HEREDOC}'\n"


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if len(args) == 3 and args[2] == "-":
        return run(Path(args[0]), args[1], [*SHELL, sys.stdin.read().strip()])
    if len(args) < 4 or args[2] != "--":
        print("usage: python -m naspipe.plan.jobclock FILE SESSION -- COMMAND [ARGS...] | FILE SESSION - <SCRIPT",
              file=sys.stderr)
        return 2
    return run(Path(args[0]), args[1], args[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
