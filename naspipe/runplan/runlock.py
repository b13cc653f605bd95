"""One run per output directory: an exclusive lock on ``DIR.partial`` for the life of a run.

Why: without it a second ``naspipe train --overwrite --out DIR`` removed ``DIR.partial``
under a live run (both failed, no complete checkpoint was left), and an orphaned workflow
job raced its own rerun. The lock is an ``fcntl.flock`` on a hidden sibling file
``.DIR.partial.lock`` (not inside ``DIR.partial``, which ``--overwrite`` removes and a
publish renames), holding the holder's pid so that a refused run can name it. The kernel
drops a flock when the last descriptor of it closes, so a killed run frees its directory
without a cleanup step; the descriptor also travels to every locally spawned stage
(:class:`HeldLock` pickles as a duplicated descriptor), so the lock outlives a SIGKILLed
launcher until its last stage has stopped writing.

A lock file may be left behind by a killed run; it is harmless (the next run reuses it).
A run that ends normally removes it while still holding it; a waiter re-checks after
locking that the file it locked is still the one at the path, so removal never lets two
runs in.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import reduction
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError


def lock_path(work: Path) -> Path:
    """The lock file of working directory ``work`` (``DIR.partial``)."""
    return work.with_name(f".{work.name}.lock")


def holder(work: Path) -> int | None:
    """The pid of a live run holding ``work``'s lock (0 if it has not written its pid yet), else None.

    Nothing is created: a missing lock file means no holder.
    """
    try:
        fd = os.open(lock_path(work), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # missing, under a file, unreadable: no run can hold it (the --out checks say what is wrong)
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid_in(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def refuse_if_held(work: Path, out: Path) -> None:
    """UsageError naming the holder's pid when a live run (not this process) works in ``work``."""
    pid = holder(work)
    if pid is not None and pid != os.getpid():
        raise UsageError(_busy(out, work, pid))


@dataclass(frozen=True)
class HeldLock:
    """The descriptor of a held lock; pickled (to a spawned stage) as a duplicate of it."""

    fd: int

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _rebuild, (reduction.DupFd(self.fd),)


def _rebuild(dup: Any) -> HeldLock:
    return HeldLock(dup.detach())


@contextmanager
def hold(work: Path, out: Path) -> Iterator[HeldLock]:
    """Hold ``work``'s lock for the block (UsageError naming the holder if another run has it)."""
    path = lock_path(work)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(path, out, work)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield HeldLock(fd)
    finally:
        path.unlink(missing_ok=True)  # still held: a waiter that opened it re-checks the path
        os.close(fd)


def _acquire(path: Path, out: Path, work: Path) -> int:
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:  # a directory (or something else unopenable) where the lock file goes
            raise UsageError(f"--out {out}: cannot create the run's lock file {path} ({exc.strerror or exc}); "
                             "remove or rename what is there") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _pid_in(fd)
            os.close(fd)
            raise UsageError(_busy(out, work, pid)) from None
        if _same_file(fd, path):
            return fd
        os.close(fd)  # the holder removed it as it ended: lock the new one


def _same_file(fd: int, path: Path) -> bool:
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _pid_in(fd: int) -> int:
    text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    return int(text) if text.isdigit() else 0


def _busy(out: Path, work: Path, pid: int) -> str:
    who = f"pid {pid}" if pid else "a process that is starting"
    return (f"--out {out}: another run ({who}) is working in {work}; wait for it to end or stop it "
            "(--overwrite never replaces a live run)")
