"""The simulator's model of the CPU runtime's costs beyond the kernels (cpu-local's runtime keys)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from naspipe.partition import balanced_partition
from naspipe.scheduling import PipelinePlan, PolicyOptions
from naspipe.sim.costs import LayerInfo, analytic_costs, backward_s, forward_s, update_s, with_weight_stash
from naspipe.sim.hardware import load_hardware
from naspipe.sim.run import SimSetup, simulate_run
from naspipe.space.structure import SpaceStructure
from naspipe.subnet import SubnetStream

CPU = load_hardware("cpu-local")


def plan_of(stages: int = 2) -> PipelinePlan:
    structure = SpaceStructure("t", ("emb",), tuple(("a", "b") for _ in range(4)), ("head",))
    return PipelinePlan(structure, balanced_partition([1.0] * structure.num_positions, stages),
                        SubnetStream(structure.choices_per_block, 0))


def run(system: str, hardware: object, subnets: int = 6) -> tuple[dict[str, object], list[dict[str, object]]]:
    plan = plan_of()
    info = [LayerInfo(1000, 1e6, 4096.0, 16384.0) for _ in range(plan.structure.num_layers)]
    costs = analytic_costs(info, hardware, 4, 1)  # type: ignore[arg-type]
    return simulate_run(SimSetup(plan, system, subnets, PolicyOptions(max_inflight=4, bulk_size=2), costs, True,
                                 trace_max_events=10_000))


def test_a_send_holds_longer_while_the_receiver_computes_up_to_the_switch_interval():
    hw = CPU
    idle = hw.send_hold_s(0, 1, 0.0, 0.0)
    assert idle == hw.send_overhead_s
    assert hw.send_hold_s(0, 1, 0.0, 1e-3) == idle + min(1e-3, hw.receiver_busy_s)
    assert hw.send_hold_s(0, 1, 0.0, 10.0) == idle + hw.receiver_busy_s
    assert hw.send_hold_s(0, 1, hw.intra_host_bandwidth, 0.0) == idle + 1.0


def test_blocking_messages_land_a_latency_after_the_send_began():
    hw = replace(CPU, intra_host_latency=0.05, send_overhead_s=0.001, receiver_busy_s=0.0)
    _, trace = run("sequential", hw)
    sends = {e["args"]["subnet"]: e for e in trace if str(e.get("name", "")).startswith("send F")}  # type: ignore[index]
    forwards = {e["args"]["subnet"]: e for e in trace if e.get("name", "") != "" and e.get("tid") == 1  # type: ignore[index]
                and str(e["name"]).startswith("F")}
    assert sends and set(sends) == set(forwards)
    for y, send in sends.items():
        assert 1e3 <= send["dur"] < 1e3 + 20.0  # held for the handshake and the bytes only (us)
        assert forwards[y]["ts"] >= send["ts"] + 0.05e6 - 1.0  # the receiver starts a latency later


def test_a_busy_receiver_takes_a_message_in_a_latency_after_its_compute_and_its_own_send_end():
    """The runtime's receive thread needs the receiving process, which its compute and its own
    blocking send hold up: the latency starts once the receiver is neither computing nor sending."""
    hw = replace(CPU, intra_host_latency=0.02, send_overhead_s=0.001, receiver_busy_s=0.0)
    plan = plan_of()
    info = [LayerInfo(1000, 2e8, 4096.0, 16384.0) for _ in range(plan.structure.num_layers)]  # ~20 ms a layer
    costs = analytic_costs(info, hw, 4, 1)
    _, trace = simulate_run(SimSetup(plan, "pipedream", 12, PolicyOptions(max_inflight=4, bulk_size=2), costs, False,
                                     trace_max_events=10_000))
    spans = [e for e in trace if e.get("ph") == "X"]
    busy = {k: [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in spans  # type: ignore[arg-type]
                if e["tid"] == k and (e["cat"] != "waiting" or str(e["name"]).startswith("send"))] for k in (0, 1)}
    sends = [e for e in spans if str(e["name"]).startswith("send")]
    checked = 0
    for send in sends:
        src, y, forward = int(send["tid"]), send["args"]["subnet"], str(send["name"]).startswith("send F")  # type: ignore[call-overload, index]
        dst = 1 - src
        task = next(e for e in spans if e["tid"] == dst and e["args"]["subnet"] == y  # type: ignore[index]
                    and str(e["name"]).startswith("F" if forward else "B"))
        at = float(send["ts"])  # type: ignore[arg-type]
        receiver_free = max([at, *(b for a, b in busy[dst] if a <= at < b)])
        assert float(task["ts"]) >= receiver_free + 0.02e6 - 1.0  # type: ignore[arg-type]
        checked += receiver_free > at
    assert checked >= 3  # the rule was exercised: receivers busy when sends began


def test_start_up_and_shutdown_add_to_the_makespan_and_the_bubble():
    base, _ = run("gpipe", replace(CPU, run_overhead_s=0.0))
    more, _ = run("gpipe", replace(CPU, run_overhead_s=0.5))
    assert abs(more["makespan_s"] - base["makespan_s"] - 0.5) < 1e-9  # type: ignore[operator]
    assert more["bubble_ratio"] > base["bubble_ratio"]  # type: ignore[operator]


def test_only_a_weight_stashing_system_pays_the_stash_in_its_forward():
    hw = replace(CPU, stash_overhead_s=0.01)
    plan = plan_of()
    info = [LayerInfo(1000, 1e6, 4096.0, 16384.0) for _ in range(plan.structure.num_layers)]
    costs = analytic_costs(info, hw, 4, 1)
    layers = (1, 2, 3)
    plain, stashed = forward_s(costs, layers), forward_s(with_weight_stash(costs, True), layers)
    assert stashed - plain >= 3 * 0.01
    pipedream, _ = run("pipedream", hw)
    gpipe, _ = run("gpipe", hw)
    forward = [s["forward"] for s in pipedream["seconds_per_stage"]]  # type: ignore[attr-defined]
    assert sum(forward) > sum(s["forward"] for s in gpipe["seconds_per_stage"]) + 6 * 0.01  # type: ignore[attr-defined]


def test_idle_gaps_between_tasks_are_not_busy():
    base, _ = run("sequential", replace(CPU, task_gap_s=0.0))
    gaps, _ = run("sequential", replace(CPU, task_gap_s=0.01))
    busy = [sum(v for k, v in s.items() if k != "waiting") for s in base["seconds_per_stage"]]  # type: ignore[attr-defined]
    busy_gaps = [sum(v for k, v in s.items() if k != "waiting") for s in gaps["seconds_per_stage"]]  # type: ignore[attr-defined]
    assert busy == pytest.approx(busy_gaps, rel=1e-12)
    assert gaps["makespan_s"] > base["makespan_s"]  # type: ignore[operator]


def test_an_optimizer_step_pays_its_own_overhead_and_forward_and_backward_theirs():
    hw = replace(CPU, task_overhead_s=0.003, update_overhead_s=0.001)
    plan = plan_of()
    info = [LayerInfo(1000, 1e6, 4096.0, 16384.0) for _ in range(plan.structure.num_layers)]
    costs = analytic_costs(info, hw, 4, 1)
    layers = (1, 2, 3)
    kernels = [costs.layers[lid] for lid in layers]
    assert update_s(costs, layers) == pytest.approx(0.001 + sum(c.update_s for c in kernels), rel=1e-12)
    assert forward_s(costs, layers) == pytest.approx(0.003 + sum(c.forward_s for c in kernels), rel=1e-12)
    recompute, backward = backward_s(costs, layers, True)
    assert recompute + backward == pytest.approx(0.003 + sum(c.recompute_s + c.backward_s for c in kernels), rel=1e-12)
    cheap, _ = run("sequential", replace(hw, update_overhead_s=0.0))
    dear, _ = run("sequential", hw)
    optimizer = [s["optimizer"] for s in dear["seconds_per_stage"]]  # type: ignore[attr-defined]
    assert sum(optimizer) == pytest.approx(
        sum(s["optimizer"] for s in cheap["seconds_per_stage"]) + 6 * 2 * 0.001, rel=1e-9)  # type: ignore[attr-defined]
