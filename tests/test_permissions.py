"""Outputs honour the umask, the GPU lock directory is this user's, stage reports are not pickles (issue 18.10)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from naspipe import gpus
from naspipe.data.output_dir import atomic_output_dir
from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_text, current_umask, temp_dir_beside
from naspipe.runtime.recorder import StageReport


@pytest.fixture
def umask():
    """Set a umask for the test, restore the previous one after."""
    previous = os.umask(0o022)
    os.umask(previous)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    yield set_mask
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("mask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700),
                                                             (0o002, 0o664, 0o775)])
def test_outputs_get_the_umasks_permissions(tmp_path: Path, umask, mask: int, file_mode: int, dir_mode: int) -> None:
    umask(mask)
    assert current_umask() == mask
    atomic_write_text(tmp_path / "a.txt", "x\n")
    assert mode(tmp_path / "a.txt") == file_mode
    assert mode(temp_dir_beside(tmp_path / "out", ".tmp")) == dir_mode
    with atomic_output_dir(tmp_path / "data") as staging:
        atomic_write_text(staging / "meta.json", "{}\n")
    assert mode(tmp_path / "data") == dir_mode and mode(tmp_path / "data" / "meta.json") == file_mode


def test_a_run_directory_is_readable_by_the_group_under_umask_022(tmp_path: Path, umask) -> None:
    from naspipe.cli import main

    umask(0o022)
    run = tmp_path / "run"
    assert main(["train", "--steps", "2", "--set", "space.blocks=2", "--set", "progress=off", "--out", str(run)]) == 0
    files = [p for p in run.rglob("*") if p.is_file()]
    assert files and all(mode(p) == 0o644 for p in files), {str(p): oct(mode(p)) for p in files if mode(p) != 0o644}
    assert all(mode(p) == 0o755 for p in [run, *(p for p in run.rglob("*") if p.is_dir())])


def test_the_default_gpu_lock_dir_is_private_and_owned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpus.LOCK_DIR_ENV, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(gpus.tempfile, "gettempdir", lambda: str(tmp_path))
    base = gpus.default_lock_dir()
    assert base.parent == tmp_path and mode(base) == 0o700 and base.stat().st_uid == os.getuid()
    base.rmdir()
    (tmp_path / "elsewhere").mkdir()
    base.symlink_to(tmp_path / "elsewhere")  # planted by someone else: never followed
    with pytest.raises(UsageError, match="is a non-directory"):
        gpus.default_lock_dir()


def test_a_gpu_lock_dir_owned_by_someone_else_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a directory owned by another user")
    monkeypatch.delenv(gpus.LOCK_DIR_ENV, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(gpus.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(gpus.getpass, "getuser", lambda: "someone")
    planted = tmp_path / "naspipe-gpu-locks-someone"
    planted.mkdir(mode=0o777)
    os.chown(planted, 65534, 65534)
    with pytest.raises(UsageError, match="owned by uid 65534, not by you"):
        gpus.default_lock_dir()


def test_stage_reports_travel_as_json_not_pickles() -> None:
    report = StageReport(2, {7: "ab" * 32, 11: "cd" * 32}, {"forward": 0.1 + 0.2, "waiting": 1e-300}, 3.5, 9,
                         {"trace_dropped": 0.0})
    data = report.to_bytes()
    assert data.startswith(b"{") and b"\x80" not in data  # JSON text, no pickle opcode
    assert StageReport.from_bytes(data) == report
