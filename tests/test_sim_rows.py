"""Block-wise reads that replace per-subnet ones on the simulator's hot path (issue 22, fifth pass).

CSP registers each subnet's layers from :class:`StageRows` (a chunk of subnets per array operation),
the cost table reads choices with :meth:`SubnetStream.choice_rows`, and constant cost columns share one
float: each must give exactly what the per-subnet path gives.
"""

from __future__ import annotations

import numpy as np
import pytest

from naspipe.partition import balanced_partition
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.registration import CHUNK, CHUNK_MASK, CHUNK_SHIFT, StageRows, stage_rows
from naspipe.sim.tables import flat
from naspipe.subnet import FixedSubnetStream, Subnet, SubnetStream
from tests.conftest import make_plan, make_structure


@pytest.mark.parametrize("shared_policy", ["frozen", "causal", "windowed"])
@pytest.mark.parametrize(("blocks", "candidates", "stages"), [(7, 2, 1), (7, 3, 4), (12, 5, 8), (3, 4, 5)])
def test_stage_rows_are_the_plans_versioned_slices(shared_policy, blocks, candidates, stages):
    plan = make_plan(blocks, candidates, stages, seed=blocks + stages, shared_policy=shared_policy)
    rows = [StageRows(plan, k) for k in range(stages)]
    for y in [*range(0, 2 * CHUNK + 7), 5 * CHUNK - 1, 5 * CHUNK]:
        for k in range(stages):
            got = rows[k].chunks.get(y >> CHUNK_SHIFT) or rows[k].chunk(y >> CHUNK_SHIFT)
            assert got[y & CHUNK_MASK] == list(plan.versioned_slices(y)[k]), (y, k)


@pytest.mark.parametrize(("blocks", "candidates"), [(7, 2), (12, 5)])
def test_layer_rows_are_position_layers_at_every_range_of_positions(blocks, candidates):
    structure = make_structure(blocks, candidates, "causal")
    stream = SubnetStream(structure.choices_per_block, blocks)
    count = structure.num_positions
    for lo in range(count + 1):
        for hi in range(lo, count + 1):
            positions = range(lo, hi)
            got = structure.layer_rows(stream.choice_rows(3, 40, structure.blocks_at(positions)), positions)
            want = [list(structure.position_layers(stream[y])[lo:hi]) for y in range(3, 43)]
            assert got.dtype == np.int64 and got.tolist() == want, positions


def test_stage_rows_follow_an_uneven_partition_and_keep_a_few_chunks():
    structure = make_structure(9, 3, "causal")
    plan = PipelinePlan(structure, balanced_partition([1.0, 5.0, *[1.0] * 8, 4.0], 3),
                        SubnetStream(structure.choices_per_block, 2))
    rows = StageRows(plan, 2)
    for index in range(8):
        rows.chunk(index)
    assert sorted(rows.chunks) == [4, 5, 6, 7]
    assert rows.chunk(0)[3] == list(plan.versioned_slices(3)[2])


def test_per_subnet_plans_take_the_plans_own_slices():
    plan = make_plan(6, 3, 3)
    mirrored = PipelinePlan.per_subnet(plan.structure, plan.partition, plan.stream, [1.0] * plan.structure.num_layers)
    assert stage_rows(mirrored, 1) is None and stage_rows(plan, 1) is not None


@pytest.mark.parametrize("candidates", [[3, 20, 7], [3, 300, 7], [24] * 5])
def test_choice_rows_are_the_subnets_choices(candidates):
    stream, fresh = SubnetStream(candidates, seed=5), SubnetStream(candidates, seed=5)
    first, count = SubnetStream.BLOCK - 10, SubnetStream.BLOCK + 30  # across three stream blocks
    rows = stream.choice_rows(first, count)
    assert rows.dtype == np.int64 and rows.shape == (count, len(candidates))
    assert rows.tolist() == [list(fresh[y].choices) for y in range(first, first + count)]
    assert stream.choice_rows(first, count, slice(1, 3)).tolist() == rows[:, 1:3].tolist()
    assert stream.choice_rows(7, 0).shape == (0, len(candidates))
    with pytest.raises(IndexError, match="start below 0"):
        stream.choice_rows(-1, 3)


def test_a_fixed_stream_repeats_its_subnet():
    stream = FixedSubnetStream([3, 4], Subnet((2, 1)))
    assert stream.choice_rows(10, 3).tolist() == [[2, 1]] * 3
    assert stream.choice_rows(0, 2, slice(1, 2)).tolist() == [[1], [1]]


@pytest.mark.parametrize("values", [[1.0] * 6, [0.0] * 4, [0.0, -0.0, 0.0], [1.0, 2.0, 1.0], [np.nan] * 3, []])
def test_flat_keeps_every_value_bit_for_bit(values):
    array = np.array(values, dtype=np.float64).reshape(-1, 1)
    out = flat(array)
    assert [x.hex() for x in out] == [float(x).hex() for x in array.ravel()]
    assert all(type(x) is float for x in out)
