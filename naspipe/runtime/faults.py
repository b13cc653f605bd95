"""Fault injection for tests, kept out of the production path.

``NASPIPE_FAIL_AT=STAGE:SUBNET`` makes that stage raise in its forward of that subnet, so
tests can check that a crashing stage takes the run down and keeps its checkpoints. The
launcher calls :func:`install_from_env` in each stage process; without the variable it
does nothing, and the worker carries no trace of the hook.
"""

from __future__ import annotations

import os
from typing import Any

FAIL_ENV = "NASPIPE_FAIL_AT"


def install_from_env() -> None:
    """Wrap :meth:`StageWorker._forward` to fail where ``NASPIPE_FAIL_AT`` says (once per process)."""
    spec = os.environ.get(FAIL_ENV, "")
    if not spec:
        return
    from naspipe.runtime.worker import StageWorker

    if getattr(StageWorker._forward, "_naspipe_fault", False):
        return
    where, _, subnet = spec.partition(":")
    stage, target = int(where), int(subnet)
    forward = StageWorker._forward

    def failing_forward(self: StageWorker, y: int, layers: tuple[int, ...]) -> Any:
        if self.stage == stage and y == target:
            raise RuntimeError(f"injected failure ({FAIL_ENV}) in stage {stage}, forward of subnet {y}")
        return forward(self, y, layers)

    failing_forward._naspipe_fault = True  # type: ignore[attr-defined]
    StageWorker._forward = failing_forward  # type: ignore[method-assign]
