"""A byte-bounded device cache of layers: the decisions, without the copies.

Public API (stable; the runtime and the simulator both drive it):

- ``DeviceCache(budget, sizes, resident=())``: ``sizes[layer]`` is the bytes the layer takes
  on the device (parameters + gradients + optimizer state: they move together).
- ``acquire(layers, upcoming=()) -> list[Move]``: a task starts. Counts each distinct layer as
  a hit if it is resident (arrived) now, else a miss; pins the layers; returns the moves to
  make room and fetch the missing ones. Layers already in flight get no move: wait for them.
- ``release(layers, dirty=False)``: the task is done; ``dirty`` marks its layers changed on
  the device (an update), so evicting them writes back first.
- ``prefetch(upcoming) -> list[Move]``: copies to start now for the predicted future.
- ``acquire_and_prefetch(layers, upcoming) -> list[Move]``: ``acquire`` then ``prefetch`` with the
  same ``upcoming``, as one call: the same moves as the two calls in a row (what the runtime's worker
  and the simulator do before every task), with the first-use table and the victims' order computed
  once for both instead of once per placement.
- ``arrived(layer)``: an ``in`` move finished (the runtime/simulator tells; until then the
  layer counts as in flight: its bytes are reserved, it is no hit and cannot be evicted).
- ``choose_victims(nbytes, upcoming, before=None) -> list[int] | None``: the evictions that
  free ``nbytes``, or None when impossible.
- ``flush() -> list[Move]``: write back every dirty layer (a drain point); they stay resident.
- ``discard(layer)``: forget the device copy without writing it back (a newer state of the
  layer arrived from another stage: mirroring). The layer must not be pinned.
- ``stats``: :class:`CacheStats` (uses, hits, hit_rate, late: misses already in flight,
  swap_in/out bytes, peak bytes).

``upcoming`` is the layer lists of the next tasks, in order (from
:func:`naspipe.scheduling.predictor.layer_uses`). A :class:`Move` is ``in`` (host to
device), ``out`` (dirty: write back, then free) or ``drop`` (clean: free, no copy);
moves are listed evictions first, so performing them in order never exceeds the budget.

Eviction rule: among unpinned resident layers, the one whose next use in ``upcoming`` is
furthest (never used: infinitely far), ties broken least recently used. With a predicted
``upcoming`` this is the online policy; with the stage's true future it is Belady's
optimum; with none (on-demand, horizon 0) it is LRU. A prefetch never evicts a layer that
is needed no later than the one it fetches, and stops at the first layer it cannot place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from naspipe.errors import UsageError

Direction = Literal["in", "out", "drop"]
Upcoming = Sequence[Sequence[int]]
_NEVER = 1 << 62


class CacheCapacityError(UsageError):
    """A task's layers can never fit the device cache (the budget is the user's setting)."""


class Move(NamedTuple):
    """One copy (or free) the executor performs: immutable, compared by value (a named tuple: several
    are built per task, and a frozen dataclass's ``__init__`` costs several times a tuple's)."""

    layer: int
    nbytes: int
    direction: Direction


@dataclass
class CacheStats:
    uses: int = 0
    hits: int = 0
    late: int = 0  # misses whose copy was already on its way (prefetched, not landed)
    swap_in_bytes: int = 0
    swap_out_bytes: int = 0
    peak_bytes: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.uses if self.uses else 1.0


class DeviceCache:
    def __init__(self, budget: int, sizes: Mapping[int, int], resident: Iterable[int] = ()) -> None:
        if budget <= 0:
            raise ValueError(f"cache budget must be positive, got {budget} bytes")
        self.budget = budget
        self.sizes = dict(sizes)
        self._largest = max(self.sizes.values(), default=0)
        self.stats = CacheStats()
        self._resident: set[int] = set()  # on the device (arrived) or in flight
        self._in_flight: set[int] = set()
        self._pins: dict[int, int] = {}
        self._dirty: set[int] = set()
        self._last_use: dict[int, int] = {}
        self._tick = 0
        self.used = 0

        for layer in resident:
            self._add(layer)
            self._in_flight.discard(layer)

    # -- queries ------------------------------------------------------------
    def is_resident(self, layer: int) -> bool:
        """On the device and arrived (in-flight layers are not resident yet)."""
        return layer in self._resident and layer not in self._in_flight

    def holds(self, layer: int) -> bool:
        """On the device or on its way."""
        return layer in self._resident

    def is_dirty(self, layer: int) -> bool:
        return layer in self._dirty

    @property
    def resident(self) -> frozenset[int]:
        return frozenset(self._resident)

    @property
    def free(self) -> int:
        return self.budget - self.used

    # -- events -------------------------------------------------------------
    def acquire(self, layers: Iterable[int], upcoming: Upcoming = ()) -> list[Move]:
        return self._acquire(layers, _Ranking(self, upcoming))

    def acquire_and_prefetch(self, layers: Iterable[int], upcoming: Upcoming) -> list[Move]:
        """:meth:`acquire` then :meth:`prefetch`: one ranking of the victims serves both (nothing between the
        two calls changes it: the task's layers are pinned before either places a layer)."""
        ranking = _Ranking(self, upcoming)
        moves = self._acquire(layers, ranking)
        more = self._prefetch(upcoming, ranking)
        return moves + more if more else moves

    def _acquire(self, layers: Iterable[int], ranking: _Ranking) -> list[Move]:
        wanted = list(dict.fromkeys(layers))
        if len(wanted) * self._largest > self.budget:  # once per task: most tasks cannot overflow
            self._check_fits(wanted)
        tick = self._tick = self._tick + 1
        resident, in_flight, pins, last_use = self._resident, self._in_flight, self._pins, self._last_use
        hits = late = 0
        for layer in wanted:  # in flight implies held (_add puts a layer in both; evictions skip it)
            if layer in in_flight:
                late += 1
            elif layer in resident:
                hits += 1
            pins[layer] = pins.get(layer, 0) + 1
            last_use[layer] = tick
        stats = self.stats
        stats.uses += len(wanted)
        stats.hits += hits
        stats.late += late
        if hits == len(wanted):
            return []
        moves: list[Move] = []
        for layer in wanted:
            if layer not in resident:
                moves += self._place(layer, ranking, before=None)
        return moves

    def release(self, layers: Iterable[int], dirty: bool = False) -> None:
        for layer in dict.fromkeys(layers):
            count = self._pins.get(layer, 0)
            if count <= 0:
                raise RuntimeError(f"layer {layer} released but not acquired")
            if count == 1:
                del self._pins[layer]
            else:
                self._pins[layer] = count - 1
            if dirty:
                self._dirty.add(layer)

    def arrived(self, layer: int) -> None:
        self._in_flight.discard(layer)

    def prefetch(self, upcoming: Upcoming) -> list[Move]:
        return self._prefetch(upcoming, _Ranking(self, upcoming))

    def _prefetch(self, upcoming: Upcoming, ranking: _Ranking) -> list[Move]:
        moves: list[Move] = []
        resident, sizes, budget = self._resident, self.sizes, self.budget
        for position, layers in enumerate(upcoming):
            if resident.issuperset(layers):  # most positions: nothing to place
                continue
            for layer in layers:
                if layer in resident:
                    continue
                if sizes[layer] > budget:
                    return moves
                placed = self._place(layer, ranking, before=position)
                if not placed:
                    return moves
                moves += placed
        return moves

    def flush(self) -> list[Move]:
        moves = [Move(layer, self.sizes[layer], "out") for layer in sorted(self._dirty)]
        self.stats.swap_out_bytes += sum(m.nbytes for m in moves)
        self._dirty.clear()
        return moves

    def discard(self, layer: int) -> None:
        if layer in self._pins:
            raise RuntimeError(f"layer {layer} is in use and cannot be discarded")
        if layer in self._resident:
            self._resident.discard(layer)
            self._in_flight.discard(layer)
            self._dirty.discard(layer)
            self.used -= self.sizes[layer]

    def choose_victims(self, nbytes: int, upcoming: Upcoming, before: int | None = None) -> list[int] | None:
        """Evictions freeing ``nbytes``; with ``before``, only layers not needed up to that task."""
        return _Ranking(self, upcoming).victims(nbytes, before)

    # -- internals ----------------------------------------------------------
    def _place(self, layer: int, ranking: _Ranking, before: int | None) -> list[Move]:
        size = self.sizes[layer]
        victims = ranking.victims(size, before)
        if victims is None:
            if before is not None:
                return []
            pinned = sum(self.sizes[x] for x in self._pins if x in self._resident)
            raise CacheCapacityError(
                f"layer {layer} ({size} bytes) does not fit the device cache budget of {self.budget} bytes "
                f"({pinned} bytes are pinned by running tasks)"
            )
        moves = [self._evict(victim) for victim in victims] if victims else []
        ranking.evicted(len(victims))
        self._add(layer)
        self.stats.swap_in_bytes += size
        moves.append(Move(layer, size, "in"))
        return moves

    def _add(self, layer: int) -> None:
        self._resident.add(layer)
        self._in_flight.add(layer)
        self.used += self.sizes[layer]
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.used)

    def _evict(self, layer: int) -> Move:
        self._resident.discard(layer)
        self.used -= self.sizes[layer]
        if layer in self._dirty:
            self._dirty.discard(layer)
            self.stats.swap_out_bytes += self.sizes[layer]
            return Move(layer, self.sizes[layer], "out")
        return Move(layer, self.sizes[layer], "drop")

    def _check_fits(self, layers: Sequence[int]) -> None:
        total = sum(self.sizes[layer] for layer in layers)
        if total <= self.budget:
            return
        largest = max(layers, key=lambda layer: self.sizes[layer])
        raise CacheCapacityError(
            f"a task's layers need {total} bytes but the device cache budget is {self.budget} bytes "
            f"(largest: layer {largest}, {self.sizes[largest]} bytes)"
        )


