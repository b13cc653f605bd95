"""Claim free GPUs with lock files: ``naspipe with-gpus N -- CMD ...``.

Why: Snakemake's ``--resources gpu=8`` caps how many GPUs the running jobs declare in total,
but assigns no device ids, so two concurrent jobs would both start on device 0. Each training
job therefore claims its D devices itself before it starts: one lock file per device, taken
with ``fcntl.flock``. The kernel drops a flock when the last process holding the open file
dies, so a crashed or killed job frees its devices without any cleanup step. A claimer takes
all N devices or none (it never waits while holding some), so two jobs cannot deadlock on each
other's halves.

The command is started with ``exec`` and inherits the lock descriptors, so the devices stay
claimed exactly as long as the command runs. With no CUDA device on the machine nothing is
claimed and the command runs unchanged (on CPU); with N = 0 it runs with no device visible.
The command itself (flags, ``exec``) is :mod:`naspipe.commands.with_gpus`; this module is the
locking.
"""

from __future__ import annotations

import fcntl
import getpass
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from naspipe.errors import UsageError

LOCK_DIR_ENV = "NASPIPE_GPU_LOCK_DIR"


def visible_devices() -> list[str]:
    """The device ids this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else every CUDA device."""
    declared = os.environ.get("CUDA_VISIBLE_DEVICES")
    if declared is not None:
        return [d.strip() for d in declared.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists():
        return []  # no driver: skip importing torch just to learn there is no GPU
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def default_lock_dir() -> Path:
    """Per user; per SLURM job under SLURM, whose device ids are relative to the job's allocation."""
    if os.environ.get(LOCK_DIR_ENV):
        return Path(os.environ[LOCK_DIR_ENV])
    base = _private_base()
    job = os.environ.get("SLURM_JOB_ID")
    return base / f"slurm-{job}" if job else base


def _private_base() -> Path:
    """``$TMPDIR/naspipe-gpu-locks-USER``, created 0700 and refused unless this user owns it.

    The name is predictable in a shared temp directory: another user could create it first (or
    a symlink by that name) and hold or replace the lock files; so the directory must be a real
    directory owned by this user, or the claim stops with one line naming it and its owner.
    """
    base = Path(tempfile.gettempdir()) / f"naspipe-gpu-locks-{getpass.getuser()}"
    try:
        base.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UsageError(f"with-gpus: cannot create the lock directory {base} ({exc.strerror or exc})") from None
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        what = "directory" if stat.S_ISDIR(info.st_mode) else "non-directory (e.g. a symlink)"
        raise UsageError(f"with-gpus: the lock directory {base} is a {what} owned by uid {info.st_uid}, not by you "
                         f"(uid {os.getuid()}); remove it or set {LOCK_DIR_ENV}")
    return base


def try_claim(count: int, devices: Sequence[str], lock_dir: Path) -> dict[str, int] | None:
    """Lock ``count`` of ``devices`` (device -> open descriptor), or lock none and return None."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    held: dict[str, int] = {}
    for device in devices:
        if len(held) == count:
            break
        fd = os.open(lock_dir / f"gpu{device}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        held[device] = fd
    if len(held) == count:
        return held
    release(held)
    return None


def claim(
    count: int, devices: Sequence[str], lock_dir: Path, timeout_s: float | None = None, poll_s: float = 0.2
) -> dict[str, int]:
    """Wait until ``count`` devices are free and lock them; UsageError if that can never or did not happen."""
    if count > len(devices):
        raise UsageError(f"with-gpus: {count} GPUs requested but only {len(devices)} visible ({','.join(devices)})")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        held = try_claim(count, devices, lock_dir)
        if held is not None:
            return held
        if deadline is not None and time.monotonic() >= deadline:
            raise UsageError(f"with-gpus: no {count} free GPUs among {','.join(devices)} after {timeout_s} s")
        time.sleep(poll_s)


def release(held: dict[str, int]) -> None:
    """Unlock (by closing) every claimed device."""
    for fd in held.values():
        os.close(fd)
    held.clear()
