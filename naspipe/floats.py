"""Float arithmetic that gives the same bits on every supported Python.

The simulator's schedules, its outputs and the partitions made from profiled costs are compared bit for bit
(the golden dumps, ``naspipe compare``); a total that depends on the Python version would break that on a
machine with a newer one (the GPU machine runs 3.12: docs/gpu.md).
"""

from __future__ import annotations

from collections.abc import Iterable


def plain_sum(values: Iterable[float]) -> float:
    """Left-to-right IEEE addition from 0.0, which is what ``sum`` does up to Python 3.11.

    Python 3.12's ``sum`` compensates rounding (Neumaier), so its totals can differ in the last
    bit from the cost tables' position-by-position accumulation (:mod:`naspipe.sim.tables`),
    and a simulated schedule would depend on the Python version. Seen on 3.12: 1.1140724946695095e-04
    against 1.1140724946695097e-04.
    """
    total = 0.0
    for value in values:
        total += value
    return total