class _Ranking:
    """The eviction order of one call (or of :meth:`DeviceCache.acquire_and_prefetch`'s two), built once.

    Why once is enough: while a call places layers, the candidates (resident, arrived, unpinned) only
    shrink (a placed layer is in flight; pins and last uses change before the first placement), and
    their keys (next use in ``upcoming``, last use, id) stay. So the candidates sorted by the eviction
    rule at the first placement that must evict, minus the ones evicted since, are every later
    placement's sorted candidates; those allowed before a position are a prefix (furthest use first),
    and a placement's victims are the head of that prefix: exactly :meth:`DeviceCache.choose_victims`
    on the state of the moment, without a scan and a sort per placed layer.
    """

    __slots__ = ("cache", "upcoming", "order", "head")

    def __init__(self, cache: DeviceCache, upcoming: Upcoming) -> None:
        self.cache, self.upcoming = cache, upcoming
        self.order: list[tuple[int, int, int]] | None = None  # built on the first placement that must evict
        self.head = 0  # order[:head] were evicted

    def _build(self) -> list[tuple[int, int, int]]:
        """The candidates' keys, sorted: minus the next use (furthest first), the last use (least recent
        first), the layer (keys are distinct)."""
        cache = self.cache
        candidates = cache._resident.difference(cache._pins, cache._in_flight)
        next_use = _first_uses(self.upcoming, candidates)
        last_use = cache._last_use
        order = [(-next_use.get(layer, _NEVER), last_use.get(layer, 0), layer) for layer in candidates]
        order.sort()
        self.order = order
        return order

    def victims(self, nbytes: int, before: int | None) -> list[int] | None:
        """The head of the order freeing ``nbytes``, each needed after ``before`` (None: any); None if impossible."""
        cache = self.cache
        need = nbytes - (cache.budget - cache.used)
        if need <= 0:
            return []
        order = self.order if self.order is not None else self._build()
        limit = -1 if before is None else before
        sizes = cache.sizes
        victims: list[int] = []
        for i in range(self.head, len(order)):
            negative_use, _, layer = order[i]
            if -negative_use <= limit:
                return None
            victims.append(layer)
            need -= sizes[layer]
            if need <= 0:
                return victims
        return None

    def evicted(self, count: int) -> None:
        """The head's first ``count`` layers left the device (:meth:`victims`' answer was taken)."""
        self.head += count


def _first_uses(upcoming: Upcoming, layers: set[int]) -> dict[int, int]:
    """The first position in ``upcoming`` of each of ``layers`` that it uses (a walk that stops once all are found)."""
    first: dict[int, int] = {}
    left = set(layers)
    if not left:
        return first
    for position, uses in enumerate(upcoming):
        if left.isdisjoint(uses):
            continue
        for layer in left.intersection(uses):
            first[layer] = position
        left.difference_update(uses)
        if not left:
            break
    return first
