"""The engine's loop for free messages and resident parameters, and the stream's bulk draw (issue 22,
fourth pass): each must give exactly what the path it replaces gives.

The golden dump (``benchmarks/sim_golden.py``) covers the fast loop through the command's own path; these
compare it with the general loop directly, every observable, over the systems that can take it.
"""

from __future__ import annotations

import random

import pytest

from naspipe.scheduling import PolicyOptions
from naspipe.seeding import derive_seed
from naspipe.sim import engine
from naspipe.sim.costs import uniform_costs
from naspipe.sim.engine import SimResult, simulate
from naspipe.subnet import Subnet, SubnetStream
from tests.conftest import make_plan
from tests.test_sim import HW, infos


def _observed(result: SimResult) -> list[object]:
    return [(s.seconds, s.tasks, s.end, s.sent_bytes, s.order, s.trace, s.trace_dropped) for s in result.stages] + [
        (c.stats.hits, c.stats.misses) for c in result.residency]


@pytest.mark.parametrize("system", ["csp", "sequential", "gpipe", "pipedream", "csp-no-scheduler", "csp-artifact"])
@pytest.mark.parametrize(("stages", "recompute", "trace"), [(1, True, 0), (3, False, 4), (4, True, 2), (8, True, 0)])
def test_the_fast_loop_decides_and_sums_as_the_general_one(system, stages, recompute, trace, monkeypatch):
    plan = make_plan(blocks=9, candidates=3, stages=stages, seed=stages)
    costs = uniform_costs(infos(plan), HW, 8, 1)
    assert costs.free_io
    options = PolicyOptions(max_inflight=2 * stages, bulk_size=3)
    run = [0]
    fast_loop = engine._Engine._run_free

    def counted(self: engine._Engine) -> SimResult:
        run[0] += 1
        return fast_loop(self)

    monkeypatch.setattr(engine._Engine, "_run_free", counted)
    fast = simulate(plan, system, 40, options, costs, recompute, record_order=True, trace_max_events=300,
                    trace_subnets=trace)
    assert run[0] == 1  # it took the fast loop
    monkeypatch.setattr(engine._Engine, "fast", False)
    general = simulate(plan, system, 40, options, costs, recompute, record_order=True, trace_max_events=300,
                       trace_subnets=trace)
    assert run[0] == 1
    assert _observed(fast) == _observed(general)
    assert fast.makespan == general.makespan > 0
    assert all(s.order for s in fast.stages) and any(s.trace for s in fast.stages)


def test_a_small_trace_budget_cuts_the_fast_loop_where_it_cuts_the_general_one(monkeypatch):
    plan = make_plan(blocks=6, candidates=2, stages=3)
    costs = uniform_costs(infos(plan), HW, 8, 1)
    fast = simulate(plan, "csp", 30, PolicyOptions(max_inflight=6), costs, True, trace_max_events=7)
    monkeypatch.setattr(engine._Engine, "fast", False)
    general = simulate(plan, "csp", 30, PolicyOptions(max_inflight=6), costs, True, trace_max_events=7)
    assert _observed(fast) == _observed(general)
    assert all(len(s.trace) == 7 and s.trace_dropped for s in fast.stages)


@pytest.mark.parametrize(("candidates", "seed"), [(1, 0), (2, 1), (5, 2), (24, 3), (256, 4), (1000, 5), (2**32 - 1, 6)])
def test_the_bulk_draw_is_randrange_in_order(candidates, seed):
    """Every block alike: the stream draws the generator's outputs in bulk; the same subnets as
    ``randrange`` per choice, whichever block is read first, and the same generator state after."""
    blocks = 7
    stream = SubnetStream([candidates] * blocks, seed)
    assert stream._alike
    rng = random.Random(derive_seed(seed, "subnets"))
    expected = [Subnet(tuple(rng.randrange(candidates) for _ in range(blocks))) for _ in range(3 * stream.BLOCK)]
    reads = [2 * stream.BLOCK + 5, 3, stream.BLOCK + 1, 3 * stream.BLOCK - 1]
    assert [stream[i] for i in reads] == [expected[i] for i in reads]  # the last block first: walks to it
    in_order = SubnetStream([candidates] * blocks, seed)
    assert [in_order[i] for i in range(len(expected))] == expected
    assert stream._starts[3] == rng.getstate()  # where block 2's draw left the generator: block 3's start


def test_blocks_unalike_or_too_wide_take_the_draw_per_choice():
    assert not SubnetStream([3, 4], 0)._alike
    assert not SubnetStream([2**32 + 1] * 3, 0)._alike
    rng = random.Random(derive_seed(0, "subnets"))
    wide = SubnetStream([2**32 + 1] * 3, 0)
    assert wide[1] == [Subnet(tuple(rng.randrange(2**32 + 1) for _ in range(3))) for _ in range(2)][1]
