"""Subnets and the seeded subnet stream (SPOS uniform sampling).

Step ``i`` of supernet training trains subnet ``SN_i``. The stream is a pure function of the
seed and the number of choices per block, so every stage process can regenerate any
``SN_i`` on its own: no stage count, timing or process ever changes it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from naspipe.seeding import derive_seed


@dataclass(frozen=True, slots=True)
class Subnet:
    """One candidate index per choice block, e.g. ``Subnet((0, 3, 1))``."""

    choices: tuple[int, ...]

    def __str__(self) -> str:
        return "[" + ",".join(map(str, self.choices)) + "]"


class SubnetStream:
    """Random-access view of the infinite stream ``SN_0, SN_1, ...`` for one seed.

    Subnets are drawn in order from one ``random.Random`` seeded by (seed, "subnets") and
    memoised, so ``stream[i]`` is the same in every process. Iterating yields ``(i, SN_i)``
    from ``start`` on, producer-consumer style.
    """

    def __init__(self, choices_per_block: Sequence[int], seed: int) -> None:
        if not choices_per_block or min(choices_per_block) < 1:
            raise ValueError(f"every block needs at least one candidate, got {list(choices_per_block)}")
        self._choices = tuple(choices_per_block)
        self._rng = random.Random(derive_seed(seed, "subnets"))
        self._drawn: list[Subnet] = []

    def __getitem__(self, index: int) -> Subnet:
        if index < 0:
            raise IndexError(f"subnet index must be >= 0, got {index}")
        while len(self._drawn) <= index:
            self._drawn.append(Subnet(tuple(self._rng.randrange(n) for n in self._choices)))
        return self._drawn[index]

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
