"""The simulator on micro-batched schedules: the same decisions as the driver, a sound lower bound,
memory that knows the parts, and the paper plan's csp-mb jobs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe import systems
from naspipe.config import CacheConfig
from naspipe.scheduling import PolicyOptions
from naspipe.scheduling.driver import drive
from naspipe.scheduling.task import Kind
from naspipe.sim.costs import analytic_costs, uniform_costs
from naspipe.sim.engine import simulate
from naspipe.sim.memory import live_parts, memory_report
from naspipe.sim.run import SimSetup, simulate_run
from naspipe.sim.tables import part_fractions
from tests.test_sim import HW, infos, make_plan


def micro_options(m: int, split: bool, inflight: int = 4, priority: str = "critical") -> PolicyOptions:
    return PolicyOptions(max_inflight=inflight, micro_batches=m, split_backward=split, priority=priority)


def test_parts_are_cut_as_tensor_split_cuts_them():
    assert part_fractions(10, 4) == [3 / 10, 3 / 10, 2 / 10, 2 / 10]
    assert sum(part_fractions(7, 7)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="cannot be split into 8"):
        part_fractions(4, 8)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("stages", [1, 2, 4])
def test_uniform_costs_give_the_drivers_schedule(stages, split):
    """Free messages, no overheads: the engine's per-stage task order is the driver's under the same durations."""
    plan = make_plan(stages)
    m, n = 3, 12
    costs = uniform_costs(infos(plan), HW, 6, 1)
    options = micro_options(m, split)
    result = simulate(plan, "csp", n, options, costs, recompute=True)

    def duration(task) -> float:  # what the engine charges: recompute 1 + backward 1 (split: 0.5 + 0.5) per part
        last = task.stage == stages - 1
        unsplit = 1.0 if last else 2.0
        return {Kind.FORWARD: 1.0, Kind.UPDATE: 0.0, Kind.WEIGHT: 0.5,
                Kind.BACKWARD: unsplit - 0.5 if split else unsplit}[task.kind] / m

    timeline = drive(plan, "csp", n, options, duration)
    assert result.makespan == pytest.approx(timeline.makespan)
    for k in range(stages):
        assert result.stages[k].tasks == len(timeline.tasks(k)) == n * ((2 + split) * m + 1)


@settings(max_examples=25, deadline=None)
@given(stages=st.integers(1, 5), m=st.integers(1, 5), split=st.booleans(), seed=st.integers(0, 30),
       inflight=st.integers(1, 8), recompute=st.booleans())
def test_the_lower_bound_holds_for_micro_batched_schedules(stages, m, split, seed, inflight, recompute):
    if m == 1 and not split:
        split = True
    plan = make_plan(stages, seed=seed)
    costs = analytic_costs(infos(plan), HW, 8, 1)
    setup = SimSetup(plan, "csp", 24, micro_options(m, split, inflight), costs, recompute)
    metrics, _ = simulate_run(setup)
    assert 0.0 < metrics["efficiency"] <= 1.0 + 1e-12
    assert metrics["micro_batches"] == m and metrics["split_backward"] is split


def test_parts_shrink_the_activations_a_backward_holds():
    plan = make_plan(4)
    costs = analytic_costs(infos(plan), HW, 8, 1)
    whole = memory_report(plan, "csp", costs, PolicyOptions(), True, 16)
    parts = memory_report(plan, "csp", costs, micro_options(4, False), True, 16)
    split = memory_report(plan, "csp", costs, micro_options(4, True), True, 16)
    assert parts.max_batch > whole.max_batch > split.max_batch
    assert live_parts(micro_options(4, False)) == 0.25 and live_parts(micro_options(4, True)) == 1.25


def test_the_micro_schedule_scales_where_the_paper_schedule_stays_flat():
    """Simulated time is deterministic: nlp.c1's shape on the plan's hardware, the paper plan's settings."""
    from naspipe.config import Config
    from naspipe.sim.hardware import load_hardware
    from naspipe.sim.setup import build_setup

    def throughput(stages: int, **sets: object) -> float:
        config = Config(system="csp", stages=stages, steps=24, space={"name": "nlp.c1"}, cache=CacheConfig(),
                        **sets)  # type: ignore[arg-type]
        setup = replace(build_setup(config, load_hardware("h100-nvlink-ib"), "analytic", "costs"), batch="max")
        return float(simulate_run(setup)[0]["throughput_samples_s"])

    paper = [throughput(d) for d in (4, 8)]
    micro = [throughput(d, micro_batches=d, split_backward=True) for d in (4, 8)]
    assert micro[0] > paper[0] and micro[1] > paper[1]
    assert micro[1] / micro[0] > paper[1] / paper[0]


