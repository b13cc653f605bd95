"""The layout of a subnet's parts over a stage's replicas (issue 42): contiguous ranges in replica order.

The property that matters is the last one below: walking the chain and each replica's parts
visits every part exactly once, in part order, so an ordered chain of partial sums is the
sequential sum's own association.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.scheduling.replicas import ReplicaLayout

FIXED = settings(derandomize=True, database=None, deadline=None, max_examples=200, print_blob=False)


@st.composite
def layouts(draw: st.DrawFn) -> ReplicaLayout:
    replicas = draw(st.integers(1, 12))
    return ReplicaLayout(replicas * draw(st.integers(1, 12)), replicas)


def test_four_parts_on_two_replicas() -> None:
    layout = ReplicaLayout(4, 2)
    assert layout.parts_per_replica == 2
    assert [list(layout.parts(r)) for r in layout.chain()] == [[0, 1], [2, 3]]
    assert [layout.owner(j) for j in range(4)] == [0, 0, 1, 1]
    assert (layout.previous(0), layout.next(0), layout.previous(1), layout.next(1)) == (None, 1, 0, None)
    assert layout.last == 1


def test_one_replica_owns_every_part() -> None:
    layout = ReplicaLayout(3, 1)
    assert list(layout.parts(0)) == [0, 1, 2]
    assert layout.chain() == (0,)
    assert layout.previous(0) is None and layout.next(0) is None and layout.last == 0


@pytest.mark.parametrize(("m", "r"), [(4, 3), (6, 4), (2, 3), (1, 2), (5, 10)])
def test_replicas_must_divide_the_parts(m: int, r: int) -> None:
    with pytest.raises(ValueError, match=rf"^replicas = {r} must divide micro_batches = {m}: ") as info:
        ReplicaLayout(m, r)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("m", "r"), [(0, 1), (4, 0), (-2, 1), (4, -2), (2.0, 1), (4, True)])
def test_counts_must_be_positive_integers(m: object, r: object) -> None:
    with pytest.raises(ValueError, match=r"must be a positive integer") as info:
        ReplicaLayout(m, r)  # type: ignore[arg-type]
    assert str(m) in str(info.value) and str(r) in str(info.value)


@pytest.mark.parametrize("replica", [-1, 2, True, 1.0])
def test_unknown_replica(replica: object) -> None:
    layout = ReplicaLayout(4, 2)
    for ask in (layout.parts, layout.previous, layout.next):
        with pytest.raises(ValueError, match="is not one of the 2 replicas"):
            ask(replica)  # type: ignore[arg-type]


@pytest.mark.parametrize("part", [-1, 4, False, 0.0])
def test_unknown_part(part: object) -> None:
    with pytest.raises(ValueError, match="is not one of the 4 parts"):
        ReplicaLayout(4, 2).owner(part)  # type: ignore[arg-type]


@FIXED
@given(layouts())
def test_chain_then_parts_is_part_order(layout: ReplicaLayout) -> None:
    visited = [j for r in layout.chain() for j in layout.parts(r)]
    assert visited == list(range(layout.micro_batches))


@FIXED
@given(layouts())
def test_owner_and_ranges_agree(layout: ReplicaLayout) -> None:
    for r in range(layout.replicas):
        parts = layout.parts(r)
        assert len(parts) == layout.parts_per_replica
        assert all(layout.owner(j) == r for j in parts)


@FIXED
@given(layouts())
def test_the_chain_links_neighbours(layout: ReplicaLayout) -> None:
    chain = layout.chain()
    assert chain[0] == 0 and chain[-1] == layout.last
    for before, after in zip(chain, chain[1:], strict=False):
        assert layout.next(before) == after and layout.previous(after) == before
    assert layout.previous(chain[0]) is None and layout.next(layout.last) is None


def test_imports_without_torch() -> None:
    """The scheduling core never loads torch; this module is part of it."""
    code = "import sys, naspipe.scheduling.replicas; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
