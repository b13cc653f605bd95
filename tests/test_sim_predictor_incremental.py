"""The simulator's incremental predictor answers exactly what a fresh prediction would, at every task.

:class:`naspipe.scheduling.predictor.Predictor` keeps its run-ahead copy between calls when the
live policy's events are the ones the copy assumed (the engine logs them); the runtime calls
:func:`predict` afresh. Each call here is checked against :func:`predict` on the live policy at
that moment, over runs where the copy is both kept and remade, so a wrong reuse (or an event
the engine forgot to log) shows as the first differing prediction.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from naspipe.config import CacheConfig
from naspipe.partition import balanced_partition
from naspipe.scheduling import PipelinePlan, PolicyOptions
from naspipe.scheduling.predictor import Predictor, predict
from naspipe.scheduling.task import Task
from naspipe.sim.costs import LayerInfo, analytic_costs, uniform_costs
from naspipe.sim.hardware import load_hardware
from naspipe.sim.run import SimSetup, simulate_run
from naspipe.space.structure import SpaceStructure
from naspipe.subnet import SubnetStream

HW = load_hardware("rtx2080ti-pcie3-40gbe")


def plan_of(stages: int, blocks: int, candidates: int, seed: int, per_subnet: bool) -> PipelinePlan:
    structure = SpaceStructure("t", ("emb",), tuple(tuple(f"op{c}" for c in range(candidates)) for _ in range(blocks)),
                               ("head",))
    partition = balanced_partition([1.0] * structure.num_positions, stages)
    stream = SubnetStream(structure.choices_per_block, seed)
    if not per_subnet:
        return PipelinePlan(structure, partition, stream)
    costs = [1.0 + 7.0 * (lid % 4 == 1) + (lid % 3) for lid in range(structure.num_layers)]
    return PipelinePlan.per_subnet(structure, partition, stream, costs)


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[Predictor]:
    """Every Predictor.predict call compared with a fresh predict() on the live policy; the predictors seen."""
    seen: list[Predictor] = []
    incremental = Predictor.predict

    def both(self: Predictor, running: Task) -> list[Task]:
        if self not in seen:
            seen.append(self)
        fresh = predict(self.policy, self.horizon, self.end, running=running)
        kept = incremental(self, running)
        assert kept == fresh, f"stage {self.policy.stage}, running {running}: kept {kept}, fresh {fresh}"
        return kept

    monkeypatch.setattr(Predictor, "predict", both)
    return seen


@pytest.mark.parametrize(("stages", "system", "per_subnet", "costs"), [
    (4, "csp", False, "uniform"),
    (8, "csp", False, "analytic"),
    (3, "csp", True, "analytic"),
    (4, "csp-no-scheduler", False, "uniform"),
    (4, "csp-artifact", False, "analytic"),
    (3, "sequential", False, "uniform"),
])
def test_kept_predictions_equal_fresh_ones(checked, stages, system, per_subnet, costs):
    plan = plan_of(stages, blocks=12, candidates=3, seed=stages, per_subnet=per_subnet)
    infos = [LayerInfo(1000 * (1 + lid % 5), 1e6 * (1 + lid % 3), 4096.0, 16384.0)
             for lid in range(plan.structure.num_layers)]
    model = uniform_costs(infos, HW, 8, "sgd") if costs == "uniform" else analytic_costs(infos, HW, 8, "sgd")
    setup = SimSetup(plan, system, 60, PolicyOptions(max_inflight=4, bulk_size=3), model, True,
                     cache=CacheConfig(enabled=True, budget="2x", horizon=6))
    metrics, _ = simulate_run(setup)
    calls = sum(p.calls for p in checked)
    assert calls == sum(extra["tasks"] for extra in metrics["stage_extra"])  # one prediction per task
    assert 0 < sum(p.reused for p in checked) < calls  # both paths ran: the copy kept and remade


def test_horizon_zero_predicts_nothing_and_keeps_no_copy(checked):
    plan = plan_of(3, blocks=6, candidates=3, seed=1, per_subnet=False)
    infos = [LayerInfo(1000.0, 1e6, 4096.0, 16384.0) for _ in range(plan.structure.num_layers)]
    setup = SimSetup(plan, "csp", 20, PolicyOptions(max_inflight=3, bulk_size=3), uniform_costs(infos, HW, 8, "sgd"),
                     True, cache=CacheConfig(enabled=True, budget="2x", horizon=0))
    simulate_run(setup)
    simulate_run(replace(setup, cache=CacheConfig(enabled=True, budget="2x", horizon=1)))
    assert checked and all(p.reused == 0 for p in checked if p.horizon == 0)
