"""Stage processes live and die with the launcher that started them.

Locally spawned stages are children of the multiprocessing *forkserver*, not of the
``naspipe train`` process, so neither the parent-death signal nor the launcher's exit reaches
them: killed on its own, the launcher would leave its stages training (and publishing) to
the end. Three mechanisms close that gap:

- :class:`Lifeline`: a pipe whose write end only the launcher holds. Each stage runs a
  watchdog thread that blocks on the read end; the kernel closes the write end however the
  launcher ends (even by SIGKILL), the read returns EOF, and the stage cleans the run's temp
  dirs and exits at once (``os._exit``: no outputs, no checkpoint is half-taken by design,
  since shards and manifests are written atomically).
- :func:`signals_raise`: SIGTERM and SIGINT raise :class:`Interrupted` in the launcher, which
  then stops its stages (:func:`stop`) and exits ``128 + signal`` without publishing.
- :func:`stop`: SIGTERM every live stage by pid, SIGKILL what is left after a grace period.
  By pid, because when the forkserver itself has died multiprocessing reports every stage as
  exited (code 255) while they are still running.

The forkserver is also what reaps the stages, so their CPU time (``RUSAGE_CHILDREN``) lands in
the forkserver's account, and reaches the launcher (and ``/usr/bin/time``, which reads the
launcher's) only when the launcher waits for the forkserver: :func:`stop_forkserver`, at the end
of every local multi-stage run, success or not.

Under torchrun or srun each process is one stage and the launcher there owns teardown; the
stage keeps the default SIGTERM action (immediate, non-zero exit).

A workflow job must also end with the snakemake that started it: killed with SIGKILL,
snakemake cannot stop its jobs, and an orphaned training job used to race the rerun of the
same output. Snakemake's job shell is not the launcher's parent's parent in any fixed way
(``with-gpus``, ``srun``, a shell in between), so the workflow names the process to die with:
``NASPIPE_DIE_WITH=PID`` (the workflow's shell prefix exports the job shell's ``$PPID``, the
snakemake process). :func:`die_with_env_process` then watches that pid (a pidfd: no pid-reuse
race) and raises SIGTERM in the launcher when it ends, which stops the stages as above, and
sets ``PR_SET_PDEATHSIG`` so the launcher also ends with its own parent. Without the variable
nothing changes: a ``nohup naspipe train ... &`` outlives its shell, as a user expects.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing import forkserver as mp_forkserver
from multiprocessing import util as mp_util
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

DIE_WITH_ENV = "NASPIPE_DIE_WITH"
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
STOPPING = b"stopping"  # the launcher's only message on a lifeline: it stops the run and reports why
ORPHANED_EXIT = 3  # a stage's exit status when its launcher went away
STOP_GRACE_S = 10.0


class Interrupted(BaseException):
    """The launcher received SIGTERM or SIGINT; its stages were stopped and nothing was published.

    A BaseException (like KeyboardInterrupt), so that no ``except Exception`` on the way up turns
    the interruption into some other error.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block, the first SIGTERM/SIGINT raises :class:`Interrupted`; later ones are ignored
    so that they cannot break the teardown the first one started."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if not fired:
            fired.append(signum)
            raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def ignore_further_signals() -> None:
    """Ignore SIGINT and SIGTERM from now on: the process is exiting with the status of the first one.

    Without it a SIGTERM after a Ctrl-C killed the exiting launcher with status 143 under the
    message of the SIGINT.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


@dataclass(frozen=True)
class Lifeline:
    """Handed to every spawned stage (pickled; the pipe's read end travels as a duplicated fd)."""

    reader: Connection
    launcher_pid: int
    cleanup: tuple[str, ...]  # the run's temp dirs, removed by the stages if the launcher cannot

    def watch(self, stage: int) -> None:
        """Start the watchdog thread of ``stage``; call first thing in the stage process."""
        threading.Thread(target=self._wait, args=(stage,), name="naspipe-launcher-watchdog", daemon=True).start()

    def _wait(self, stage: int) -> None:
        try:
            told = self.reader.recv_bytes() == STOPPING  # the launcher writes only when it stops the run itself
        except (EOFError, OSError):
            told = False
        if not told:  # the launcher vanished (killed): say so and clean up for it; when it stops the run it
            # says why and removes its temp dirs itself (removing them here too raced its exit handlers, whose
            # rmtree of multiprocessing's temp dir then printed a traceback)
            sys.stderr.write(f"naspipe: stage {stage}: the launcher (pid {self.launcher_pid}) is gone; stopping\n")
            sys.stderr.flush()
            for path in self.cleanup:
                shutil.rmtree(path, ignore_errors=True)
        os._exit(ORPHANED_EXIT)


def cut(writer: Connection, stages: int) -> None:
    """Tell ``stages`` watchdogs that the launcher is stopping the run (one message each), then close."""
    try:
        for _ in range(stages):
            writer.send_bytes(STOPPING)
    except OSError:
        pass
    writer.close()


def lifeline(cleanup: Iterable[str]) -> tuple[Lifeline, Connection]:
    """A lifeline for the stages and its write end, which the launcher keeps open until it ends."""
    reader, writer = Pipe(duplex=False)
    return Lifeline(reader, os.getpid(), tuple(cleanup)), writer


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not count)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no procfs: fall back to a signal probe
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def stop(pids: Iterable[int], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every live process of ``pids``, then SIGKILL those still alive after ``grace_s``."""
    targets = list(pids)
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        live = [p for p in targets if alive(p)]
        for pid in live:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while any(alive(p) for p in live) and time.monotonic() < deadline:
            time.sleep(0.02)


def stop_forkserver(grace_s: float = STOP_GRACE_S) -> None:
    """Stop multiprocessing's forkserver and wait for it, so that the CPU time of the stages it reaped
    reaches this process's ``RUSAGE_CHILDREN`` (and ``time(1)``). Call once the stages have ended.

    Like the stdlib's private ``ForkServer._stop``, but bounded: closing our end of the "alive" pipe
    makes the server exit once no stage holds it; one that does not within ``grace_s`` is killed
    (its reaped stages' CPU is then lost to the account, never the run). The next run starts a new one.
    """
    server: Any = mp_forkserver._forkserver  # the stdlib's one instance; its fields are not in the type stubs
    with server._lock:
        pid, fd, address = server._forkserver_pid, server._forkserver_alive_fd, server._forkserver_address
        if pid is None:
            return
        server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None
        if fd is not None:
            os.close(fd)
        if not _reaped(pid, grace_s):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _reaped(pid, None)
        if address and not mp_util.is_abstract_socket_namespace(address):
            with contextlib.suppress(OSError):
                os.unlink(address)


def _reaped(pid: int, timeout_s: float | None) -> bool:
    """Wait for our child ``pid`` (at most ``timeout_s``; None: for good); whether it was reaped."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        try:
            done, _ = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
        except ChildProcessError:  # not ours, or reaped already
            return True
        if done:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def die_with_env_process() -> None:
    """End this process (SIGTERM to itself) when the process named by ``NASPIPE_DIE_WITH`` ends.

    A process that is not running when the run starts is a one-line error (exit 2), not a silent SIGTERM
    (exit 143, nothing on stderr): whether it ended a moment ago or never was (a mistyped pid), the user
    must be told why nothing ran. The run starts nothing before this check.
    """
    from naspipe.errors import UsageError

    value = os.environ.get(DIE_WITH_ENV, "").strip()
    if not value:
        return
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"environment variable {DIE_WITH_ENV}: expected a process id, got {value!r}")
    pid = int(value)
    if not alive(pid):
        raise UsageError(f"environment variable {DIE_WITH_ENV}: process {pid} is not running, and this run is "
                         "to end when it ends; nothing was started")
    _die_with_parent()
    threading.Thread(target=_watch, args=(pid,), name="naspipe-die-with", daemon=True).start()


def _die_with_parent() -> None:
    """SIGTERM to this process when its parent ends (Linux ``prctl``; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent ended before the call took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _watch(pid: int) -> None:
    """Block until ``pid`` ends (pidfd where the kernel has it, else a 0.5 s poll), then SIGTERM this process."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        while alive(pid):
            time.sleep(0.5)
    else:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll()
        os.close(fd)
    os.kill(os.getpid(), signal.SIGTERM)
