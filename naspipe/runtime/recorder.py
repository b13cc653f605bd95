"""What a stage records while it runs: trace events, busy time by kind, layer accesses, losses."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

CATEGORIES = ("forward", "recompute", "backward", "optimizer", "waiting")


@dataclass
class StageReport:
    """A stage's share of the run's outputs, sent to rank 0 at the end."""

    stage: int
    losses: dict[int, float] = field(default_factory=dict)
    layer_hashes: dict[int, str] = field(default_factory=dict)
    access: dict[int, list[str]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    span_s: float = 0.0
    tasks: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def busy_s(self) -> float:
        """Forward + recompute + backward + optimizer: everything but waiting."""
        return sum(v for k, v in self.seconds.items() if k != "waiting")


class Recorder:
    def __init__(self, stage: int, access: dict[int, list[str]] | None = None) -> None:
        self.stage = stage
        self.t0 = time.perf_counter()
        self.seconds: dict[str, float] = defaultdict(float)
        self.events: list[dict[str, Any]] = []
        self.access: dict[int, list[str]] = defaultdict(list, access or {})
        self.tasks = 0

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def span(self, category: str, name: str, start: float, end: float, subnet: int | None = None) -> None:
        self.seconds[category] += end - start
        event = {"name": name, "cat": category, "ph": "X", "pid": 0, "tid": self.stage,
                 "ts": round(start * 1e6, 1), "dur": round((end - start) * 1e6, 1)}
        if subnet is not None:
            event["args"] = {"subnet": subnet}
        self.events.append(event)

    def touch(self, layers: tuple[int, ...], subnet: int, kind: str) -> None:
        for layer in layers:
            self.access[layer].append(f"{subnet}{kind}")

    def report(self, losses: dict[int, float], hashes: dict[int, str], extra: dict[str, float]) -> StageReport:
        return StageReport(
            stage=self.stage, losses=losses, layer_hashes=hashes, access=dict(self.access), events=self.events,
            seconds={c: self.seconds.get(c, 0.0) for c in CATEGORIES}, span_s=self.now(), tasks=self.tasks, extra=extra,
        )
