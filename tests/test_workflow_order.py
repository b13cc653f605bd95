"""How the workflow uses a few cores: rule priorities (longest chain first), a CPU training job's threads
(the cores its stages keep busy, not D) and the per-job time hook (naspipe/plan/order.py, resources.py)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from naspipe.plan import resources
from naspipe.plan.cost import Estimate
from naspipe.plan.order import PRIORITY, job_times_prefix, priority, share_offset

ROOT = Path(__file__).resolve().parents[1]


def test_every_rule_has_a_priority_and_chains_come_before_fillers() -> None:
    rules = {m for f in (ROOT / "workflow" / "rules").glob("*.smk")
             for m in re.findall(r"^rule (\w+):", f.read_text(), re.M)}
    assert rules <= set(PRIORITY), rules - set(PRIORITY)
    chain = ["prepare", "profile", "partition", "search", "retrain", "search_accuracy"]
    assert [PRIORITY[r] for r in chain] == sorted((PRIORITY[r] for r in chain), reverse=True)
    assert PRIORITY["ablation"] > PRIORITY["simulate"] and PRIORITY["search_accuracy"] > PRIORITY["simulate"]
    with pytest.raises(KeyError):
        priority("no_such_rule")


def run(system: str, stages: int) -> SimpleNamespace:
    return SimpleNamespace(system=system, stages=str(stages), space="cv.tiny", seed="0")


def test_the_reference_goes_first_and_expected_copies_last_within_a_keyed_rule() -> None:
    assert (share_offset("sequential", 1), share_offset("csp", 4), share_offset("gpipe", 1)) == (0.5, -0.5, -0.5)
    assert share_offset("gpipe", 2) == share_offset("pipedream", 4) == 0.0
    search = priority("search")
    assert callable(search)
    order = sorted([("csp", 2), ("gpipe", 4), ("sequential", 1)], key=lambda r: -search(run(*r)))
    assert order == [("sequential", 1), ("gpipe", 4), ("csp", 2)]
    assert PRIORITY["retrain"] < search(run("csp", 2)) < PRIORITY["search"]  # still before every retrain
    train = priority("train")
    assert callable(train) and train(run("sequential", 1)) > train(run("csp", 4)) == PRIORITY["train"]
    assert priority("simulate") == PRIORITY["simulate"]


def estimate(exec_s: float, step_s: float) -> Estimate:
    return Estimate(device_bytes=0, host_bytes=0, device_limit=1, host_limit=1, seconds=1, step_seconds=step_s,
                    exec_s=exec_s, params=1, trainable=1, batch=1, max_batch=1, state_slots=0)


@pytest.mark.parametrize("device, stages, busy, want", [
    ("cpu", 4, (0.025, 0.025), 1),  # one busy stage at a time: one core
    ("cpu", 4, (0.039, 0.020), 2),  # pipedream at D=4: about two
    ("cpu", 2, (0.1, 0.01), 2),  # never more than its stages
    ("cpu", 1, (0.001, 0.1), 1),  # never fewer than one
    ("cuda", 4, (0.025, 0.025), 4),  # a stage process per GPU
])
def test_a_training_job_holds_the_cores_its_stages_keep_busy(device: str, stages: int,
                                                             busy: tuple[float, float], want: int) -> None:
    config = {"device": device, "threads_per_stage": 1}
    assert resources.local_threads(config, stages, estimate(*busy)) == want
    assert resources.local_threads(config, stages, None) == stages  # no prediction: every stage


def test_the_job_times_hook_only_with_its_variable() -> None:
    assert job_times_prefix({}) == ""
    assert job_times_prefix({"NASPIPE_JOB_TIMES": "/tmp/a b.txt"}).startswith("/usr/bin/time -a -o '/tmp/a b.txt' ")
