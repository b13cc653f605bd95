"""The simulator's numbers do not depend on how the Python in use rounds ``sum``.

Python 3.12 made the built-in ``sum`` of floats compensated (Neumaier): its totals can differ in the
last bit from the left-to-right addition of 3.11. The golden dump was written on 3.11, and on the
GPU machine (Python 3.12) three of its sampled configurations differed in ``exec_s`` and
``swap_wait_s`` in the last bit. The simulator adds floats with :func:`naspipe.floats.plain_sum`
where a total reaches its outputs; this test runs a third of the golden grid with the
built-in ``sum`` replaced by a compensated one (3.12's algorithm), so a new float ``sum`` that
reaches an output fails here on any Python, not only on the machine that has the newer one.
"""

from __future__ import annotations

import builtins
import itertools
import math
from collections.abc import Iterable
from types import ModuleType

import pytest

from tests.conftest import load_benchmark
from tests.test_sim_golden import reference


def compensated_sum(values: Iterable[float], /, start: float = 0) -> float:
    """CPython 3.12's ``sum`` for a run of floats: the total ``f`` plus a running compensation ``c``
    (Neumaier), integers added exactly until the first float, as CPython's fast paths do."""
    items = iter(values)
    total: float = start
    for x in items:
        if isinstance(x, float) or isinstance(total, float):
            f, c = float(total), 0.0
            for y in itertools.chain((x,), items):
                y = float(y)
                t = f + y
                c += (f - t) + y if math.fabs(f) >= math.fabs(y) else (y - t) + f
                f = t
            return f + c if c and math.isfinite(c) else f
        total = total + x
    return total


def test_the_compensated_sum_is_what_python_3_12_gives():
    """The stand-in rounds as 3.12 does on the seen case, and differs from 3.11's left-to-right addition."""
    values = [0.1] * 10
    left_to_right = 0.0
    for v in values:
        left_to_right += v
    assert compensated_sum(values) == 1.0 != left_to_right
    assert compensated_sum([1, 2, 3]) == 6 and isinstance(compensated_sum([1, 2, 3]), int)
    assert compensated_sum([1e100, 1.0, -1e100]) == 1.0  # 3.12: 1.0; 3.11: 0.0


def golden() -> ModuleType:
    return load_benchmark("sim_golden")


def test_a_sample_of_the_golden_grid_is_the_same_with_a_compensated_sum(monkeypatch: pytest.MonkeyPatch):
    g = golden()
    sample = g.select(g.grid(), 3, None)  # a third of the grid: every system, stage count and cost model
    assert {c.costs for c in sample} == {"uniform", "profile", "analytic"}
    with monkeypatch.context() as patched:
        patched.setattr(builtins, "sum", compensated_sum)
        got = g.run(sample, None)
    assert g.check(reference(), got) == []


def test_profiled_position_costs_are_the_same_with_a_compensated_sum(monkeypatch: pytest.MonkeyPatch):
    """A block's cost is the mean of its candidates' (the partitioner's input): with costs whose
    compensated total differs from the left-to-right one, the means do not change with ``sum``."""
    from naspipe.profile.costs import position_means
    from naspipe.space import make_shape

    structure = make_shape("toy").structure
    costs = [(0.1, 0.2, 0.3)[lid % 3] for lid in range(structure.num_layers)]  # 0.1 + 0.2 + 0.3: the totals differ
    assert compensated_sum([0.1, 0.2, 0.3]) != 0.1 + 0.2 + 0.3
    plain = position_means(structure, costs.__getitem__)
    monkeypatch.setattr(builtins, "sum", compensated_sum)
    assert position_means(structure, costs.__getitem__) == plain
