"""Fault injection for tests, kept out of the production path.

``NASPIPE_FAIL_AT=STAGE:SUBNET`` makes that stage raise in its forward of that subnet, so
tests can check that a crashing stage takes the run down and keeps its checkpoints. The
launcher calls :func:`install_from_env` in each stage process; without the variable it
does nothing and the worker runs unwrapped. Once installed (in a test process) the wrapper
reads the variable at each forward, so clearing it turns the fault off again.
"""

from __future__ import annotations

import os
from typing import Any

from naspipe.scheduling.task import AnyTask

FAIL_ENV = "NASPIPE_FAIL_AT"


def install_from_env() -> None:
    """Wrap the stage's forward task (:class:`~naspipe.runtime.tasks.StageTasks`) to fail where
    ``NASPIPE_FAIL_AT`` says (once per process)."""
    if not os.environ.get(FAIL_ENV):
        return
    from naspipe.runtime.tasks import StageTasks

    forward = StageTasks._forward
    if getattr(forward, "_naspipe_fault", False):
        return

    def failing_forward(self: StageTasks, task: AnyTask, layers: tuple[int, ...], start: float) -> Any:
        if _target(os.environ.get(FAIL_ENV, "")) == (self.stage, task.subnet):
            raise RuntimeError(f"injected failure ({FAIL_ENV}) in stage {self.stage}, forward of subnet {task.subnet}")
        return forward(self, task, layers, start)

    failing_forward._naspipe_fault = True  # type: ignore[attr-defined]
    StageTasks._forward = failing_forward  # type: ignore[method-assign]


def _target(spec: str) -> tuple[int, int] | None:
    if not spec:
        return None
    stage, _, subnet = spec.partition(":")
    return int(stage), int(subnet)
