"""One run per ``--out``: a live run's directory is never removed or resumed under it, and a workflow
job dies with its snakemake (issue 18, item 2).

The race test starts a real 2-stage run, then tries ``--overwrite`` and an in-place resume on
the same ``--out`` while it trains: both must be refused with one line naming the live run's
pid, and the first run must still publish a complete, verifiable run. The workflow test
SIGKILLs snakemake alone (not its process group): every training process it started must end
(checked by pid), and the rerun must complete with every checkpoint written by itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.runplan import runlock
from naspipe.runtime import checkpoint as ckpt
from naspipe.runtime import lifecycle
from tests.conftest import ROOT
from tests.test_lifecycle import SMALL, complete_checkpoints, wait_until

STEPS, EVERY = "2000", "50"  # a run of tens of seconds, checkpointing often


def test_the_lock_names_its_holder_and_is_removed_when_released(tmp_path: Path) -> None:
    work = tmp_path / "run.partial"
    assert runlock.holder(work) is None and not list(tmp_path.iterdir())  # looking creates nothing
    with runlock.hold(work, tmp_path / "run"):
        assert runlock.holder(work) == os.getpid()
        probe = [sys.executable, "-c", "import sys; from pathlib import Path; from naspipe.runplan import runlock; "
                 "runlock.refuse_if_held(Path(sys.argv[1]), Path('run'))", str(work)]
        refused = subprocess.run(probe, cwd=ROOT, capture_output=True, text=True, check=False)
        assert refused.returncode != 0 and f"another run (pid {os.getpid()})" in refused.stderr
    assert runlock.holder(work) is None and not runlock.lock_path(work).exists()
    runlock.lock_path(work).write_text("12345\n")  # left by a killed run: nobody holds it
    assert runlock.holder(work) is None
    with runlock.hold(work, tmp_path / "run"):
        assert runlock.holder(work) == os.getpid()


def test_two_runs_into_one_out_never_destroy_each_others_data(tmp_path: Path, capsys) -> None:
    import naspipe.runtime.launch  # noqa: F401  (imported now, so the racing attempts below take well under a second)

    out = tmp_path / "run"
    first_args = ["train", "--stages", "2", "--steps", STEPS, "--checkpoint-every", EVERY, "--set",
                  "keep_checkpoints=100", "--out", str(out), *SMALL]
    first = subprocess.Popen([sys.executable, "-m", "naspipe", *first_args], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_until(lambda: bool(complete_checkpoints(out)) or first.poll() is not None, 300, "a first checkpoint")
        assert first.poll() is None, "the first run ended before the race could be tried"
        others = (["--overwrite"], ["--resume", str(out.with_name("run.partial"))], [])
        for extra in others:  # in this process: quick enough to race a run of a few seconds
            code = main(["train", "--stages", "2", "--steps", STEPS, *extra, "--out", str(out), *SMALL])
            lines = capsys.readouterr().err.strip().splitlines()
            assert code == 2 and len(lines) == 1, lines
            assert f"another run (pid {first.pid})" in lines[0] and str(out) in lines[0]
        stdout, stderr = first.communicate(timeout=600)
    finally:
        lifecycle.stop([first.pid])
    assert first.returncode == 0, stderr[-2000:]
    assert json.loads(stdout)["subnets"] == int(STEPS)
    steps = [int(p.name.split("-")[1]) for p in sorted((out / "checkpoints").glob("step-*"))]
    assert steps == list(range(int(EVERY), int(STEPS) + 1, int(EVERY)))  # every checkpoint is there, none removed
    final = ckpt.find_checkpoint(out)
    manifest = ckpt.read_manifest(final)
    ckpt.verify(final, manifest, [int(n[6:-3]) for n in manifest["files"] if n.startswith("layer-")])
    assert not out.with_name("run.partial").exists() and not runlock.lock_path(out.with_name("run.partial")).exists()


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` in the parent tree."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if fields[0] not in ("Z", "X"):
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def trainers(pids: set[int]) -> set[int]:
    """The live processes of ``pids`` that run naspipe (the launcher, its forkserver, its stages)."""
    live = set()
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if lifecycle.alive(pid) and (b"naspipe" in cmdline or b"multiprocessing" in cmdline):
            live.add(pid)
    return live


@pytest.mark.slow  # a snakemake run killed mid-training and rerun: about 2 min on 2 busy cores
def test_sigkill_to_snakemake_ends_its_training_job_and_the_rerun_is_its_own(tmp_path: Path) -> None:
    pytest.importorskip("snakemake")
    from tests.test_workflow import BIN, snakemake, write_config

    every, steps = 8, 400
    config = write_config(tmp_path / "c.yaml", {
        "device": "cpu", "seeds": [0], "steps": steps, "stages": [2], "systems": ["csp"],
        "partition_costs": "params", "datasets": {}, "spaces": {"toy": {}}, "search": {"checkpoint_every": every},
    })
    run = tmp_path / "results" / "runs" / "toy" / "csp" / "D2-seed0"
    args = ["--cores", "2", "--configfile", str(config), "--directory", str(tmp_path), str(run.relative_to(tmp_path))]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    first = subprocess.Popen([sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), *args],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        wait_until(lambda: bool(complete_checkpoints(run)) or first.poll() is not None, 300, "a first checkpoint")
        assert first.poll() is None, "the run finished or failed before snakemake could be killed"
        jobs = trainers(descendants(first.pid))
        assert jobs, "no training process found under snakemake"
        os.kill(first.pid, signal.SIGKILL)  # snakemake alone, as an OOM killer or a lost login would
        first.wait()
        killed_at = time.time()
        wait_until(lambda: not trainers(jobs), 60, f"the training processes {sorted(jobs)} to end")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
    assert not run.exists()
    assert snakemake("--unlock", *args[2:]).returncode == 0
    again = snakemake("--rerun-incomplete", *args)
    assert again.returncode == 0, again.stderr[-3000:]
    checkpoints = sorted((run / "checkpoints").glob("step-*"))
    assert [int(p.name.split("-")[1]) for p in checkpoints] == list(range(every, steps + 1, every))
    for path in checkpoints:
        manifest = ckpt.read_manifest(path)
        assert manifest["written_at"] > killed_at  # written by the rerun, not by an orphan of the first run
        ckpt.verify(path, manifest, [])
    assert not list((tmp_path / "results").rglob("*.partial"))
