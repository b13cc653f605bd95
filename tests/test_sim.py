"""The simulator: exact textbook results, the runtime's decisions, sound bounds, the CLI contract."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from naspipe.cli import main
from naspipe.partition import balanced_partition
from naspipe.scheduling import POLICY_NAMES, PipelinePlan, PolicyOptions
from naspipe.scheduling.driver import drive
from naspipe.scheduling.task import Kind, Task
from naspipe.sim.costs import (
    CostModel,
    LayerCost,
    LayerInfo,
    analytic_costs,
    backward_s,
    forward_s,
    uniform_costs,
    update_s,
)
from naspipe.sim.engine import simulate
from naspipe.sim.hardware import hardware_names, load_hardware
from naspipe.sim.run import SimSetup, simulate_run
from naspipe.space.structure import SpaceStructure
from naspipe.subnet import SubnetStream

HW = load_hardware("rtx2080ti-pcie3-40gbe")


def make_plan(stages: int, blocks: int = 6, candidates: int = 3, seed: int = 0) -> PipelinePlan:
    structure = SpaceStructure("t", ("emb",), tuple(("a", "b", "c")[:candidates] for _ in range(blocks)), ("head",))
    partition = balanced_partition([1.0] * structure.num_positions, stages)
    return PipelinePlan(structure, partition, SubnetStream(structure.choices_per_block, seed))


def infos(plan: PipelinePlan) -> list[LayerInfo]:
    return [LayerInfo(1000 * (1 + lid % 5), 1e6 * (1 + lid % 3), 4096.0, 16384.0)
            for lid in range(plan.structure.num_layers)]


def test_importing_the_simulator_does_not_import_torch():
    code = ("import sys; import naspipe.sim, naspipe.sim.engine, naspipe.sim.run, naspipe.sim.memory, "
            "naspipe.sim.bound, naspipe.sim.hardware, naspipe.sim.residency; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("stages", [2, 3, 4, 6])
@pytest.mark.parametrize("bulk", [1, 2, 4, 5])
def test_gpipe_with_uniform_costs_has_the_textbook_bubble(stages, bulk):
    plan = make_plan(stages)
    costs = uniform_costs(infos(plan), HW, 8, 1)
    result = simulate(plan, "gpipe", 3 * bulk, PolicyOptions(max_inflight=2 * stages, bulk_size=bulk), costs, True)
    busy = sum(s.busy for s in result.stages)
    bubble = 1.0 - busy / (stages * result.makespan)
    assert bubble == pytest.approx((stages - 1) / (bulk + stages - 1), rel=1e-12, abs=1e-15)
    assert result.makespan == 3 * 3.0 * (bulk + stages - 1)


def layer_costs(plan: PipelinePlan, info: list[LayerInfo] | None = None) -> CostModel:
    """Per-layer durations that differ by layer, messages free: the driver can run the same durations."""
    base = analytic_costs(infos(plan) if info is None else info, HW, 8, 1)
    layers = tuple(LayerCost(1.0 + lid % 4, 1.0 + lid % 4, 2.0 + lid % 3, 0.25) for lid in range(len(base.layers)))
    return CostModel("test", layers, base.info, HW, 8, 1, free_io=True)


def driver_duration(plan: PipelinePlan, costs: CostModel) -> Callable[[Task], float]:
    """What a task costs the simulator, for the virtual-time driver to run the same durations."""

    def duration(task: Task) -> float:
        layers = plan.stage_layers(task.subnet, task.stage)
        if task.kind is Kind.FORWARD:
            return forward_s(costs, layers)
        if task.kind is Kind.BACKWARD:
            return sum(backward_s(costs, layers, True))
        return update_s(costs, plan.trainable_layers(task.subnet, task.stage))

    return duration


@pytest.mark.parametrize("system", POLICY_NAMES)
@pytest.mark.parametrize("uniform", [True, False])
def test_task_order_per_stage_equals_the_virtual_time_driver(system, uniform):
    plan = make_plan(3)
    costs = uniform_costs(infos(plan), HW, 8, 1) if uniform else layer_costs(plan)
    options = PolicyOptions(max_inflight=4, bulk_size=3)
    sim = simulate(plan, system, 24, options, costs, recompute=True, record_order=True)

    def unit(task: Task) -> float:
        return {Kind.FORWARD: 1.0, Kind.BACKWARD: 2.0, Kind.UPDATE: 0.0}[task.kind]

    timeline = drive(plan, system, 24, options, unit if uniform else driver_duration(plan, costs))
    for k in range(3):
        assert sim.stages[k].order == timeline.tasks(k)
    assert sim.makespan == pytest.approx(timeline.makespan, rel=1e-12)


@pytest.mark.parametrize("system", POLICY_NAMES)
def test_lower_bound_never_exceeds_the_makespan(system):
    plan = make_plan(4, blocks=8, candidates=2)
    costs = analytic_costs(infos(plan), HW, 8, 2)
    setup = SimSetup(plan, system, 40, PolicyOptions(max_inflight=8, bulk_size=4), costs, True)
    metrics, _ = simulate_run(setup)
    assert 0 < metrics["lower_bound_s"] <= metrics["makespan_s"] * (1 + 1e-12)
    assert 0 < metrics["efficiency"] <= 1 + 1e-12
    busiest = max(sum(s[c] for c in ("forward", "recompute", "backward", "optimizer"))
                  for s in metrics["seconds_per_stage"])
    assert metrics["lower_bound_s"] >= busiest


def test_vpipe_waits_on_copies_and_pipedream_stashes_weights():
    plan = make_plan(2)
    costs = analytic_costs(infos(plan), HW, 8, 1)
    runs = {s: simulate_run(SimSetup(plan, s, 12, PolicyOptions(max_inflight=4, bulk_size=2), costs, True))[0]
            for s in ("gpipe", "vpipe", "pipedream")}
    assert runs["vpipe"]["swap_bytes"] > 0 and runs["vpipe"]["swap_wait_s"] > 0
    assert runs["vpipe"]["makespan_s"] > runs["gpipe"]["makespan_s"]
    assert runs["vpipe"]["device_bytes"] < runs["gpipe"]["device_bytes"]
    assert runs["pipedream"]["recompute_effective"] is False
    assert runs["gpipe"]["max_batch"] > 0


def test_every_shipped_hardware_spec_loads():
    names = hardware_names()
    assert {"rtx2080ti-pcie3-40gbe", "a100-nvlink-ib", "h100-nvlink-ib"} <= set(names)
    for name in names:
        hw = load_hardware(name)
        assert hw.transfer_s(0, hw.gpus_per_host, 1e6) >= hw.transfer_s(0, 1, 1e6) > 0


RUNTIME_KEYS = ("system", "space", "stages", "partition", "device", "subnets", "wall_s", "throughput_samples_s",
                "subnets_per_hour", "bubble_ratio", "bubble_ratio_per_stage", "exec_s", "seconds_per_stage",
                "swap_bytes", "swap_wait_s", "swap_fetches", "recompute_effective", "stage_extra", "config")
SIM_KEYS = ("makespan_s", "lower_bound_s", "efficiency", "max_batch", "device_bytes", "host_bytes")


def test_cli_writes_the_runtime_schema_and_a_trace(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["simulate", "--system", "csp", "--stages", "2", "--steps", "8", "--set", "space.blocks=4",
            "--out", str(out)]
    assert main(args) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    metrics = json.loads((out / "metrics.json").read_text())
    for key in RUNTIME_KEYS + SIM_KEYS:
        assert key in metrics, key
    assert metrics["simulated"] is True and metrics["subnets"] == 8
    trace = json.loads((out / "trace.json").read_text())
    kinds = {e.get("cat") for e in trace["traceEvents"]}
    assert {"forward", "recompute", "backward", "optimizer"} <= kinds
    capsys.readouterr()
    assert main(args) == 2  # a non-empty DIR is refused
    assert "not empty" in capsys.readouterr().err
    assert main([*args, "--overwrite", "--costs", "uniform"]) == 0


def test_cli_reads_a_profile(tmp_path):
    profile = Path(__file__).parent / "data" / "nonexistent.csv"
    assert main(["simulate", "--stages", "2", "--costs", str(profile), "--out", str(tmp_path / "x")]) == 2


def test_the_simulators_layer_view_equals_the_plan():
    from naspipe.sim.layout import SubnetLayers

    plan = make_plan(4, blocks=7)
    layout = SubnetLayers(plan)
    for y in range(30):
        for k in range(4):
            assert layout.all(y)[k] == plan.stage_layers(y, k)
            assert layout.trainable(y)[k] == plan.trainable_layers(y, k)


def test_batch_max_runs_at_the_largest_batch_that_fits():
    plan = make_plan(2)
    costs = analytic_costs(infos(plan), HW, 8, 1)
    base = SimSetup(plan, "gpipe", 8, PolicyOptions(max_inflight=4, bulk_size=2), costs, True)
    at_config, _ = simulate_run(base)

    at_max, _ = simulate_run(replace(base, batch="max"))
    assert at_max["batch_size"] == at_config["max_batch"] > 8
    assert at_max["throughput_samples_s"] > at_config["throughput_samples_s"]
    assert at_max["device_bytes"] <= HW.usable_device_memory


def test_context_cache_prefetching_beats_fetching_on_demand():
    """csp with cache.enabled drives issue 9's DeviceCache and predictor; copies overlap compute."""

    from naspipe.config import CacheConfig

    plan = make_plan(3, blocks=9, candidates=3)
    costs = analytic_costs(infos(plan), HW, 8, 1)
    base = SimSetup(plan, "csp", 40, PolicyOptions(max_inflight=3, bulk_size=3), costs, True,
                    cache=CacheConfig(enabled=True, budget="1.5x", horizon=8))
    predicted, _ = simulate_run(base)
    on_demand, _ = simulate_run(replace(base, cache=CacheConfig(enabled=True, budget="1.5x", horizon=0)))
    resident, _ = simulate_run(replace(base, cache=None))
    assert 0 < on_demand["cache_hit_rate"] < predicted["cache_hit_rate"] <= 1
    assert predicted["swap_bytes"] > 0 and resident["swap_bytes"] == 0 and resident["cache_hit_rate"] == 1
    assert predicted["host_bytes"] > 0 and predicted["device_bytes"] < resident["device_bytes"]


