"""GPU claiming (``naspipe with-gpus``): concurrent claimers never share a device, a killed holder frees its devices."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.errors import UsageError
from naspipe.gpus import claim, release, try_claim

ROOT = Path(__file__).resolve().parents[1]
DEVICES = ["0", "1", "2", "3"]


def _claimer(lock_dir: Path, count: int, log: Path, hold_s: float) -> subprocess.Popen[str]:
    """A with-gpus process whose command appends 'start CVD', sleeps, then appends 'end CVD'."""
    script = (
        f"import os, time; d = os.environ['CUDA_VISIBLE_DEVICES']; f = open({str(log)!r}, 'a'); "
        f"f.write(f'{{time.monotonic()}} start {{d}}\\n'); f.flush(); time.sleep({hold_s}); "
        f"f.write(f'{{time.monotonic()}} end {{d}}\\n'); f.close()"
    )
    cmd = [
        sys.executable,
        "-m",
        "naspipe.commands.with_gpus",
        "--devices",
        ",".join(DEVICES),
        "--lock-dir",
        str(lock_dir),
        str(count),
        "--",
        sys.executable,
        "-c",
        script,
    ]
    return subprocess.Popen(
        cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True, stderr=subprocess.PIPE
    )


def test_concurrent_claimers_never_share_a_device(tmp_path: Path) -> None:
    log = tmp_path / "log"
    procs = [_claimer(tmp_path / "locks", 2, log, 0.4) for _ in range(5)]
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read() if p.stderr else ""
    events = sorted((float(t), kind, dev) for t, kind, dev in (line.split() for line in log.read_text().splitlines()))
    assert len(events) == 10
    in_use: set[str] = set()
    for _, kind, devs in events:
        claimed = set(devs.split(","))
        assert len(claimed) == 2 and claimed <= set(DEVICES)
        if kind == "start":
            assert not claimed & in_use, f"{claimed} handed out while {in_use} in use"
            in_use |= claimed
        else:
            in_use -= claimed
    assert not in_use


def test_killed_holder_releases_its_devices(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    holder = _claimer(locks, 4, tmp_path / "log", 120)
    deadline = time.monotonic() + 30
    while not (tmp_path / "log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert try_claim(1, DEVICES, locks) is None  # all four are held
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    held = claim(4, DEVICES, locks, timeout_s=10)
    assert sorted(held) == DEVICES
    release(held)


def test_all_or_nothing_and_too_many(tmp_path: Path) -> None:
    first = try_claim(3, DEVICES, tmp_path)
    assert first is not None
    assert try_claim(2, DEVICES, tmp_path) is None  # only one free: takes none
    second = try_claim(1, DEVICES, tmp_path)
    assert second is not None and not set(second) & set(first)
    release(first)
    release(second)
    with pytest.raises(UsageError, match="5 GPUs requested but only 4 visible"):
        claim(5, DEVICES, tmp_path)
    held = try_claim(4, DEVICES, tmp_path)
    assert held is not None
    with pytest.raises(UsageError, match="no 1 free GPUs"):
        claim(1, DEVICES, tmp_path, timeout_s=0.3, poll_s=0.1)
    release(held)


def test_no_cuda_runs_the_command_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "env"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    script = f"import os; open({str(out)!r}, 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])"
    done = subprocess.run(
        [sys.executable, "-m", "naspipe.commands.with_gpus", "2", "--", sys.executable, "-c", script],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "running on CPU" in done.stderr and out.read_text() == ""


def test_bad_usage_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["with-gpus", "1"]) == 2
    assert main(["with-gpus", "--devices", "0", "-1", "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "naspipe: error: with-gpus: no command given (usage: naspipe with-gpus N -- CMD ...)",
        "naspipe: error: with-gpus: N must be >= 0, got -1",
    ]
