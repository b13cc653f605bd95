"""The simulator's whole-run models at scale equal the scalar walks they replaced, bit for bit.

The memory model's per-stage holdings and the longest path are computed a block of subnets at
a time (numpy) so that 64 stages x 100,000 subnets take seconds; the golden dump
(tests/test_sim_golden.py) covers small runs within one block, so here runs of several
blocks (and a partial last one) are checked against the per-subnet, per-stage Python walks
the simulator used before, kept below as the reference.
"""

from __future__ import annotations

import pytest

from naspipe.scheduling import PipelinePlan
from naspipe.sim.bound import CAUSAL_SYSTEMS, longest_path
from naspipe.sim.costs import CostModel, analytic_costs, backward_s, forward_s, uniform_costs, update_s
from naspipe.sim.layout import StageSlices, SubnetLayers, stage_layer_ids
from naspipe.sim.memory import StageHolding, stage_holdings
from tests.test_sim_memory import HW, infos, plans

SUBNETS = 600  # two whole blocks of the cost table (256) and part of a third


def reference_path(plan: PipelinePlan, system: str, num_subnets: int, costs: CostModel, recompute: bool) -> float:
    """The longest path as one scalar walk per subnet and stage (the implementation before the table)."""
    d = plan.num_stages
    causal = system in CAUSAL_SYSTEMS
    written: dict[int, float] = {}
    longest = 0.0
    layout = SubnetLayers(plan)
    for y in range(num_subnets):
        t = 0.0
        slices, trainables = layout.all(y), layout.trainable(y)
        for k in range(d):
            if causal:
                t = max([t, *(written.get(lid, 0.0) for lid in trainables[k])])
            t += forward_s(costs, slices[k]) + (message(costs, slices, k, k + 1) if k < d - 1 else 0.0)
        for k in range(d - 1, -1, -1):
            r, b = backward_s(costs, slices[k], recompute)
            t += r + b
            done = t + update_s(costs, trainables[k])
            longest = max(longest, done)
            if causal:
                for lid in trainables[k]:
                    written[lid] = done
            if k > 0:
                t += message(costs, slices, k, k - 1)
    return longest


def message(costs: CostModel, slices: StageSlices, src: int, dst: int) -> float:
    if costs.free_io:
        return 0.0
    return costs.hardware.transfer_s(src, dst, costs.boundary_bytes(slices[min(src, dst)][-1]))


def reference_holdings(plan: PipelinePlan, costs: CostModel, subnets: int) -> list[StageHolding]:
    """The holdings as one walk per stage over every subnet (the implementation before the blocks)."""
    structure, layout = plan.structure, SubnetLayers(plan)
    n = max(1, subnets)
    out = []
    for k in range(plan.num_stages):
        layers = stage_layer_ids(plan, k, n)
        shares, acts, inputs = [], [], []
        for y in range(n):
            here = layout.all(y)[k]
            shares.append(sum(costs.param_bytes(lid) for lid in layout.trainable(y)[k]))
            acts.append(sum(costs.info[lid].act_bytes for lid in here))
            inputs.append(costs.info[layout.all(y)[k - 1][-1]].out_bytes if k else 0.0)
        out.append(StageHolding(
            params=sum(costs.param_bytes(lid) for lid in layers),
            trainable=sum(costs.param_bytes(lid) for lid in layers if structure.is_trainable(lid)),
            share_mean=sum(shares) / n, share_max=max(shares), acts_mean=sum(acts) / n, acts_max=max(acts),
            input_mean=sum(inputs) / n))
    return out


def models(plan: PipelinePlan) -> list[CostModel]:
    analytic = analytic_costs(infos(plan), HW, 32, 2)
    return [uniform_costs(infos(plan), HW, 32, 1), analytic]


@pytest.mark.parametrize("stages", [1, 3, 8])
@pytest.mark.parametrize("mirrored", [False, True])
def test_the_longest_path_equals_the_scalar_walk(stages, mirrored):
    plan = plans(stages)[mirrored]
    for costs in models(plan):
        for system in ("csp", "gpipe"):
            for recompute in (True, False):
                ours = longest_path(plan, system, SUBNETS, costs, recompute)
                assert repr(ours) == repr(reference_path(plan, system, SUBNETS, costs, recompute))


@pytest.mark.parametrize("stages", [1, 3, 8])
@pytest.mark.parametrize("mirrored", [False, True])
def test_the_holdings_equal_the_scalar_walk(stages, mirrored):
    plan = plans(stages)[mirrored]
    for costs in models(plan):
        for n in (1, SUBNETS):
            ours, theirs = stage_holdings(plan, costs, n), reference_holdings(plan, costs, n)
            assert [repr(h) for h in ours] == [repr(h) for h in theirs]  # repr: 0 and 0.0 differ in the JSON


def test_a_stage_without_trainable_layers_holds_an_integer_zero_share_as_before():
    """A frozen prefix alone on stage 0 (8 stages, 10 positions): ``sum`` of no layers is 0, not 0.0."""
    plan = plans(10)[0]
    costs = models(plan)[1]
    ours, theirs = stage_holdings(plan, costs, 40), reference_holdings(plan, costs, 40)
    assert theirs[0].share_max == 0 and type(theirs[0].share_max) is int
    assert [repr(h) for h in ours] == [repr(h) for h in theirs]


def test_the_trace_keeps_the_first_and_last_subnets_and_says_so(tmp_path):
    """A bounded trace is the full trace's spans of the window's subnets, unchanged, and its
    metadata names the window and counts what it left out."""
    import json

    from naspipe.cli import main

    out = {}
    for window in ("0", "3"):
        run = tmp_path / f"w{window}"
        assert main(["simulate", "--system", "csp", "--stages", "3", "--steps", "20", "--set", "space.blocks=4",
                     "--trace-subnets", window, "--out", str(run)]) == 0
        out[window] = json.loads((run / "trace.json").read_text()), json.loads((run / "metrics.json").read_text())
    (full, _), (bounded, metrics) = out["0"], out["3"]
    window = {0, 1, 2, 17, 18, 19}
    spans = [e for e in full["traceEvents"] if e["ph"] == "X"]
    kept = [e for e in bounded["traceEvents"] if e["ph"] == "X"]
    assert kept == [e for e in spans if e["args"]["subnet"] in window]
    assert bounded["otherData"]["traced_subnets"] == [[0, 3], [17, 20]]
    assert full["otherData"]["traced_subnets"] == [[0, 20]] and full["otherData"]["events_dropped"] == 0
    assert bounded["otherData"]["events_dropped"] == len(spans) - len(kept)
    assert sum(s["trace_dropped"] for s in metrics["stage_extra"]) == len(spans) - len(kept)
