"""What CSP registers on a stage of a static plan: each subnet's versioned layers there, a chunk at a time.

CSP registers every subnet once on every stage (64 stages x 100,000 subnets: 6.4 M registrations
at the simulator's scale). :meth:`PipelinePlan.versioned_slices` answers one subnet at a time for
all stages (its layers per position, cut per stage, filtered; ~40 us a subnet, most of the work
for stages other than the asking one, then a cache lookup per stage). With one partition for
every subnet a stage's versioned positions are fixed, so its layers for a chunk of subnets are a
few columns of the stream's choices plus fixed offsets: one array operation per chunk and stage
(:meth:`SubnetStream.choice_rows`), the same layer ids in the same (position) order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from naspipe.scheduling.plan import PipelinePlan

if TYPE_CHECKING:
    import numpy as np

CHUNK_SHIFT = 8
CHUNK = 1 << CHUNK_SHIFT  # subnets per chunk
CHUNK_MASK = CHUNK - 1
KEEP = 4  # chunks kept per stage: the subnets in flight span a few hundred ids


class StageRows:
    """``chunk(c)[y & CHUNK_MASK] == list(plan.versioned_slices(y)[stage])`` for ``y >> CHUNK_SHIFT == c``.

    Only for static plans (one partition): :func:`stage_rows` says whether it applies."""

    def __init__(self, plan: PipelinePlan, stage: int) -> None:
        structure = plan.structure
        bounds = plan.partition.bounds
        lo, hi = bounds[stage], bounds[stage + 1]
        first_choice, choices = len(structure.prefix), len(structure.blocks)
        self._stream = plan.stream
        self._lo = max(lo, first_choice) - first_choice  # the stage's choice columns [_lo, _hi)
        self._hi = max(min(hi, first_choice + choices) - first_choice, self._lo)
        self._offsets = [structure.layer_id(b, 0) for b in range(self._lo, self._hi)]
        skip = plan.windowed

        def versioned(lid: int) -> bool:
            return structure.is_trainable(lid) and lid not in skip

        # the stage's shared positions' layers (fixed), before and after its choice columns
        before = list(range(lo, min(hi, first_choice)))  # a prefix position's layer id is the position
        last = structure.num_layers - structure.num_positions  # a suffix position's layer id is the position + last
        after = [last + p for p in range(max(lo, first_choice + choices), hi)]
        self._before = [lid for lid in before if versioned(lid)]
        self._after = [lid for lid in after if versioned(lid)]
        self.chunks: dict[int, list[list[int]]] = {}

    def chunk(self, index: int) -> list[list[int]]:
        """The rows of subnets ``[index * CHUNK, (index + 1) * CHUNK)``, kept for the next lookups."""
        rows = self._build(index)
        chunks = self.chunks
        chunks[index] = rows
        if len(chunks) > KEEP:
            del chunks[min(chunks)]
        return rows

    def _build(self, index: int) -> list[list[int]]:
        import numpy as np  # here: the policies are imported by commands that never register a subnet

        columns: np.ndarray = self._stream.choice_rows(index * CHUNK, CHUNK, slice(self._lo, self._hi))
        layers = columns + np.asarray(self._offsets, dtype=np.int64)
        if self._before or self._after:
            fixed = (np.broadcast_to(np.asarray(ids, dtype=np.int64), (CHUNK, len(ids)))
                     for ids in (self._before, self._after))
            before, after = fixed
            layers = np.concatenate([before, layers, after], axis=1)
        return layers.tolist()  # type: ignore[no-any-return]


def stage_rows(plan: PipelinePlan, stage: int) -> StageRows | None:
    """The stage's :class:`StageRows` where they apply (a static plan, a stream that gives rows), else None."""
    if plan.mirrored or not hasattr(plan.stream, "choice_rows"):
        return None
    return StageRows(plan, stage)
