"""Stages die with the launcher: killing ``naspipe train`` alone stops the whole run.

The launcher runs in its own session (so its process group holds the launcher, the
forkserver and every stage), with ``TMPDIR`` pointed into the test's tmp dir (so every temp
dir of the run is visible). Killed mid-run, every process of the group must be gone within
60 s, nothing final published, the temp dirs cleaned, and the last complete checkpoint must
resume to the uninterrupted run bit for bit.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.runtime import lifecycle
from naspipe.runtime.transport import LocalTransport
from tests.conftest import ROOT

SMALL = ["--set", "space.blocks=4", "--set", "space.candidates=3", "--set", "space.dim=16", "--set", "space.seq_len=8"]
EVERY = 3


def checkpoint_root(out: Path) -> Path:
    """Where a running run keeps its ``step-*`` checkpoint folders (the one place to adjust if it moves)."""
    return out.with_name(out.name + ".partial") / "checkpoints"


def complete_checkpoints(out: Path) -> list[Path]:
    return sorted(p.parent for p in checkpoint_root(out).glob("step-*/manifest.json"))


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def checkpointed_or_ended(out: Path, process: subprocess.Popen[str]) -> bool:
    return bool(complete_checkpoints(out)) or process.poll() is not None


def group_gone(pgid: int) -> bool:
    return not group_members(pgid)


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def start_long_run(out: Path, tmp: Path) -> subprocess.Popen[str]:
    """A 2-stage run far longer than the test, checkpointing often, in its own session and TMPDIR."""
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    args = ["train", "--stages", "2", "--steps", "1000000", "--checkpoint-every", str(EVERY), "--out", str(out), *SMALL]
    return subprocess.Popen([sys.executable, "-m", "naspipe", *args], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A TMPDIR with a short path: the forkserver's socket lives there and AF_UNIX paths are short."""
    path = Path(tempfile.mkdtemp(prefix="np-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_killing_the_launcher_stops_every_stage_and_keeps_the_checkpoint_resumable(tmp_path, short_tmp):
    """SIGKILL and SIGTERM, each to its own launcher; both runs go at once to keep the test short."""
    signals = (signal.SIGKILL, signal.SIGTERM)
    runs = {sig: (tmp_path / sig.name / "run", short_tmp / sig.name) for sig in signals}
    for sig in signals:
        (tmp_path / sig.name).mkdir()
    launchers = {sig: start_long_run(*runs[sig]) for sig in signals}
    try:
        for sig, launcher in launchers.items():
            wait_until(partial(checkpointed_or_ended, runs[sig][0], launcher), 120, "a checkpoint")
            assert launcher.poll() is None, launcher.communicate()[1]
            assert len(group_members(launcher.pid)) >= 4  # launcher, forkserver, two stages
        for sig, launcher in launchers.items():
            os.kill(launcher.pid, sig)
        for sig, launcher in launchers.items():
            launcher.wait(timeout=60)
            wait_until(partial(group_gone, launcher.pid), 60, f"the stages of the {sig.name}ed launcher to exit")
        stderr = {sig: launcher.communicate(timeout=10)[1] for sig, launcher in launchers.items()}
    finally:
        for launcher in launchers.values():
            for pid in group_members(launcher.pid):
                os.kill(pid, signal.SIGKILL)
    assert launchers[signal.SIGKILL].returncode == -signal.SIGKILL
    assert launchers[signal.SIGTERM].returncode == 128 + signal.SIGTERM
    term = stderr[signal.SIGTERM]
    assert term.strip().splitlines()[-1].startswith("naspipe: error: interrupted by SIGTERM"), term
    assert "Traceback" not in term
    for sig, (out, tmp) in runs.items():
        published = [p for p in out.parent.rglob("*") if p.name in ("metrics.json", "losses.csv")]
        assert not published, sig
        left = [p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_")]  # torch's shared cache
        assert not left, sig  # rendezvous and multiprocessing temp dirs cleaned
        assert_resumes_bitwise(complete_checkpoints(out)[-1], out.parent)


@pytest.mark.slow
def test_a_dead_forkserver_is_named_and_its_stages_are_stopped(tmp_path, short_tmp):
    out, tmp = tmp_path / "run", short_tmp / "tmp"
    launcher = start_long_run(out, tmp)
    try:
        wait_until(lambda: complete_checkpoints(out) or launcher.poll() is not None, 120, "a checkpoint")
        servers = [pid for pid in group_members(launcher.pid) if "forkserver" in command_line(pid)
                   and parent_of(pid) == launcher.pid]
        assert len(servers) == 1
        os.kill(servers[0], signal.SIGKILL)
        launcher.wait(timeout=60)
        wait_until(lambda: not group_members(launcher.pid), 60, "the stages to exit")
        _, stderr = launcher.communicate(timeout=10)
    finally:
        for pid in group_members(launcher.pid):
            os.kill(pid, signal.SIGKILL)
    assert launcher.returncode == 1
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"naspipe: error: the multiprocessing forkserver (pid {servers[0]})"), stderr
    assert "stage 0 failed" not in stderr and "Traceback" not in stderr
    assert not (out / "metrics.json").exists() and not (out / "losses.csv").exists()


def command_line(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def parent_of(pid: int) -> int:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[1])
    except OSError:
        return -1


def test_a_stage_under_an_external_launcher_ends_at_sigterm(tmp_path):
    """Under torchrun/srun each process is one stage; the launcher there tears down with SIGTERM."""
    out = tmp_path / "run"
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    args = ["train", "--steps", "1000000", "--checkpoint-every", str(EVERY), "--out", str(out), *SMALL]
    stage = subprocess.Popen([sys.executable, "-m", "naspipe", *args], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: complete_checkpoints(out) or stage.poll() is not None, 120, "a checkpoint")
        assert stage.poll() is None, stage.communicate()[1]
        stage.send_signal(signal.SIGTERM)
        assert stage.wait(timeout=60) != 0
    finally:
        if stage.poll() is None:
            stage.kill()
    assert not (out / "metrics.json").exists() and not (out / "losses.csv").exists()


def assert_resumes_bitwise(checkpoint: Path, tmp_path: Path) -> None:
    step = json.loads((checkpoint / "manifest.json").read_text())["step"]
    assert step >= EVERY
    steps = ["--steps", str(step + EVERY)]
    resumed, reference = tmp_path / "resumed", tmp_path / "reference"
    assert main(["train", "--stages", "1", *steps, "--resume", str(checkpoint), "--out", str(resumed), *SMALL]) == 0
    assert main(["train", "--stages", "1", "--system", "sequential", *steps, "--out", str(reference), *SMALL]) == 0
    assert main(["compare", str(reference), str(resumed)]) == 0


def test_local_transport_waits_for_its_timeout(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr("naspipe.runtime.transport.time.sleep", slept.append)
    transport = LocalTransport()
    assert transport.receive(0.25) is None
    assert transport.receive(0) is None
    assert slept == [0.25]  # waited the timeout it was given, and did not wait to poll
    with pytest.raises(RuntimeError, match="never end"):
        transport.receive(None)


def test_stop_ends_a_process_that_ignores_sigterm():
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert lifecycle.alive(child.pid)
        lifecycle.stop([child.pid], grace_s=0.2)
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert not lifecycle.alive(child.pid)
    finally:
        if child.poll() is None:
            child.kill()


def test_a_signal_in_the_launcher_becomes_an_exit_status():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(lifecycle.Interrupted) as caught, lifecycle.signals_raise():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises before this ends
    assert caught.value.exit_code == 130
    assert "SIGINT" in str(caught.value)
    assert signal.getsignal(signal.SIGINT) is before  # restored


def forkserver_in(pgid: int) -> bool:
    """Whether the multiprocessing forkserver of the run in group ``pgid`` has started."""
    for pid in group_members(pgid):
        try:
            if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def test_ctrl_c_then_sigterm_reports_sigint_without_a_traceback(tmp_path, short_tmp):
    """Ctrl-C (SIGINT to the whole group) while the forkserver still imports torch, then SIGTERM to the
    launcher: exit 130 naming SIGINT, no KeyboardInterrupt traceback from the forkserver (issue 18.8, 18.9)."""
    out = tmp_path / "run"
    launcher = start_long_run(out, short_tmp / "tmp")
    try:
        wait_until(lambda: forkserver_in(launcher.pid) or launcher.poll() is not None, 120, "the forkserver")
        os.killpg(launcher.pid, signal.SIGINT)
        time.sleep(0.3)
        os.kill(launcher.pid, signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=120)
        wait_until(partial(group_gone, launcher.pid), 60, "every process of the run to exit")
    finally:
        for pid in group_members(launcher.pid):
            os.kill(pid, signal.SIGKILL)
    assert launcher.returncode == 128 + signal.SIGINT, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("naspipe: error: interrupted by SIGINT"), stderr


# -- issue 34: kills that used to leave a traceback and a DIR.partial that blocked the rerun ----------------------
RERUN_STEPS = 6


def assert_reruns_bitwise(out: Path, tmp_path: Path) -> None:
    """The plain command again (no --overwrite), into the same --out: published, bitwise the sequential run."""
    args = ["train", "--stages", "2", "--steps", str(RERUN_STEPS), "--set", "progress=off", *SMALL]
    assert main([*args, "--out", str(out)]) == 0
    reference = tmp_path / "reference"
    assert main(["train", "--stages", "1", "--system", "sequential", *args[3:], "--out", str(reference)]) == 0
    assert main(["compare", str(reference), str(out)]) == 0


def forkservers(pgid: int) -> list[int]:
    """The multiprocessing forkserver of the run in group ``pgid`` (its command line, not a test path, names it)."""
    return [pid for pid in group_members(pgid) if "from multiprocessing.forkserver import" in command_line(pid)]


def stop_group(launcher: subprocess.Popen[str]) -> None:
    for pid in group_members(launcher.pid):
        os.kill(pid, signal.SIGKILL)


def interrupted_in_one_line(out: Path, tmp: Path, ready: Callable[[subprocess.Popen[str]], bool], what: str,
                            interrupt: Callable[[subprocess.Popen[str]], None]) -> str:
    """Start the long run, wait until ``ready`` (``what``), ``interrupt`` it: the run must stop with exit 1 and
    one line (no traceback) and leave no process behind. That line."""
    launcher = start_long_run(out, tmp)
    try:
        wait_until(lambda: ready(launcher), 120, what)
        interrupt(launcher)
        _, stderr = launcher.communicate(timeout=120)
        wait_until(partial(group_gone, launcher.pid), 60, "every process of the run to exit")
    finally:
        stop_group(launcher)
    lines = stderr.strip().splitlines()
    assert launcher.returncode == 1, stderr
    assert "Traceback" not in stderr and len(lines) == 1, stderr
    return lines[0]


def forkserver_started(launcher: subprocess.Popen[str]) -> bool:
    return bool(forkservers(launcher.pid)) or launcher.poll() is not None


def kill_the_forkserver(launcher: subprocess.Popen[str]) -> None:
    servers = forkservers(launcher.pid)
    assert servers, launcher.communicate(timeout=120)[1]
    for pid in servers:
        os.kill(pid, signal.SIGKILL)


def test_the_forkserver_killed_while_the_stages_start_is_one_line_and_the_rerun_is_bitwise(tmp_path, short_tmp):
    """The forkserver is killed as soon as it exists (it is still importing torch, before it has forked a
    stage): one line, exit 1, every process gone, no DIR.partial left; the plain rerun is bitwise.
    Before: a 39-line EOFError traceback and a DIR.partial without a checkpoint that refused the rerun."""
    out = tmp_path / "run"
    line = interrupted_in_one_line(out, short_tmp / "tmp", forkserver_started, "the forkserver", kill_the_forkserver)
    assert line.startswith("naspipe: error: the multiprocessing forkserver"), line
    assert not out.exists() and not out.with_name("run.partial").exists()
    assert_reruns_bitwise(out, tmp_path)


@pytest.mark.parametrize("how", ["removed", pytest.param("renamed", marks=pytest.mark.slow)])  # ~50 s each
def test_a_dir_partial_removed_while_training_stops_in_one_line_and_is_never_recreated(tmp_path, short_tmp, how):
    """DIR.partial is renamed away (and, for "removed", deleted) after the first checkpoint: the run stops with
    one line, exit 1, and no stage re-creates DIR.partial; the plain rerun (removed) or a resume from the new
    name (renamed) is bitwise. Before: a 61-line stage traceback, and the dying stages re-created DIR.partial
    with an incomplete checkpoint, which refused the rerun."""
    out = tmp_path / "run"
    work, moved = out.with_name("run.partial"), tmp_path / "moved"

    def move_it(launcher: subprocess.Popen[str]) -> None:
        assert launcher.poll() is None, launcher.communicate()[1]
        os.rename(work, moved)

    line = interrupted_in_one_line(out, short_tmp / "tmp", partial(checkpointed_or_ended, out), "a checkpoint", move_it)
    assert f"{work} was removed or renamed while the run trained" in line, line
    assert not work.exists() and not out.exists()
    if how == "removed":
        shutil.rmtree(moved)
        assert_reruns_bitwise(out, tmp_path)
    else:
        checkpoint = sorted(moved.glob("checkpoints/step-*/manifest.json"))[-1].parent
        assert_resumes_bitwise(checkpoint, tmp_path)
