"""The simulator's hot paths at scale keep what they replace (issue 22, part 1).

Local CSP users carry no required version of their own (their queue position gives it),
CSP registers them inline for static plans, the subnet stream redraws evicted blocks from a
packed copy, and the engine pauses the cyclic collector: each must give exactly what the
plain path gives. The golden dump (``benchmarks/sim_golden.py``) checks the simulator's
observables over 1000 configurations; these check the pieces one by one.
"""

from __future__ import annotations

import gc

import pytest

from naspipe.scheduling import PolicyOptions, VersionTable, format_schedule
from naspipe.scheduling.driver import drive
from naspipe.scheduling.policies import POLICIES
from naspipe.scheduling.policies.csp import CSP
from naspipe.sim.engine import simulate
from naspipe.subnet import SubnetStream
from tests.conftest import make_plan
from tests.test_sim import HW, infos


def test_local_users_get_their_required_version_from_the_queue():
    table = VersionTable()
    assert table.register(0, [10, 11]) == 0
    assert table.register(1, [11]) == 1
    assert table.register(2, [11, 10]) == 2
    assert [table.required(y, 11) for y in (0, 1, 2)] == [0, 1, 2]
    assert table.required(2, 10) == 1
    assert table.write_all(0) == [2, 1]  # in its layers' order: layer 10 unblocks 2, layer 11 unblocks 1
    assert table.version(10) == table.version(11) == 1
    assert table.may_access(1, 11) and not table.may_access(2, 11) and table.may_access(2, 10)
    assert table.required(2, 11) == 2
    with pytest.raises(KeyError):
        table.required(1, 10)  # 1 does not use layer 10
    with pytest.raises(RuntimeError, match="subnet 2 wrote layer 11 at version 1, but its turn is version 2"):
        table.write_all(2)
    assert table.write_all(1) == [2] and table.write_all(2) == []
    assert table.version(10) == 2 and table.version(11) == 3


def test_a_copy_of_the_table_runs_ahead_without_touching_it():
    table = VersionTable()
    table.register(0, [5])
    table.register(1, [5])
    ahead = table.copy()
    assert ahead.write_all(0) == [1] and ahead.version(5) == 1
    assert table.version(5) == 0 and table.may_access(0, 5) and not table.may_access(1, 5)


def test_a_table_holds_one_kind_of_user():
    table = VersionTable()
    table.register(0, [1])
    with pytest.raises(ValueError, match="registered twice"):
        table.register(0, [2])
    with pytest.raises(ValueError, match="beside local users"):
        table.register(1, [1], {1: 1})
    with pytest.raises(RuntimeError, match="table of local users"):
        table.advance(1, 1)
    mirrored = VersionTable()
    mirrored.register(0, [1], {1: 3})
    with pytest.raises(ValueError, match="beside users with global versions"):
        mirrored.register(1, [1])
    assert mirrored.advance(1, 3) == 0 and mirrored.write_all(0) == []


class _RegisterEachOnItsOwn(CSP):
    """CSP without the inlined registration: every subnet through :meth:`CSP._on_register`."""

    def _on_register(self, subnet: int) -> None:
        super()._on_register(subnet)


@pytest.mark.parametrize("stages", [1, 3, 4])
def test_inlined_registration_decides_as_the_hook(stages, monkeypatch):
    plan = make_plan(blocks=7, candidates=2, stages=stages, seed=stages)
    options = PolicyOptions(max_inflight=2 * stages)
    inlined = drive(plan, "csp", 60, options)
    monkeypatch.setitem(POLICIES, "csp", _RegisterEachOnItsOwn)
    hooked = drive(plan, "csp", 60, options)
    assert [format_schedule(inlined.tasks(k)) for k in range(stages)] == \
        [format_schedule(hooked.tasks(k)) for k in range(stages)]
    assert all(inlined.tasks(k) for k in range(stages))


def test_evicted_blocks_come_back_packed_as_drawn():
    stream = SubnetStream([3, 300, 7], seed=4)  # 300 candidates: too many to pack a byte each
    small = SubnetStream([3, 20, 7], seed=4)
    first = [small[i] for i in range(SubnetStream.BLOCK * (SubnetStream.CACHED_BLOCKS + 2))]
    assert small._packed and not stream._packed_left
    fresh = SubnetStream([3, 20, 7], seed=4)
    assert [small[i] for i in range(len(first) - 1, -1, -1)] == first[::-1]  # redrawn from packed copies
    assert [fresh[i] for i in range(len(first))] == first
    assert stream[5000] == SubnetStream([3, 300, 7], seed=4)[5000]


def test_the_engine_gives_the_collector_back():
    plan = make_plan(blocks=4, candidates=2, stages=2)
    from naspipe.sim.costs import uniform_costs

    costs = uniform_costs(infos(plan), HW, 8, 1)
    assert gc.isenabled()
    simulate(plan, "csp", 10, PolicyOptions(max_inflight=4), costs, True)
    assert gc.isenabled()
    gc.disable()
    try:
        simulate(plan, "csp", 10, PolicyOptions(max_inflight=4), costs, True)
        assert not gc.isenabled()
    finally:
        gc.enable()
