"""Shared fixtures: small structures and plans, and paths to the shared data samples."""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from naspipe.partition import balanced_partition
from naspipe.scheduling import PipelinePlan
from naspipe.scheduling.task import Kind, Task
from naspipe.space.structure import SpaceStructure
from naspipe.subnet import Subnet, SubnetStream

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def make_structure(blocks: int, candidates: int, shared_policy: str = "frozen") -> SpaceStructure:
    blocks_ops = tuple(("op",) * candidates for _ in range(blocks))
    return SpaceStructure("test", ("emb",), blocks_ops, ("head",), shared_policy)  # type: ignore[arg-type]


class FixedStream:
    """A stream given explicitly (adversarial cases: all identical, all disjoint)."""

    def __init__(self, subnets: list[tuple[int, ...]]) -> None:
        self._subnets = [Subnet(s) for s in subnets]

    def __getitem__(self, index: int) -> Subnet:
        return self._subnets[index]


def make_plan(
    blocks: int, candidates: int, stages: int, seed: int = 0, stream=None, shared_policy: str = "frozen"
) -> PipelinePlan:
    structure = make_structure(blocks, candidates, shared_policy)
    partition = balanced_partition([1.0] * structure.num_positions, stages)
    return PipelinePlan(structure, partition, stream or SubnetStream(structure.choices_per_block, seed))


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``python -m naspipe ARGS`` in a fresh process (as a user would)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "naspipe", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=ROOT)


def forbid_module_construction(monkeypatch: pytest.MonkeyPatch, space: Any) -> None:
    """Any torch module built from here on (by the space or by torch) fails the test."""
    import torch

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a layer was built")

    monkeypatch.setattr(torch.nn.Module, "__init__", refuse)
    monkeypatch.setattr(space, "build_layer", refuse)
    monkeypatch.setattr(space, "make_layer", refuse)
    with pytest.raises(AssertionError, match="a layer was built"):  # the guard is live
        torch.nn.Linear(2, 2)


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/NAME.py`` as a module (benchmarks are scripts, not a package); loaded once per process."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def irregular_durations(seed: int) -> Callable[[Task], float]:
    """Irregular, deterministic task times for the scheduling driver (forwards overtake, stages idle at
    random points), memoised per task so a task asked twice gets one time."""
    rng = random.Random(seed)
    table: dict[Task, float] = {}

    def duration(task: Task) -> float:
        if task not in table:
            base = {Kind.FORWARD: 1.0, Kind.BACKWARD: 2.0, Kind.UPDATE: 0.0}[task.kind]
            table[task] = base + rng.choice((0.0, 0.5, 1.0, 3.0))
        return table[task]

    return duration
