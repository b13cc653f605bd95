"""The jobs a Snakemake dry run plans, as comparable data: per job its rule, files, wildcards, resources, command.

A refactoring of the workflow must plan the same jobs with the same commands; comparing two dry runs by
eye (219 jobs by default, over 2,000 for the paper) misses a changed flag, so this records them exactly.

    python tests/workflow_dryrun.py SNAKEFILE CONFIG [--paper] [--digest] [snakemake args...] > jobs.json

``python tests/workflow_dryrun.py --record`` rewrites tests/workflow_dryrun.json from the current
workflow, for every config it records with the arguments it records: run it after a change that is
meant to change the plan (a config's steps, spaces or systems), and say so in the commit.

``--digest`` prints the count and a SHA-256 of the jobs per rule instead of the jobs (what
tests/workflow_dryrun.json records for the default, CI and paper configs, taken on the workflow
before it moved to the catalog layout; tests/test_workflow_plan.py checks the workflow still plans them).
``--paper`` runs in a temporary workdir holding empty stand-ins for the paper's datasets (their paths
are checked to exist before any job). The ``jobid``, ``reason`` and date lines are left out: they
depend on the DAG's traversal order, not on what runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

KEPT = ("input", "output", "log", "wildcards", "resources")


def paper_workdir(config_file: Path, workdir: Path) -> Path:
    """A workdir with (empty) stand-ins for every dataset path of ``config_file``."""
    datasets = (yaml.safe_load(config_file.read_text()) or {}).get("datasets") or {}
    for dataset in datasets.values():
        for key in ("src", "tgt", "valid_src", "valid_tgt", "test_src", "test_tgt"):
            if key in dataset:
                (workdir / dataset[key]).parent.mkdir(parents=True, exist_ok=True)
                (workdir / dataset[key]).touch()
        for key in ("root", "path"):
            if key in dataset:
                (workdir / dataset[key]).mkdir(parents=True, exist_ok=True)
    return workdir


def parse_jobs(stdout: str) -> list[dict[str, Any]]:
    """Each ``rule NAME:`` block of ``snakemake -n -p`` output as a record (sorted, so order does not count)."""
    jobs: list[dict[str, Any]] = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", stdout):
        head = re.match(r"(?:local)?rule (\w+):\n", block)
        if head is None:
            continue
        job: dict[str, Any] = {"rule": head.group(1)}
        for line in block.splitlines()[1:]:
            key, _, value = line.strip().partition(": ")
            if key in KEPT:  # tmpdir is the machine's, not the plan's
                job[key] = ", ".join(sorted(v for v in value.split(", ") if not v.startswith("tmpdir=")))
            elif line.startswith("Shell command: "):
                job["shell"] = line.removeprefix("Shell command: ")
            elif not line.strip():
                break
        jobs.append(job)
    return sorted(jobs, key=lambda j: json.dumps(j, sort_keys=True))


def machine_free(text: str, root: Path, workdir: Path) -> str:
    """``text`` with the repository's place on this machine written ``<repo>``.

    A job that reads a file of the repository (the published digests) names it by a path from the workdir,
    which climbs to wherever the checkout lies: ``../../work/main/...`` here, ``../../check/work/main/...``
    on CI. The plan is the same; only the machine differs.
    """
    root = root.resolve()
    text = text.replace(os.path.relpath(root, workdir.resolve()), "<repo>")  # first: it may hold the other
    return text.replace(str(root), "<repo>")


def dry_run(snakefile: Path, config_file: Path, workdir: Path, *extra: str) -> dict[str, Any]:
    """The planned jobs and the count per rule of one dry run (raises with snakemake's stderr on failure)."""
    bin_dir, root = Path(sys.executable).parent, snakefile.resolve().parent
    root = root.parent if root.name == "workflow" else root  # workflow/Snakefile or the root's include
    env = {**os.environ, "PYTHONPATH": str(root),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--snakefile", str(snakefile), "--configfile",
         str(config_file.resolve()), "--directory", str(workdir), *extra],
        cwd=root, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    jobs = parse_jobs(machine_free(done.stdout, root, workdir))
    return {"counts": dict(sorted(Counter(j["rule"] for j in jobs).items())), "jobs": jobs}


def digest(planned: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per rule: how many jobs and a SHA-256 of their records (a changed flag of one job changes it)."""
    out: dict[str, dict[str, Any]] = {}
    for rule, count in planned["counts"].items():
        jobs = [j for j in planned["jobs"] if j["rule"] == rule]
        text = json.dumps(jobs, sort_keys=True).encode()
        out[rule] = {"jobs": count, "sha256": hashlib.sha256(text).hexdigest()}
    return out


RECORD = Path(__file__).with_name("workflow_dryrun.json")


def record() -> int:
    """Rewrite :data:`RECORD` from today's workflow (same configs, same arguments)."""
    root = RECORD.parent.parent
    recorded = json.loads(RECORD.read_text())
    for config, entry in recorded.items():
        paper = "--paper" in entry["args"]
        extra = [a for a in entry["args"] if a != "--paper"]
        with tempfile.TemporaryDirectory() as tmp:
            workdir = paper_workdir(root / config, Path(tmp)) if paper else Path(tmp)
            entry["rules"] = digest(dry_run(root / "workflow" / "Snakefile", root / config, workdir, *extra))
    tmp_path = RECORD.with_suffix(".json.tmp")
    tmp_path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    os.replace(tmp_path, RECORD)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--record"]:
        return record()
    paper, digested = "--paper" in argv, "--digest" in argv
    args = [a for a in argv if a not in ("--paper", "--digest")]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    snakefile, config_file = Path(args[0]), Path(args[1])
    with tempfile.TemporaryDirectory() as tmp:
        workdir = paper_workdir(config_file, Path(tmp)) if paper else Path(tmp)
        planned = dry_run(snakefile, config_file, workdir, *args[2:])
    json.dump(digest(planned) if digested else planned, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
