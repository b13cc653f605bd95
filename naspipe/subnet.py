"""Subnets and the seeded subnet stream (SPOS uniform sampling).

Step ``i`` of supernet training trains subnet ``SN_i``. The stream is a pure function of the
seed and the number of choices per block, so every stage process can regenerate any
``SN_i`` on its own: no stage count, timing or process ever changes it.
"""

from __future__ import annotations

import operator
import random
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from naspipe.seeding import derive_seed

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class Subnet:
    """One candidate index per choice block, e.g. ``Subnet((0, 3, 1))``."""

    choices: tuple[int, ...]

    def __str__(self) -> str:
        return "[" + ",".join(map(str, self.choices)) + "]"


class SubnetStream:
    """Random-access view of the infinite stream ``SN_0, SN_1, ...`` for one seed.

    Subnets are drawn in order from one ``random.Random`` seeded by (seed, "subnets"), so
    ``stream[i]`` is the same in every process. Iterating yields ``(i, SN_i)`` from ``start``
    on, producer-consumer style.

    Why blocks: a long run (the paper trains hundreds of thousands of subnets) must not keep
    every subnet it ever drew. The generator's state is kept at the start of every block of
    :data:`BLOCK` subnets (a few KiB each), and only the most recently used blocks are held
    decoded; an old block is redrawn from its saved state, giving the very same subnets.
    """

    BLOCK = 1024
    CACHED_BLOCKS = 8
    PACKED_BYTES = 64 << 20  # every drawn block kept packed (a byte per choice) up to this many bytes


    def __init__(self, choices_per_block: Sequence[int], seed: int) -> None:
        if not choices_per_block or min(choices_per_block) < 1:
            raise ValueError(f"every block needs at least one candidate, got {list(choices_per_block)}")
        self._choices = tuple(choices_per_block)
        self._sizes = tuple((n, n.bit_length()) for n in map(operator.index, self._choices))  # randrange's k bits
        self._rng = random.Random(derive_seed(seed, "subnets"))
        self._starts: list[object] = [self._rng.getstate()]  # generator state at each block's start
        self._blocks: OrderedDict[int, tuple[Subnet, ...]] = OrderedDict()
        # Blocks drawn before, a byte per choice (when every block has at most 256 candidates): a run reads
        # the stream several times (the simulator's engine, memory model and bound each walk it whole), and
        # unpacking costs a fraction of redrawing (~170 generator calls per subnet of 126 blocks).
        self._packed: dict[int, bytes] = {}
        self._packed_left = self.PACKED_BYTES if max(self._choices) <= 256 else 0
        self._alike = len(set(self._sizes)) == 1 and self._sizes[0][1] <= 32  # one draw per generator output

    def __getitem__(self, index: int) -> Subnet:
        if index < 0:
            raise IndexError(f"subnet index must be >= 0, got {index}")
        block, offset = divmod(index, self.BLOCK)
        cached = self._blocks.get(block)
        if cached is None:
            cached = self._draw_block(block)
        else:
            self._blocks.move_to_end(block)
        return cached[offset]

    def _draw_block(self, block: int) -> tuple[Subnet, ...]:
        packed = self._packed.get(block)
        if packed is not None:
            width = len(self._choices)
            drawn = tuple([Subnet(tuple(packed[i : i + width])) for i in range(0, len(packed), width)])
        else:
            while len(self._starts) <= block:  # walk forward to learn the state at the block's start
                self._draw_from(len(self._starts) - 1)
            drawn = self._draw_from(block)
            self._pack(block, drawn)
        self._blocks[block] = drawn
        while len(self._blocks) > self.CACHED_BLOCKS:
            self._blocks.popitem(last=False)
        return drawn

    def _pack(self, block: int, drawn: tuple[Subnet, ...]) -> None:
        """Keep ``block``'s choices packed while the budget lasts (redrawing it then costs nothing)."""
        size = len(drawn) * len(self._choices)
        if size <= self._packed_left:
            self._packed_left -= size
            self._packed[block] = b"".join([bytes(subnet.choices) for subnet in drawn])

    def _draw_from(self, block: int) -> tuple[Subnet, ...]:
        """Draw block ``block`` from its saved start state, recording the next block's start."""
        self._rng.setstate(self._starts[block])  # type: ignore[arg-type]
        drawn = self._draw_alike() if self._alike else self._draw_each()
        if len(self._starts) == block + 1:
            self._starts.append(self._rng.getstate())
        return drawn

    def _draw_each(self) -> tuple[Subnet, ...]:
        """:data:`BLOCK` subnets from the generator's state, one ``randrange`` per choice (inlined)."""
        getrandbits, sizes = self._rng.getrandbits, self._sizes
        drawn = []
        for _ in range(self.BLOCK):  # randrange(n) per block, inlined (two Python calls per choice otherwise):
            row = []
            for n, bits in sizes:  # CPython's _randbelow_with_getrandbits: k-bit draws until one is below n
                r = getrandbits(bits)
                while r >= n:
                    r = getrandbits(bits)
                row.append(r)
            drawn.append(Subnet(tuple(row)))
        return tuple(drawn)

    def _draw_alike(self) -> tuple[Subnet, ...]:
        """:meth:`_draw_each` when every block has the same ``n`` candidates (``n <= 2**32``), without a Python
        step per draw: the same subnets and the same generator state after.

        Each ``getrandbits(k)`` with ``k <= 32`` takes one 32-bit output of the generator and keeps its top
        ``k`` bits, and ``getrandbits(32 * m)`` returns ``m`` outputs, the first in the lowest 32 bits. So the
        outputs are drawn in bulk, the draws below ``n`` are the choices in order (a rejected draw only moves
        on to the next output), and the generator is then set to just after the last output used. At 64
        stages x 100,000 subnets of 126 blocks the stream's Python loop was about 4% of the engine."""
        import numpy as np  # here: the stream is imported by commands that never draw a block

        n, bits = self._sizes[0]
        rng, total = self._rng, self.BLOCK * len(self._sizes)
        start = rng.getstate()
        outputs = total * (1 << bits) // n + total // 16 + 64  # acceptance n / 2**bits, over 1/2
        while True:
            raw = rng.getrandbits(32 * outputs).to_bytes(4 * outputs, "little")
            draws = np.frombuffer(raw, dtype="<u4") >> np.uint32(32 - bits)
            accepted = np.flatnonzero(draws < n)
            if len(accepted) >= total:
                break
            rng.setstate(start)
            outputs *= 2
        rng.setstate(start)
        rng.getrandbits(32 * (int(accepted[total - 1]) + 1))  # the generator just after the last output used
        rows = draws[accepted[:total]].reshape(self.BLOCK, len(self._sizes)).tolist()
        return tuple([Subnet(tuple(row)) for row in rows])

    def choice_rows(self, first: int, count: int, columns: slice = slice(None)) -> np.ndarray:
        """Row ``i``: ``self[first + i].choices[columns]``, as a ``(count, blocks)`` int64 array.

        Why: the simulator reads the stream a block of subnets at a time (its cost table, CSP's
        registration on every stage), and a :class:`Subnet` per row costs more than the row's use
        there. Packed blocks are read in place, without decoding them."""
        import numpy as np  # here: the stream is imported by commands that never draw a block

        if first < 0 or count < 0:
            raise IndexError(f"subnet rows [{first}, {first + count}) start below 0 or run backwards")
        width = len(self._choices)
        parts = []
        y, stop = first, first + count
        while y < stop:
            block, offset = divmod(y, self.BLOCK)
            take = min(stop - y, self.BLOCK - offset)
            packed = self._packed.get(block)
            if packed is None:
                drawn = self._blocks.get(block) or self._draw_block(block)
                packed = self._packed.get(block)
            rows: np.ndarray
            if packed is not None:
                rows = np.frombuffer(packed, dtype=np.uint8).reshape(self.BLOCK, width)[offset : offset + take]
            else:
                rows = np.array([s.choices for s in drawn[offset : offset + take]], dtype=np.int64).reshape(take, width)
            parts.append(rows[:, columns].astype(np.int64))
            y += take
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros((0, width), dtype=np.int64)[:, columns]

    def iterate(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, Subnet]]:
        index = start
        while stop is None or index < stop:
            yield index, self[index]
            index += 1

    def __iter__(self) -> Iterator[tuple[int, Subnet]]:
        return self.iterate()


class FixedSubnetStream(SubnetStream):
    """The stream of a retraining run: every step trains the same architecture.

    Retraining a searched subnet on the same runtime (pipeline, scheduler, checkpoints) as
    supernet training; under CSP consecutive steps then share every layer, so the pipeline
    serialises, exactly as the causal rule demands.
    """

    def __init__(self, choices_per_block: Sequence[int], subnet: Subnet) -> None:
        super().__init__(choices_per_block, 0)
        if len(subnet.choices) != len(choices_per_block) or any(
                not 0 <= c < n for c, n in zip(subnet.choices, choices_per_block, strict=True)):
            raise ValueError(f"subnet {subnet} does not fit blocks with {list(choices_per_block)} candidates")
        self._subnet = subnet

    def __getitem__(self, index: int) -> Subnet:
        if index < 0:
            raise IndexError(f"subnet index must be >= 0, got {index}")
        return self._subnet

    def choice_rows(self, first: int, count: int, columns: slice = slice(None)) -> np.ndarray:
        import numpy as np

        if first < 0 or count < 0:
            raise IndexError(f"subnet rows [{first}, {first + count}) start below 0 or run backwards")
        return np.tile(np.asarray(self._subnet.choices[columns], dtype=np.int64), (count, 1))
