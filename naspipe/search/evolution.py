"""Single-path one-shot search: SPOS/NNI-style evolution and its random-sampling baseline (pure Python).

Evolution (Guo et al., SPOS, 2020; NNI's ``EvolutionSearch``): generation 0 is
``population`` distinct random subnets. Every later generation takes the ``parents``
best subnets scored so far (over all generations) and makes ``crossover`` children by
uniform crossover of two random parents (each block from either parent) and the rest of
the population by mutation of one random parent (each block redrawn with probability
``mutation_prob``). A child already scored (or already in this generation) is redrawn, so
no candidate is ever evaluated twice; when the space runs out of unseen subnets the search
stops early.

Random search scores ``population x generations`` distinct uniformly drawn subnets, the
same number of evaluations, grouped in generations of ``population`` for the plots.

Everything is drawn from one ``random.Random`` seeded by (seed, "search"), and ties between
equal scores are broken by evaluation order, so the candidates, their order and the best
subnet are a pure function of the settings and the score function.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from naspipe.errors import UsageError
from naspipe.seeding import derive_seed
from naspipe.subnet import Subnet

METHODS: tuple[str, ...] = ("evolution", "random")


@dataclass(frozen=True)
class SearchSettings:
    """The search's knobs; ``crossover`` and ``parents`` default to half the population."""

    method: str
    seed: int
    population: int = 16
    generations: int = 8
    mutation_prob: float = 0.1
    crossover: int | None = None
    parents: int | None = None

    def checked(self) -> SearchSettings:
        """These settings with defaults filled in, or a one-line error naming the bad option."""
        if self.method not in METHODS:
            raise UsageError(f"--method {self.method!r}: unknown method; choose one of {', '.join(METHODS)}")
        if self.population < 1 or self.generations < 1:
            raise UsageError(f"--population ({self.population}) and --generations ({self.generations}) must be >= 1")
        if not 0.0 <= self.mutation_prob <= 1.0:
            raise UsageError(f"--mutation-prob {self.mutation_prob} must be in [0, 1]")
        crossover = self.population // 2 if self.crossover is None else self.crossover
        parents = max(1, self.population // 2) if self.parents is None else self.parents
        if not 0 <= crossover <= self.population:
            raise UsageError(f"--crossover {crossover} must be in [0, population={self.population}]")
        if parents < 1:
            raise UsageError(f"--parents {parents} must be >= 1")
        return SearchSettings(self.method, self.seed, self.population, self.generations, self.mutation_prob,
                              crossover, parents)


@dataclass(frozen=True)
class Candidate:
    """One scored subnet: when and how it was made."""

    generation: int
    index: int
    subnet: Subnet
    origin: str  # "random", "mutation" or "crossover"
    score: float


def rank_key(candidate: Candidate) -> tuple[float, int, int]:
    """Best first: higher score, then earlier evaluation (NaN ranks last)."""
    score = -math.inf if math.isnan(candidate.score) else candidate.score
    return (-score, candidate.generation, candidate.index)


def best(candidates: Sequence[Candidate]) -> Candidate:
    return min(candidates, key=rank_key)


def run_search(settings: SearchSettings, choices_per_block: Sequence[int],
               score: Callable[[Subnet], float]) -> list[Candidate]:
    """Every candidate the search scored, in evaluation order."""
    settings = settings.checked()
    rng = random.Random(derive_seed(settings.seed, "search"))
    space_size = math.prod(choices_per_block)
    seen: set[Subnet] = set()
    done: list[Candidate] = []
    for generation in range(settings.generations):
        if len(seen) >= space_size:
            break
        if settings.method == "random" or generation == 0:
            children = [(_fresh(rng, choices_per_block, seen), "random")
                        for _ in range(min(settings.population, space_size - len(seen)))]
        else:
            children = _offspring(settings, rng, choices_per_block, done, seen, space_size)
        for index, (subnet, origin) in enumerate(children):
            done.append(Candidate(generation, index, subnet, origin, float(score(subnet))))
    return done


def _offspring(settings: SearchSettings, rng: random.Random, choices_per_block: Sequence[int],
               done: list[Candidate], seen: set[Subnet], space_size: int) -> list[tuple[Subnet, str]]:
    """One generation: ``crossover`` crossover children, then mutants, all unseen."""
    assert settings.parents is not None and settings.crossover is not None
    parents = [c.subnet for c in sorted(done, key=rank_key)[: settings.parents]]
    wanted = min(settings.population, space_size - len(seen))
    children: list[tuple[Subnet, str]] = []
    tries = 0
    while len(children) < wanted:
        origin = "crossover" if len(children) < settings.crossover else "mutation"
        if origin == "crossover":
            a, b = rng.choice(parents), rng.choice(parents)
            child = Subnet(tuple(x if rng.random() < 0.5 else y for x, y in zip(a.choices, b.choices, strict=True)))
        else:
            parent = rng.choice(parents)
            child = Subnet(tuple(rng.randrange(n) if rng.random() < settings.mutation_prob else c
                                 for c, n in zip(parent.choices, choices_per_block, strict=True)))
        tries += 1
        if child in seen:
            if tries > 20 * settings.population:  # the parents' neighbourhood is exhausted
                children.append((_fresh(rng, choices_per_block, seen), "random"))
            continue
        seen.add(child)
        children.append((child, origin))
    return children


def _fresh(rng: random.Random, choices_per_block: Sequence[int], seen: set[Subnet]) -> Subnet:
    """A uniformly drawn subnet not in ``seen`` (added to it); the caller checks one exists."""
    while True:
        subnet = Subnet(tuple(rng.randrange(n) for n in choices_per_block))
        if subnet not in seen:
            seen.add(subnet)
            return subnet
