"""The run plan: one job per run, sent whole to the stages (issue 19's "one number, three names")."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import naspipe.space
import naspipe.space.registry
from naspipe.config import load_config
from naspipe.errors import UsageError
from naspipe.runplan import job as job_module
from naspipe.runplan.job import build_job
from naspipe.runtime import launch

SMALL = ["space.blocks=6", "space.candidates=3", "space.dim=16", "space.seq_len=8"]


def _config(stages: int, *sets: str) -> Any:
    return load_config(None, [*SMALL, *sets], {"system": "csp", "stages": stages, "steps": 12})


@pytest.mark.parametrize("mode", ["static", "per-subnet"])
def test_a_job_pickles_whole_and_rejoins_the_same_plan(mode: str) -> None:
    """What the spawned stages receive: the same partition, stream and per-subnet stage layers."""
    job = build_job(_config(3, f"partition_mode={mode}"))
    sent = pickle.loads(pickle.dumps(job))
    assert sent.partition == job.partition and sent.plan.mirrored == (mode == "per-subnet")
    assert sent.config == job.config and sent.stream[11] == job.stream[11]
    assert all(sent.plan.stage_layers(y, k) == job.plan.stage_layers(y, k) for y in range(12) for k in range(3))
    assert [sent.stage_layer_ids(k) for k in range(3)] == [job.stage_layer_ids(k) for k in range(3)]


def _counting(counts: Counter[str], label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[label] += 1
        return fn(*args, **kwargs)

    return counted


def test_a_local_run_builds_its_job_partition_and_space_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-stage run (in this process, so every build is seen): the launcher's checks reuse the job's space
    (before issue 19 the memory check built a second one, and each spawned stage a job of its own)."""
    counts: Counter[str] = Counter()
    monkeypatch.setattr(launch, "build_job", _counting(counts, "job", launch.build_job))
    monkeypatch.setattr(launch, "build_space", _counting(counts, "space built", launch.build_space))
    monkeypatch.setattr(job_module, "balanced_partition", _counting(counts, "partition", job_module.balanced_partition))
    make_space = _counting(counts, "space", naspipe.space.registry.make_space)
    monkeypatch.setattr(naspipe.space.registry, "make_space", make_space)
    monkeypatch.setattr(naspipe.space, "make_space", make_space, raising=False)
    assert launch.train(_config(1, "progress=off", "device=cpu"), tmp_path / "run") is not None
    assert counts == {"job": 1, "partition": 1, "space": 1, "space built": 1}


def test_the_stage_counts_meet_in_one_check() -> None:
    job = build_job(_config(2))
    launch._check_stage_count(job, None)
    launch._check_stage_count(job, launch.Rank(0, 2, 0))
    with pytest.raises(UsageError, match="--stages 2 but the launcher started 3 processes"):
        launch._check_stage_count(job, launch.Rank(0, 3, 0))
