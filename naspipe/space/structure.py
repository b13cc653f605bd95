"""The shape of a supernet, in pure Python: choice blocks, candidates, shared layers, layer ids.

A supernet is a chain of *positions*: shared prefix layers (embedding, stem), then ``m``
choice blocks with ``n_b`` candidate layers each, then shared suffix layers (head). A
subnet picks one candidate per block, so it runs exactly one layer at every position.

Layer ids are global and dense: prefix layers first, then block ``b``'s candidates in
order, then suffix layers. The scheduling core, the partitioner and the simulator only ever
see this structure; tensors never enter here.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from naspipe.subnet import Subnet

if TYPE_CHECKING:
    import numpy as np

SharedPolicy = Literal["frozen", "causal", "windowed"]
SHARED_POLICIES: tuple[str, ...] = ("frozen", "causal", "windowed")


@dataclass(frozen=True)
class SpaceStructure:
    """Names of the operation at every layer, arranged as prefix, blocks, suffix.

    ``shared_policy`` says whether shared layers are trained: ``frozen`` keeps them at their
    seeded init (the NASPipe artifact's choice), ``causal`` trains them as layers that every
    subnet uses (correct under CSP, but it serialises the pipeline), ``windowed`` trains them
    once per window of ``W`` consecutive subnets from a version fixed by subnet index (see
    :mod:`naspipe.scheduling.windows`: no serialisation, the choice layers keep CSP).
    """

    name: str
    prefix: tuple[str, ...]
    blocks: tuple[tuple[str, ...], ...]
    suffix: tuple[str, ...]
    shared_policy: SharedPolicy = "frozen"
    _block_offsets: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _num_layers: int = field(init=False, repr=False, compare=False)  # computed once: on the scheduler's hot path
    _block_sizes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _shared_ids: tuple[tuple[int, ...], tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.blocks or any(not b for b in self.blocks):
            raise ValueError(f"space {self.name!r}: every choice block needs at least one candidate")
        if self.shared_policy not in SHARED_POLICIES:
            raise ValueError(f"shared_policy must be one of {SHARED_POLICIES}, got {self.shared_policy!r}")
        offsets, next_id = [], len(self.prefix)
        for block in self.blocks:
            offsets.append(next_id)
            next_id += len(block)
        object.__setattr__(self, "_block_offsets", tuple(offsets))
        object.__setattr__(self, "_num_layers", next_id + len(self.suffix))
        object.__setattr__(self, "_block_sizes", tuple(len(b) for b in self.blocks))
        object.__setattr__(self, "_shared_ids", (tuple(range(len(self.prefix))),
                                                 tuple(range(next_id, next_id + len(self.suffix)))))

    @property
    def choices_per_block(self) -> tuple[int, ...]:
        return tuple(len(b) for b in self.blocks)

    @property
    def num_layers(self) -> int:
        return self._num_layers

    @property
    def num_positions(self) -> int:
        """Layers a subnet runs: one per prefix layer, block and suffix layer."""
        return len(self.prefix) + len(self.blocks) + len(self.suffix)

    def layer_id(self, block: int, choice: int) -> int:
        if not 0 <= choice < len(self.blocks[block]):
            raise IndexError(f"block {block} has {len(self.blocks[block])} candidates, not {choice + 1}")
        return self._block_offsets[block] + choice

    def position_layers(self, subnet: Subnet) -> tuple[int, ...]:
        """The layer the subnet runs at each position, in execution order."""
        if len(subnet.choices) != len(self.blocks):
            raise ValueError(f"subnet {subnet} has {len(subnet.choices)} choices, space has {len(self.blocks)} blocks")
        choices = subnet.choices
        if choices and (min(choices) < 0 or not all(map(operator.lt, choices, self._block_sizes))):
            for b, c in enumerate(choices):
                self.layer_id(b, c)  # raises, naming the first block out of range
        prefix, suffix = self._shared_ids
        return prefix + tuple(map(operator.add, self._block_offsets, choices)) + suffix

    def blocks_at(self, positions: range) -> slice:
        """The choice blocks among ``positions``: the slice of a subnet's choices they read."""
        first, count = len(self.prefix), len(self.blocks)
        lo = min(max(positions.start - first, 0), count)
        return slice(lo, min(max(positions.stop - first, lo), count))

    def layer_rows(self, choices: np.ndarray, positions: range | None = None) -> np.ndarray:
        """:meth:`position_layers` of many subnets at once, at ``positions`` (all by default).

        Row ``i`` comes from ``choices[i]``, one subnet's choices at :meth:`blocks_at` ``(positions)``
        (``SubnetStream.choice_rows`` reads them so), as int64 layer ids in position order. The
        simulator's cost table and CSP's registration read a block of subnets at a time this way;
        choices are not range-checked (the stream draws them in range)."""
        import numpy as np  # here: the structure is read by commands that load no numpy

        positions = range(self.num_positions) if positions is None else positions
        prefix, suffix = self._shared_ids
        first_suffix = self.num_positions - len(suffix)
        rows = choices.shape[0]
        offsets = np.asarray(self._block_offsets[self.blocks_at(positions)], dtype=np.int64)
        parts = [choices.reshape(rows, -1) + offsets]
        before = [prefix[p] for p in positions if p < len(prefix)]
        after = [suffix[p - first_suffix] for p in positions if p >= first_suffix]
        if before:
            parts.insert(0, np.broadcast_to(np.asarray(before, dtype=np.int64), (rows, len(before))))
        if after:
            parts.append(np.broadcast_to(np.asarray(after, dtype=np.int64), (rows, len(after))))
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]

    def is_shared(self, layer: int) -> bool:
        return layer < len(self.prefix) or layer >= self.num_layers - len(self.suffix)

    def is_trainable(self, layer: int) -> bool:
        """Choice layers always train; shared layers train under ``causal`` and ``windowed``."""
        return not self.is_shared(layer) or self.shared_policy != "frozen"

    def is_windowed(self, layer: int) -> bool:
        """A shared layer trained by the window rule (not by the per-layer CSP version rule)."""
        return self.shared_policy == "windowed" and self.is_shared(layer)

    def op_name(self, layer: int) -> str:
        if layer < len(self.prefix):
            return self.prefix[layer]
        if layer >= self.num_layers - len(self.suffix):
            return self.suffix[layer - (self.num_layers - len(self.suffix))]
        block = self._candidate_block(layer)
        return self.blocks[block][layer - self._block_offsets[block]]

    def block_of(self, layer: int) -> int | None:
        """The choice block of a candidate layer; None for shared layers."""
        return None if self.is_shared(layer) else self._candidate_block(layer)

    def _candidate_block(self, layer: int) -> int:
        """The block holding candidate ``layer`` (binary search: the last offset <= ``layer``)."""
        lo, hi = 0, len(self._block_offsets) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._block_offsets[mid] <= layer:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def position_of(self, layer: int) -> int:
        """The position (0 .. num_positions-1) where ``layer`` can run."""
        if layer < len(self.prefix):
            return layer
        block = self.block_of(layer)
        if block is not None:
            return len(self.prefix) + block
        return len(self.prefix) + len(self.blocks) + (layer - (self.num_layers - len(self.suffix)))
