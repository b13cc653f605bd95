"""How fast this machine runs plain Python, as one number: so timings of different sittings compare.

The project's speed bars ("under 60 s here", "under 5 minutes") are wall-clock figures of a
pure-Python simulator, and the machines this project is measured on differ: the same commit's
64 x 100,000 uncached simulation took 47 s on one 2-core machine and 85 s on another, a day
apart, with nothing else running on either. A figure without the machine's speed beside it
cannot say whether a change or the machine moved it.

:func:`reference_s` times a fixed workload made of what the simulator's hot loop does (tuple
events on a heap, dict and set updates, small-int arithmetic, method calls on a small object),
in this process, with the cyclic collector paused as the engine pauses it: the median of
``repeats`` runs, in CPU seconds. Divide a benchmark's seconds by it to compare sittings
(docs/benchmarks.md, "Machine speed"). It is not a general CPU score.

    python benchmarks/machine_speed.py            # prints {"reference_s": ..., "runs": [...], ...}
"""

from __future__ import annotations

import gc
import heapq
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from naspipe.report.document import cpu_model  # noqa: E402

ROUNDS = 200_000  # about 0.2-0.35 CPU s per run on the 2-core machines of 2026-11


class _Stage:
    __slots__ = ("ready", "waiting", "done")

    def __init__(self) -> None:
        self.ready: list[int] = []
        self.waiting: set[int] = set()
        self.done: dict[int, int] = {}

    def arrived(self, subnet: int) -> None:
        if subnet % 3:
            heapq.heappush(self.ready, subnet)
        else:
            self.waiting.add(subnet)

    def next(self) -> int | None:
        if self.ready:
            return heapq.heappop(self.ready)
        if self.waiting:
            return self.waiting.pop()
        return None


def _workload(rounds: int) -> int:
    """A fixed event loop over 8 stages: the result is checked, so nothing is optimised away."""
    stages = [_Stage() for _ in range(8)]
    events: list[tuple[float, int, int, int]] = []
    order = checksum = 0
    for y in range(rounds):
        order += 1
        heapq.heappush(events, (y * 0.5 + (y % 7) * 0.25, order, y & 7, y))
        if len(events) > 16:
            _, _, k, subnet = heapq.heappop(events)
            stage = stages[k]
            stage.arrived(subnet)
            task = stage.next()
            if task is not None:
                stage.done[task & 1023] = stage.done.get(task & 1023, 0) + 1
                checksum = (checksum + task * 31 + k) & 0xFFFFFFF
    return checksum


def reference_s(repeats: int = 5, rounds: int = ROUNDS) -> dict[str, Any]:
    """The median CPU seconds of ``repeats`` runs of the fixed workload, with what machine ran it."""
    runs = []
    checksums = set()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.process_time()
            checksums.add(_workload(rounds))
            runs.append(time.process_time() - start)
    finally:
        if enabled:
            gc.enable()
    if len(checksums) != 1:
        raise RuntimeError(f"the reference workload gave different results: {sorted(checksums)}")
    return {"reference_s": statistics.median(runs), "runs": runs, "rounds": rounds,
            "python": platform.python_version(), "cpu": cpu_model(), "load_1min": os.getloadavg()[0]}


if __name__ == "__main__":
    print(json.dumps(reference_s()))
