"""What CSP registers on a stage of a static plan: each subnet's versioned layers there, a chunk at a time.

CSP registers every subnet once on every stage (64 stages x 100,000 subnets: 6.4 M registrations
at the simulator's scale). :meth:`PipelinePlan.versioned_slices` answers one subnet at a time for
all stages (its layers per position, cut per stage, filtered; ~40 us a subnet, most of the work
for stages other than the asking one, then a cache lookup per stage). With one partition for
every subnet a stage's versioned positions are fixed, so its layers for a chunk of subnets are a
few columns of the stream's choices turned into layer ids: one array operation per chunk and stage
(:meth:`SubnetStream.choice_rows`, :meth:`SpaceStructure.layer_rows`), the same layer ids in the same
(position) order.
"""

from __future__ import annotations

from naspipe.scheduling.plan import PipelinePlan

CHUNK_SHIFT = 8
CHUNK = 1 << CHUNK_SHIFT  # subnets per chunk
CHUNK_MASK = CHUNK - 1
KEEP = 4  # chunks kept per stage: the subnets in flight span a few hundred ids


class StageRows:
    """``chunk(c)[y & CHUNK_MASK] == list(plan.versioned_slices(y)[stage])`` for ``y >> CHUNK_SHIFT == c``.

    Only for static plans (one partition): :func:`stage_rows` says whether it applies."""

    def __init__(self, plan: PipelinePlan, stage: int) -> None:
        bounds = plan.partition.bounds
        self._structure, self._stream, self._windowed = plan.structure, plan.stream, plan.windowed
        self._positions = range(bounds[stage], bounds[stage + 1])
        self._columns = self._structure.blocks_at(self._positions)  # the stage's choice columns
        self._keep: list[int] | None = None  # the versioned ones among the stage's positions (first chunk)
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
        columns = self._stream.choice_rows(index * CHUNK, CHUNK, self._columns)
        layers = self._structure.layer_rows(columns, self._positions)
        if self._keep is None:  # a position is versioned or not whatever its layer (only shared ones are not)
            structure, skip = self._structure, self._windowed
            self._keep = [j for j, lid in enumerate(layers[0].tolist())
                          if structure.is_trainable(lid) and lid not in skip]
        if len(self._keep) < layers.shape[1]:
            layers = layers[:, self._keep]
        return layers.tolist()  # type: ignore[no-any-return]


def stage_rows(plan: PipelinePlan, stage: int) -> StageRows | None:
    """The stage's :class:`StageRows` where they apply (a static plan, a stream that gives rows), else None."""
    if plan.mirrored or not hasattr(plan.stream, "choice_rows"):
        return None
    return StageRows(plan, stage)