def test_the_report_names_a_micro_batched_run_for_its_schedule():
    assert systems.schedule_name("csp", {"micro_batches": 1, "split_backward": False}) == "csp"
    assert systems.schedule_name("csp", {"micro_batches": 4}) == "csp-mb"
    assert systems.schedule_name("sequential", {"split_backward": True}) == "sequential-mb"
    assert systems.base_name("csp-mb") == "csp"
    assert systems.rank("csp") == systems.rank("csp-mb") < systems.rank("gpipe")


def test_the_workflow_passes_one_micro_schedule_to_csp_mb_jobs_at_every_stage_count():
    """csp-mb's simulate jobs take the micro block (simulate.micro over the top level's), the same count at every
    stage count; the batch mode may differ per hardware spec (the paper plan: max on its testbed, best on its own)."""
    from types import SimpleNamespace

    from naspipe.plan.workflow import Workflow

    sim = {"spaces": ["nlp.c1"], "systems": ["csp-mb"], "stages": [4, 8], "steps": 8, "seed": 0,
           "hardware": ["rtx2080ti-pcie3-40gbe", "h100-nvlink-ib"], "costs": "analytic",
           "batch": {"rtx2080ti-pcie3-40gbe": "max", "h100-nvlink-ib": "best"},
           "partition_by": "costs", "optimizer": {"name": "sgd", "momentum": 0.0}, "cache": True,
           "partition_mode": "static", "micro": {"micro_batches": 8, "priority": "fifo"}}
    w = Workflow({"simulate": sim, "micro": {"micro_batches": 4, "split_backward": True}}, {}, "local")
    for stages in ("4", "8"):
        args = w.simulate_args(SimpleNamespace(space="nlp.c1", system="csp-mb", stages=stages,  # type: ignore[arg-type]
                                               hardware="h100-nvlink-ib"))
        assert "--hardware h100-nvlink-ib" in args and "--system csp " in args and "--batch best" in args
        assert "--set micro_batches=8" in args and "--set priority=fifo" in args and "split_backward=true" in args
    plain = w.simulate_args(SimpleNamespace(space="nlp.c1", system="csp", stages="4",  # type: ignore[arg-type]
                                            hardware="rtx2080ti-pcie3-40gbe"))
    assert "micro_batches" not in plain and "--hardware rtx2080ti-pcie3-40gbe" in plain and "--batch max" in plain
    assert len(w.sims()) == 4


def test_micro_batched_and_subnet_level_runs_go_through_one_engine(monkeypatch):
    """One task model, one engine: a run in parts and a run of whole subnets are the same class's loop."""
    from naspipe.sim import engine

    seen: list[tuple[type, bool]] = []
    original = engine._Engine.run

    def run(self: engine._Engine) -> engine.SimResult:
        seen.append((type(self), self.parts))
        return original(self)

    monkeypatch.setattr(engine._Engine, "run", run)
    plan = make_plan(2)
    costs = analytic_costs(infos(plan), HW, 8, 1)
    for options in (PolicyOptions(max_inflight=4), micro_options(4, True)):
        simulate_run(SimSetup(plan, "csp", 8, options, costs, True))
    assert seen == [(engine._Engine, False), (engine._Engine, True)]


@pytest.mark.parametrize("system", ["gpipe", "vpipe"])
def test_bulk_synchronous_micro_schedules_run_in_the_engine(system):
    """The engine hard-codes no policy: micro-batched GPipe and VPipe (whose synchronous swap prices each part
    as its subnet-level task, a weight task as its backward) run every part task."""
    plan = make_plan(2)
    m, n = 3, 6
    costs = analytic_costs(infos(plan), HW, 6, 1)
    metrics, _ = simulate_run(SimSetup(plan, system, n, micro_options(m, True), costs, True))
    assert [s["tasks"] for s in metrics["stage_extra"]] == [n * (3 * m + 1)] * 2
    assert (metrics["swap_bytes"] > 0) is (system == "vpipe")
