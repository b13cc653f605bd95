"""The simulator's memory model and per-subnet partitions: what the runtime holds, mirrored layers,
mirror transfers, and the per-stage order still the virtual-time driver's."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from naspipe import cli
from naspipe.config import CacheConfig, OptimizerConfig, load_config
from naspipe.partition import balanced_partition
from naspipe.scheduling import PipelinePlan, PolicyOptions
from naspipe.scheduling.driver import drive
from naspipe.scheduling.policies import POLICIES
from naspipe.sim.costs import LayerInfo, analytic_costs, forward_s
from naspipe.sim.engine import simulate
from naspipe.sim.hardware import load_hardware
from naspipe.sim.layout import SubnetLayers, stage_layer_ids
from naspipe.sim.memory import memory_report, optimizer_slots, stage_holdings
from naspipe.sim.run import SimSetup, cache_budgets, simulate_run
from naspipe.space.structure import SpaceStructure
from naspipe.subnet import SubnetStream
from tests.test_sim import driver_duration, layer_costs

HW = load_hardware("rtx2080ti-pcie3-40gbe")
MIRRORING = [name for name, policy in POLICIES.items() if policy.mirroring]


def structure(blocks: int = 8, candidates: int = 3) -> SpaceStructure:
    return SpaceStructure("t", ("emb",), tuple(("a", "b", "c")[:candidates] for _ in range(blocks)), ("head",))


def widths(s: SpaceStructure) -> list[int]:
    """CV-like parameter counts: later blocks wider, one candidate per block far wider than the others."""
    out = [1000] * s.num_layers
    for b in range(len(s.blocks)):
        for c in range(len(s.blocks[b])):
            out[s.layer_id(b, c)] = 1000 * (1 + b) ** 2 * (12 if c == 0 else 1)
    return out


def plans(stages: int, blocks: int = 8, seed: int = 0) -> tuple[PipelinePlan, PipelinePlan]:
    """(static, per-subnet) plans of one stream; both split by parameter counts, as partition_costs=params."""
    s = structure(blocks)
    params = widths(s)
    positions = [float(params[0])] + [sum(params[s.layer_id(b, c)] for c in range(3)) / 3 for b in range(blocks)]
    partition = balanced_partition([*positions, float(params[-1])], stages)
    stream = SubnetStream(s.choices_per_block, seed)
    return (PipelinePlan(s, partition, stream),
            PipelinePlan.per_subnet(s, partition, stream, [float(p) for p in params]))


def infos(plan: PipelinePlan) -> list[LayerInfo]:
    return [LayerInfo(p, 1e6 * p / 1000, 4096.0, 65536.0) for p in widths(plan.structure)]


def test_the_layer_view_follows_each_subnets_own_partition():
    _, plan = plans(4)
    layout = SubnetLayers(plan)
    assert len({plan.partition_of(y) for y in range(40)}) > 1  # the splits really differ
    for y in range(40):
        for k in range(4):
            assert layout.all(y)[k] == plan.stage_layers(y, k)
            assert layout.trainable(y)[k] == plan.trainable_layers(y, k)


@pytest.mark.parametrize("system", MIRRORING)
@pytest.mark.parametrize("stages", [2, 4])
def test_per_subnet_order_and_mirrors_equal_the_virtual_time_driver(system, stages):
    _, plan = plans(stages)
    costs = layer_costs(plan, infos(plan))
    options = PolicyOptions(max_inflight=2 * stages, bulk_size=stages)
    sim = simulate(plan, system, 30, options, costs, recompute=True, record_order=True)
    timeline = drive(plan, system, 30, options, driver_duration(plan, costs))
    for k in range(stages):
        assert sim.stages[k].order == timeline.tasks(k)
    assert sim.makespan == pytest.approx(timeline.makespan, rel=1e-12)
    mirrored = sum(costs.param_bytes(m.layer) * (1 + costs.optimizer_states) for m in timeline.mirrors)
    assert timeline.mirrors and sum(s.mirror_bytes for s in sim.stages) == pytest.approx(mirrored)


def test_mirror_updates_take_time_on_the_links():
    _, plan = plans(4)
    costs = analytic_costs(infos(plan), HW, 8, 1)
    setup = SimSetup(plan, "csp", 40, PolicyOptions(max_inflight=8, bulk_size=4), costs, True)
    timed, _ = simulate_run(setup)
    slow = replace(costs, hardware=replace(HW, intra_host_bandwidth=HW.intra_host_bandwidth / 1e4))
    slowed, _ = simulate_run(replace(setup, costs=slow))
    assert timed["mirror_bytes"] == slowed["mirror_bytes"] > 0
    assert slowed["makespan_s"] > timed["makespan_s"]


def test_a_mirrored_layer_is_held_and_charged_on_every_stage_that_runs_it():
    _, plan = plans(4)
    n = 40
    costs = analytic_costs(infos(plan), HW, 8, 2)
    home = {k: set(stage_layer_ids(replace_static(plan), k, n)) for k in range(4)}
    held = {k: set(stage_layer_ids(plan, k, n)) for k in range(4)}
    mirrored = {k: held[k] - home[k] for k in range(4)}
    assert any(mirrored.values())
    for k, h in enumerate(stage_holdings(plan, costs, n)):
        assert h.params == sum(costs.param_bytes(lid) for lid in held[k])
    # resident csp: every copy on the device with its Adam moments
    resident = memory_report(plan, "csp", costs, PolicyOptions(max_inflight=8), True, n)
    static = memory_report(replace_static(plan), "csp", costs, PolicyOptions(max_inflight=8), True, n)
    ours, theirs = stage_holdings(plan, costs, n), stage_holdings(replace_static(plan), costs, n)
    for k in range(4):
        copies = sum(costs.param_bytes(lid) for lid in mirrored[k]) * (1 + 2)
        gradients = ours[k].share_max - theirs[k].share_max
        assert resident.per_stage[k].fixed - static.per_stage[k].fixed == pytest.approx(copies + gradients)
    # with the context cache the copies live in host memory, once per stage holding them
    cached = memory_report(plan, "csp", costs, PolicyOptions(max_inflight=8), True, n, [1 << 30] * 4)
    last = plan.structure.num_layers - 1
    supernet = sum(costs.param_bytes(lid) for lid in range(last + 1)) * 3 \
        - (costs.param_bytes(0) + costs.param_bytes(last)) * 2  # the frozen shared layers carry no moments
    assert sum(cached.per_host.values()) == pytest.approx(supernet + sum(
        costs.param_bytes(lid) * 3 for k in range(4) for lid in mirrored[k]))


def replace_static(plan: PipelinePlan) -> PipelinePlan:
    return PipelinePlan(plan.structure, plan.partition, plan.stream)


def test_per_subnet_partitions_fit_a_cv_like_space_where_the_static_one_does_not():
    static, per_subnet = plans(4, blocks=12)
    costs = analytic_costs(infos(static), HW, 8, 1)
    cache = CacheConfig(enabled=True, budget="3x")
    setups = [SimSetup(p, "csp", 64, PolicyOptions(max_inflight=8), costs, True, cache=cache)
              for p in (static, per_subnet)]
    fixed = [max(memory_report(s.plan, "csp", costs, s.options, True, 64, cache_budgets(s)).per_stage,
                 key=lambda m: m.fixed).fixed for s in setups]
    assert fixed[1] < fixed[0]
    device = (fixed[0] + fixed[1]) / 2  # a device between the two fullest stages
    small = replace(costs, hardware=replace(HW, device_memory=HW.device_reserved + device))
    runs = [simulate_run(replace(s, costs=small, batch="max"))[0] for s in setups]
    assert runs[0]["max_batch"] == 0 and not runs[0]["fits"]
    assert runs[1]["max_batch"] > 0 and runs[1]["fits"] and runs[1]["mirror_bytes"] > 0


def test_gradients_and_stashes_per_system():
    static, _ = plans(4)
    n = 40
    costs = analytic_costs(infos(static), HW, 8, 1)
    options = PolicyOptions(max_inflight=8, bulk_size=4)
    h = stage_holdings(static, costs, n)
    fixed = {s: [m.fixed for m in memory_report(static, s, costs, options, True, n).per_stage]
             for s in ("csp", "gpipe", "pipedream")}
    for k in range(4):
        base = h[k].params + h[k].trainable  # parameters and SGD momentum for every trainable layer held
        assert fixed["csp"][k] == pytest.approx(base + h[k].share_max)  # the update follows the backward
        assert fixed["gpipe"][k] == pytest.approx(base + 4 * h[k].share_mean)  # the bulk's gradients
        assert fixed["pipedream"][k] == pytest.approx(base + h[k].share_max + (4 - k) * h[k].share_mean)


def test_optimizer_slots_follow_torch():
    assert optimizer_slots(OptimizerConfig(name="adam")) == 2
    assert optimizer_slots(OptimizerConfig(name="sgd", momentum=0.9)) == 1
    assert optimizer_slots(OptimizerConfig(name="sgd", momentum=0.0)) == 0


@pytest.mark.parametrize("optimizer", [["optimizer.momentum=0"], ["optimizer.name=adam"]])
def test_the_simulated_cache_budget_and_layers_equal_the_runtimes(tmp_path, optimizer):
    """One tiny per-subnet run on this CPU: the runtime's cache budget per stage (sized from real modules)
    equals the simulator's (from shapes), and the simulator's stage layers are the runtime's."""
    from naspipe.runplan.job import build_job
    from naspipe.sim.setup import build_setup

    sets = ["space.blocks=6", "space.candidates=3", "space.dim=16", "space.seq_len=8", "partition_mode=per-subnet",
            "cache.enabled=true", "cache.budget=1.5x", *optimizer]
    flags = {"system": "csp", "stages": 3, "steps": 8}
    args = ["train", "--system", "csp", "--stages", "3", "--steps", "8", "--out", str(tmp_path / "run")]
    assert cli.main([*args, *(x for s in sets for x in ("--set", s))]) == 0
    measured = json.loads((tmp_path / "run" / "metrics.json").read_text())
    config = load_config(None, sets, flags)
    setup = build_setup(config, HW, "analytic")
    assert cache_budgets(setup) == [int(e["cache_budget_bytes"]) for e in measured["stage_extra"]]
    job = build_job(config)
    for k in range(3):
        assert stage_layer_ids(setup.plan, k, 8) == job.stage_layer_ids(k)


def test_partition_by_costs_balances_the_simulated_compute():
    from naspipe.sim.planning import plan_by_costs

    static, per_subnet = plans(4, blocks=12)
    s = static.structure
    costs = analytic_costs([LayerInfo(p, 1e6 * (1 + (lid % 4 == 0) * 30), 4096.0, 65536.0)
                            for lid, p in enumerate(widths(s))], HW, 8, 1)

    def busiest(plan: PipelinePlan) -> float:
        return max(sum(forward_s(costs, plan.stage_layers(y, k)) for y in range(64)) for k in range(4))

    for plan in (static, per_subnet):
        by_costs = plan_by_costs(plan, costs, recompute=True)
        assert by_costs.mirrored == plan.mirrored and by_costs.stream is plan.stream
        assert busiest(by_costs) < busiest(plan)