def per_subnet_plan(stages: int, blocks: int, seed: int) -> PipelinePlan:
    """Each subnet split by its own layer costs (so the splits differ); the static plan stays the home."""
    static = make_plan(stages, blocks=blocks, candidates=3, seed=seed)
    costs = [1.0 + 7.0 * (lid % 4 == 1) + (lid % 3) for lid in range(static.structure.num_layers)]
    return PipelinePlan.per_subnet(static.structure, static.partition, static.stream, costs)


@pytest.mark.parametrize("model", ["uniform", "analytic", "analytic+stash"])
@pytest.mark.parametrize("recompute", [True, False])
@pytest.mark.parametrize("per_subnet", [False, True])
def test_the_engines_cost_table_equals_the_scalar_costs_bit_for_bit(model, recompute, per_subnet):
    """The hot loop reads precomputed seconds; they must be exactly what the cost functions return,
    for each subnet's own partition and with PipeDream's weight stash."""
    from naspipe.sim.costs import with_weight_stash
    from naspipe.sim.layout import SubnetLayers
    from naspipe.sim.tables import BLOCK, CostTable

    plan = per_subnet_plan(6, 11, 3) if per_subnet else make_plan(6, blocks=11, candidates=3, seed=3)
    hw = load_hardware("rtx2080ti-pcie3-40gbe")  # 4 GPUs per host: links inside a host and across
    hw = replace(hw, update_overhead_s=hw.task_overhead_s / 3)  # an optimizer step's own overhead (cpu-local)
    costs = (uniform_costs if model == "uniform" else analytic_costs)(infos(plan), hw, 8, 2)
    costs = with_weight_stash(costs, model.endswith("+stash"))
    table, layout, d = CostTable(plan, costs, recompute, keep=1), SubnetLayers(plan), plan.num_stages
    if per_subnet:
        assert len({plan.partition_of(y) for y in range(40)}) > 1  # the splits really differ
    for y in [*range(40), BLOCK - 1, BLOCK, 3 * BLOCK + 5, 7]:
        block = table.block(y // BLOCK)
        for k in range(d):
            i = (y % BLOCK) * d + k
            layers, trainable = layout.all(y)[k], layout.trainable(y)[k]
            assert block.forward[i] == forward_s(costs, layers)
            assert (block.recompute[i], block.backward[i]) == backward_s(costs, layers, recompute)
            assert block.update[i] == update_s(costs, trainable)
            assert block.uses[i] == 2 * len(layers) + len(trainable)
            if k < d - 1:
                nbytes = costs.boundary_bytes(layers[-1])
                assert block.msg_bytes[i] == nbytes
                assert block.msg_s[i] == (0.0 if costs.free_io else hw.transfer_s(k, k + 1, nbytes))
    assert len(table.blocks) == 2  # evicting a block it needs again made it keep one more


@pytest.mark.parametrize("model", ["uniform", "analytic"])
@pytest.mark.parametrize("per_subnet", [False, True])
def test_the_cost_tables_swap_copies_equal_synchronous_swaps_bit_for_bit(model, per_subnet):
    """VPipe's copies come from the table in the hot loop: each entry must be what
    SynchronousSwap's acquire and release count and return for that task's layers."""
    from naspipe.sim.layout import SubnetLayers
    from naspipe.sim.residency import SynchronousSwap
    from naspipe.sim.tables import BLOCK, CostTable

    plan = per_subnet_plan(5, 11, 4) if per_subnet else make_plan(5, blocks=11, candidates=3, seed=4)
    hw = replace(HW, copy_overhead_s=3e-6)  # every term of copy_s counts
    costs = (uniform_costs if model == "uniform" else analytic_costs)(infos(plan), hw, 8, 2)
    structure = plan.structure
    swapped = frozenset(lid for lid in range(structure.num_layers) if structure.is_trainable(lid))
    table, layout, d = CostTable(plan, costs, True, keep=1, swapped=swapped), SubnetLayers(plan), plan.num_stages

    def copy(kind: Kind, y: int, k: int, layers: tuple[int, ...], fetch: bool) -> tuple[float, float, int]:
        """(seconds, bytes, misses) of one fresh swap's acquire (fetch) or release, at time 0."""
        swap = SynchronousSwap(costs, swapped)
        task = Task(kind, y, k)
        seconds = swap.acquire(task, layers, 0.0) if fetch else swap.release(task, layers, 0.0)
        nbytes = swap.stats.in_bytes if fetch else swap.stats.out_bytes
        assert swap.stats.wait_s == seconds
        return seconds, nbytes, swap.stats.misses

    for y in [*range(30), BLOCK - 1, BLOCK, 2 * BLOCK + 9]:
        moves = table.block(y // BLOCK).swap
        for k in range(d):
            i = (y % BLOCK) * d + k
            layers, trainable = layout.all(y)[k], layout.trainable(y)[k]
            fetch = (moves.fetch_s[i], moves.fetch_bytes[i], len(layers))
            assert copy(Kind.FORWARD, y, k, layers, True) == fetch
            assert copy(Kind.BACKWARD, y, k, layers, True) == fetch
            assert copy(Kind.BACKWARD, y, k, layers, False) == (*fetch[:2], 0)
            assert copy(Kind.UPDATE, y, k, trainable, True) == (
                moves.update_in_s[i], moves.update_in_bytes[i], len(trainable))
            assert copy(Kind.UPDATE, y, k, trainable, False) == (moves.update_out_s[i], moves.update_out_bytes[i], 0)
            assert table.block(y // BLOCK).uses[i] == 2 * len(layers) + len(trainable)  # the misses the engine adds
    assert model == "uniform" or min(moves.fetch_s) > 0


@pytest.mark.parametrize("hardware", ["rtx2080ti-pcie3-40gbe", "cpu-local"])
def test_vpipes_table_priced_copies_equal_the_swaps_own_calls(hardware):
    """The engine prices SynchronousSwap from the cost table (no call per task); a subclass, which
    the engine drives through acquire/release, must give the same times, stats, orders and trace."""
    from naspipe.sim.residency import SynchronousSwap

    class CalledSwap(SynchronousSwap):
        """The same copies, driven per task through the generic residency calls."""

    plan = make_plan(4, blocks=9, candidates=3, seed=2)
    costs = analytic_costs(infos(plan), load_hardware(hardware), 8, 2)
    structure = plan.structure
    swapped = frozenset(lid for lid in range(structure.num_layers) if structure.is_trainable(lid))
    options = PolicyOptions(max_inflight=4, bulk_size=3)
    runs = [simulate(plan, "vpipe", 290, options, costs, True, lambda k, p, cls=cls: cls(costs, swapped),
                     record_order=True, trace_max_events=10**6) for cls in (SynchronousSwap, CalledSwap)]
    table_priced, called = runs
    assert table_priced.makespan == called.makespan
    assert [(s.seconds, s.tasks, s.end, s.order, s.trace, s.trace_dropped) for s in table_priced.stages] == [
        (s.seconds, s.tasks, s.end, s.order, s.trace, s.trace_dropped) for s in called.stages]
    assert [r.stats for r in table_priced.residency] == [r.stats for r in called.residency]
    assert all(r.stats.wait_s > 0 and r.stats.misses > 0 for r in table_priced.residency)
