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
"""

from __future__ import annotations

import argparse
import fcntl
import getpass
import os
import shutil
import stat
import sys
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


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "with-gpus",
        usage="naspipe with-gpus [options] N -- CMD ...",
        help="claim N free GPUs (lock files), set CUDA_VISIBLE_DEVICES, run a command",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("count", type=int, metavar="N", help="GPUs to claim (0: run with no GPU visible)")
    p.add_argument("--devices", help="comma-separated device ids to choose from (default: CUDA_VISIBLE_DEVICES or all)")
    p.add_argument(
        "--lock-dir", type=Path, help=f"lock file directory (default: ${LOCK_DIR_ENV} or a per-user tmp dir, "
        "which must be owned by you; a directory you name may be shared on purpose and is not checked)"
    )
    p.add_argument("--timeout", type=float, help="seconds to wait for free devices (default: forever)")
    p.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to run (options go before N)"
    )


def run(args: argparse.Namespace) -> int:
    """Claim, export ``CUDA_VISIBLE_DEVICES``, and ``exec`` the command (which inherits the locks)."""
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UsageError("with-gpus: no command given (usage: naspipe with-gpus N -- CMD ...)")
    if args.count < 0:
        raise UsageError(f"with-gpus: N must be >= 0, got {args.count}")
    devices = args.devices.split(",") if args.devices else visible_devices()
    env = dict(os.environ)
    if args.count == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif not devices:
        print(f"naspipe with-gpus: no CUDA device here; running on CPU without claiming {args.count}", file=sys.stderr)
    else:
        held = claim(args.count, devices, args.lock_dir or default_lock_dir(), args.timeout)
        for fd in held.values():
            os.set_inheritable(fd, True)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(held)
        print(f"naspipe with-gpus: claimed {env['CUDA_VISIBLE_DEVICES']}", file=sys.stderr, flush=True)
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as exc:
        raise UsageError(f"with-gpus: cannot run {cmd[0]!r}: {exc.strerror}") from None
    return 127  # not reached: exec replaces this process


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (``python -m naspipe.gpus``), cheaper to start than the full CLI."""
    from naspipe.cli import OneLineParser

    parser = OneLineParser(prog="naspipe")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["with-gpus", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run(args)
    except UsageError as exc:
        print(f"naspipe: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
