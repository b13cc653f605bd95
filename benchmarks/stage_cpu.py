"""CPU seconds of a ``naspipe train`` run, per process of its tree, against what ``time(1)`` sees.

Locally spawned stages are children of multiprocessing's forkserver, so the only honest total is
one taken from ``/proc``: this tool starts the command, polls ``/proc/<pid>/stat`` of every
descendant (launcher, forkserver, stages, resource tracker) every 50 ms, and keeps each
process's last user + system time. Beside it, the growth of this tool's own ``RUSAGE_CHILDREN``
over the run: exactly what ``/usr/bin/time`` would report for the command (it reads the same
account), which misses the stages unless the launcher waits for the forkserver, as it does at the end
of every local multi-stage run (docs/performance.md, "The runtime against a plain PyTorch loop"). Polling
costs this tool CPU, not the run's tree.

Compare two trees (say /work/main and a worktree) side by side, interleaved, medians over repeats:

    python benchmarks/stage_cpu.py --tree before=/work/main --tree after=. \\
        --space nlp.tiny --space cv.tiny --stages 2 --stages 4 --system csp --steps 256 --repeat 3

or one command line of your own, e.g. a workflow job (run it where its relative paths resolve):

    python benchmarks/stage_cpu.py --tree before=/work/main --tree after=. --cwd RESULTS_PARENT -- \\
        python -m naspipe train ... --overwrite --out {tmp}/run

Figures depend on the machine's load: report ``uptime`` with them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Tree:
    """One run's CPU by process, as /proc saw it, and as the waiting parent's rusage saw it."""

    wall_s: float
    time_cpu_s: float  # RUSAGE_CHILDREN growth: what time(1) reports
    processes: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid -> (role, cpu s)

    @property
    def proc_cpu_s(self) -> float:
        return sum(cpu for _, cpu in self.processes.values())

    def by_role(self) -> dict[str, float]:
        roles: dict[str, float] = {}
        for role, cpu in self.processes.values():
            roles[role] = roles.get(role, 0.0) + cpu
        return roles


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of ``pid``, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _role(pid: int, parents: dict[int, int]) -> str:
    """forkserver, stage (a fork of it: same command line), resource-tracker, or launcher (the command
    and any wrapper of it, such as the workflow's ``naspipe with-gpus``)."""
    cmd = _cmdline(pid)
    if "multiprocessing.forkserver" in cmd:
        return "stage" if "multiprocessing.forkserver" in _cmdline(parents.get(pid, 0)) else "forkserver"
    return "resource-tracker" if "multiprocessing.resource_tracker" in cmd else "launcher"


def measure(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, poll_s: float = 0.05) -> Tree:
    """Run ``cmd`` to its end and account its CPU both ways; its output goes to a temp file (tail on failure)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        parents: dict[int, int] = {}
        seen: dict[int, tuple[str, float]] = {}
        while proc.poll() is None:
            _scan(proc.pid, parents, seen)
            time.sleep(poll_s)
        if proc.returncode != 0:
            log.seek(0)
            sys.exit(f"stage_cpu: {' '.join(cmd)} exited {proc.returncode}:\n{log.read()[-2000:].decode()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    grown = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Tree(time.perf_counter() - start, grown, seen)


def _scan(root: int, parents: dict[int, int], seen: dict[int, tuple[str, float]]) -> None:
    """One pass over /proc: note every descendant of ``root`` and its CPU so far."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        stat = _stat(pid)
        if stat is None:
            continue
        parents[pid] = stat[0]
        if _descends(pid, root, parents):
            role = seen[pid][0] if pid in seen else _role(pid, parents)
            seen[pid] = (role, max(stat[1], seen.get(pid, ("", 0.0))[1]))


def _descends(pid: int, root: int, parents: dict[int, int]) -> bool:
    for _ in range(8):
        if pid == root:
            return True
        if pid not in parents:
            return False
        pid = parents[pid]
    return False


def _train_cmd(space: str, system: str, stages: int, steps: int, out: Path) -> list[str]:
    return [sys.executable, "-m", "naspipe", "train", "--space", space, "--system", system, "--stages",
            str(stages), "--steps", str(steps), "--out", str(out)]


def interleaved(trees: dict[str, Path], cmd: list[str], repeat: int, cwd: Path | None) -> dict[str, list[Tree]]:
    """``cmd`` ``repeat`` times per tree, the trees taking turns (so a change of load hits both alike).

    Each tree is put first on ``PYTHONPATH`` and the command runs outside it (``cwd``, or a fresh temp
    dir): ``python -m naspipe`` run inside a tree would import the package from there instead.
    """
    runs: dict[str, list[Tree]] = {label: [] for label in trees}
    for _ in range(repeat):
        for label, root in trees.items():
            with tempfile.TemporaryDirectory(prefix="stage-cpu-") as tmp:
                env = {**os.environ, "PYTHONPATH": str(root.resolve())}
                runs[label].append(measure([a.replace("{tmp}", tmp) for a in cmd], env, cwd or Path(tmp)))
    return runs


def row(label: str, what: dict[str, object], runs: list[Tree]) -> dict[str, object]:
    """Medians over ``runs`` of the wall time, both CPU totals and the CPU of each kind of process."""
    def med(values: list[float]) -> float:
        return round(statistics.median(values), 2)

    roles = ("launcher", "forkserver", "stage")
    return {"tree": label, **what, "runs": len(runs), "wall_s": med([r.wall_s for r in runs]),
            "proc_cpu_s": med([r.proc_cpu_s for r in runs]), "time_cpu_s": med([r.time_cpu_s for r in runs]),
            **{f"{role}_cpu_s": med([r.by_role().get(role, 0.0) for r in runs]) for role in roles},
            "stages_seen": med([float(sum(1 for k, _ in r.processes.values() if k == "stage")) for r in runs])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                        help="a source tree to run naspipe from (first on PYTHONPATH); repeat to compare")
    parser.add_argument("--space", action="append", default=[])
    parser.add_argument("--stages", action="append", type=int, default=[])
    parser.add_argument("--system", default="csp")
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cwd", type=Path, help="with a command: run it here (default: a fresh temp dir)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("command", nargs="*", help="after --: a command to measure instead of the grid "
                                                   "('{tmp}' in it: a fresh temp dir per run)")
    args = parser.parse_args(argv)
    trees = {}
    for spec in args.tree or ["this=."]:
        label, sep, directory = spec.partition("=")
        if not sep or not Path(directory).is_dir():
            parser.error(f"--tree {spec!r}: expected LABEL=DIR with an existing DIR")
        trees[label] = Path(directory)
    rows = []
    if args.command:
        for label, runs in interleaved(trees, args.command, args.repeat, args.cwd).items():
            rows.append(row(label, {"command": " ".join(args.command)[:120]}, runs))
    for space in [] if args.command else args.space or ["nlp.tiny"]:
        for d in args.stages or [4]:
            cmd = _train_cmd(space, args.system, d, args.steps, Path("{tmp}") / "run")
            for label, runs in interleaved(trees, cmd, args.repeat, None).items():
                rows.append(row(label, {"space": space, "system": args.system, "stages": d}, runs))
    print(f"# load {os.getloadavg()[0]:.2f} at the end; medians of {args.repeat} runs per tree, interleaved")
    for line in rows:
        print(json.dumps(line))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
