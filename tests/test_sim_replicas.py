"""Replicated stages in the scheduling core and the simulator (issue 42): the update waits for the replicas' sum,
the engine prices that exchange on the hardware's links, and ``--gpus G`` picks the fastest layout that fits."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from naspipe.config import load_config
from naspipe.errors import UsageError
from naspipe.scheduling import PolicyOptions, make_policy
from naspipe.scheduling.driver import drive
from naspipe.scheduling.replicas import ProcessGrid
from naspipe.scheduling.task import Kind
from naspipe.sim.costs import uniform_costs
from naspipe.sim.engine import simulate
from naspipe.sim.exchange import ReplicaExchange
from naspipe.sim.layouts import layouts
from tests.conftest import run_cli
from tests.test_sim import HW, infos, make_plan


def options(m: int, replicas: int) -> PolicyOptions:
    return PolicyOptions(micro_batches=m, split_backward=True, replicas=replicas)


def test_a_replica_runs_its_share_of_the_parts_and_its_update_waits_for_the_sum() -> None:
    plan = make_plan(1)
    policy = make_policy("csp", 0, plan, options(4, 2))
    policy.stream_ends_at(1)
    policy.admit(0)
    ran = []
    while (task := policy.next_task()) is not None:
        ran.append((task.kind, task.micro))
        policy.completed(task)
        if task.kind is Kind.FORWARD:
            policy.backward_arrived(task.subnet, task.micro)
    assert ran.count((Kind.FORWARD, 0)) == 1 and {j for _, j in ran} == {0, 1}  # m / R = 2 parts
    assert Kind.UPDATE not in {k for k, _ in ran} and policy.newly_awaiting == [0]
    clone = policy.clone()  # the predictor's copy runs ahead as if the sum had come
    assert clone.next_task() is not None and clone.next_task() is None
    policy.reduced(0)
    task = policy.next_task()
    assert task is not None and task.kind is Kind.UPDATE


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_the_driver_and_the_engine_agree_with_free_exchanges(stages: int) -> None:
    """Uniform costs (free messages): the engine's replica takes the driver's schedule, task for task."""
    plan = make_plan(stages)
    opts = options(4, 2)
    costs = uniform_costs(infos(plan), HW, 8, 1)
    result = simulate(plan, "csp", 10, opts, costs, recompute=True, record_order=True)
    timeline = drive(plan, "csp", 10, opts, lambda task: 1.0)
    for k in range(stages):
        assert result.stages[k].tasks == len(timeline.tasks(k)) == 10 * (3 * 2 + 1)


def test_the_exchange_is_priced_on_the_links_between_the_replicas_hosts() -> None:
    plan = make_plan(2)
    costs = uniform_costs(infos(plan), HW, 8, 1)
    two, four = ReplicaExchange(plan, costs, 2, 2), ReplicaExchange(plan, costs, 4, 1)
    assert two.seconds(0, 1e6) > 0 and four.seconds(0, 1e6) > two.seconds(0, 1e6)  # R - 1 hops and R - 1 sends
    grid = ProcessGrid(2, 4)
    assert [grid.place(r) for r in range(8)] == [(s, r) for r in range(4) for s in range(2)]
    assert grid.rank(1, 3) == 7


def test_layouts_for_a_gpu_count() -> None:
    config = load_config(None, ["micro_batches=4"], {"system": "csp", "space.name": "toy"})
    assert layouts(config, 8, 6) == [(2, 4), (4, 2)]  # R divides m = 4, D at most the 6 positions
    plain = load_config(None, [], {"system": "gpipe", "space.name": "toy"})
    assert layouts(plain, 4, 6) == [(4, 1)]
    with pytest.raises(UsageError, match="--gpus 64: no layout fits gpipe"):
        layouts(plain, 64, 6)


def test_simulate_on_a_gpu_count_keeps_the_fastest_layout(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = run_cli("simulate", "--space", "toy", "--system", "csp-mb", "--gpus", "4", "--steps", "16",
                     "--hardware", "h100-nvlink-ib", "--batch", "max", "--out", str(out))
    assert result.returncode == 0, result.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    search = metrics["layout_search"]
    tried = {(t["stages"], t["replicas"]): t["throughput_samples_s"] for t in search["tried"]}
    assert set(tried) == {(1, 4), (2, 2), (4, 1)}
    assert metrics["stages"] == search["stages"] and metrics.get("replicas", 1) == search["replicas"]
    assert tried[(search["stages"], search["replicas"])] == max(tried.values())
    both = run_cli("simulate", "--space", "toy", "--gpus", "4", "--stages", "2", "--out", str(tmp_path / "x"))
    assert both.returncode == 2 and "not both" in both.stderr


def test_a_replicated_stage_holds_its_subnets_in_order() -> None:
    """With the cache (one_holder), a replica holds the stage for one subnet at a time, in subnet order: were the
    replicas to pick different holders, each holder's update would wait for the sum, which waits for the other
    replica's parts, behind its own holder (a hang, seen once in CI before the rule)."""
    plan = make_plan(2)
    opts = PolicyOptions(micro_batches=4, split_backward=True, replicas=2, one_holder=True)
    last = make_policy("csp", 1, plan, opts)
    last.stream_ends_at(4)
    last.forward_arrived(1, 0)  # subnet 1's first part overtook subnet 0's (0 blocked upstream, say)
    assert last.next_task() is None  # it would start a hold out of order
    last.forward_arrived(0, 0)
    task = last.next_task()
    assert task is not None and (task.kind, task.subnet) == (Kind.FORWARD, 0)
    plain = make_policy("csp", 1, plan, replace(opts, replicas=1))  # one replica: the first ready holds
    plain.stream_ends_at(4)
    plain.forward_arrived(1, 0)
    task = plain.next_task()
    assert task is not None and task.subnet == 1
