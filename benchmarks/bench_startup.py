"""Per-command start-up and CPU: one naspipe command run as a user (or a workflow job) runs it, from two trees.

Each repeat runs the command once from every tree, alternating (side by side, so a busy machine
slows both alike), in a fresh interpreter; it reports the median wall time and the median CPU
(user + system of the child, from ``os.wait4``) per tree and the ratio. docs/startup.md lists
the commands and the figures.

    python benchmarks/bench_startup.py --tree before=/work/main --tree after=. --repeats 5 -- \\
        simulate --space nlp.c1 --system csp --stages 8 --steps 128 --out {out}

``{out}`` in the command becomes a fresh directory per run. The command runs in a temporary
directory (``python -m`` puts the working directory first on the path) with ``PYTHONPATH`` set to
the tree, so the tree's package wins over an installed one; relative paths in the command are
resolved against this script's working directory first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_once(tree: Path, command: list[str], workdir: Path) -> tuple[float, float]:
    """(wall s, CPU s) of ``python -m naspipe command`` with ``tree`` first on the path."""
    out = tempfile.mkdtemp(dir=workdir)
    argv = [sys.executable, "-m", "naspipe", *(_absolute(a).replace("{out}", f"{out}/o") for a in command)]
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"{tree}: {' '.join(command)} exited {proc.returncode}: {err.strip()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def _absolute(arg: str) -> str:
    """An argument naming an existing relative path, made absolute (the command runs elsewhere)."""
    return str(Path(arg).resolve()) if not arg.startswith("-") and "/" in arg and Path(arg).exists() else arg


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", required=True, metavar="NAME=PATH", help="a source tree to time")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the naspipe command")
    args = p.parse_args(argv)
    trees = dict(t.split("=", 1) for t in args.tree)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name, path in trees.items():
                times[name].append(run_once(Path(path), command, Path(tmp)))
    print(f"naspipe {' '.join(command)}  ({args.repeats} repeats, load {os.getloadavg()[0]:.2f})")
    first = next(iter(trees))
    for name in trees:
        wall = statistics.median(w for w, _ in times[name])
        cpu = statistics.median(c for _, c in times[name])
        base = statistics.median(c for _, c in times[first])
        print(f"  {name:>8}: wall {wall:7.2f} s  CPU {cpu:7.2f} s  CPU ratio to {first} {cpu / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
