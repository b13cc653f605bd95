"""Work beside the engine: a forked child computes what does not depend on the event loop.

A large simulated run spends most of its time in the engine (one Python thread), while the
memory model and the lower bound walk the same plan independently. On a machine with a second
core a child process started with ``fork`` (it inherits the plan and costs without pickling
them) computes those while the parent runs the engine, and hands back only the small result.
The values are the same functions of the same inputs, so nothing a run reports changes; only
the wall time does. Where ``fork`` is missing the work runs in process, first.
"""

from __future__ import annotations

import os
import pickle
import signal
import traceback
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Beside(Generic[T]):
    """``fn()`` started in a forked child now; :meth:`result` waits for it (or re-raises its failure)."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._pid = 0
        if not hasattr(os, "fork"):
            self._value: T = fn()
            return
        self._read, write = os.pipe()
        self._pid = os.fork()
        if self._pid == 0:  # the child: compute, send, leave without running the parent's exit handlers
            os.close(self._read)
            _send(write, fn)
        os.close(write)

    def result(self) -> T:
        if not self._pid:
            return self._value
        with os.fdopen(self._read, "rb") as pipe:
            data = pipe.read()
        os.waitpid(self._pid, 0)
        self._pid = 0
        if not data:
            raise RuntimeError("the simulator's side computation died without a result")
        ok, value = pickle.loads(data)
        if not ok:
            raise RuntimeError(f"the simulator's side computation failed:\n{value}")
        self._value = value
        return self._value

    def cancel(self) -> None:
        """Stop the child (the engine failed): no orphan keeps computing, no zombie stays."""
        if self._pid:
            os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            os.close(self._read)
            self._pid = 0


def _send(write: int, fn: Callable[[], object]) -> None:
    code = 0
    try:
        payload = pickle.dumps((True, fn()))
    except BaseException:  # the traceback as text: an exception object may not pickle
        payload, code = pickle.dumps((False, traceback.format_exc())), 1
    try:
        with os.fdopen(write, "wb") as pipe:
            pipe.write(payload)
    finally:
        os._exit(code)
