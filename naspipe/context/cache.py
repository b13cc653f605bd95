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
- ``acquire_prefetch_release(layers, upcoming, dirty=False) -> list[Move]``: ``acquire_and_prefetch``
  then ``release``, for a caller that makes no other call between a task's start and its end (the
  simulator): the same moves and state, without pinning the layers for the call's length only.
- ``arrived(layer)``: an ``in`` move finished (the runtime/simulator tells; until then the
  layer counts as in flight: its bytes are reserved, it is no hit and cannot be evicted).
  ``arrived_all(layers)``: the same for several.
- ``choose_victims(nbytes, upcoming, before=None) -> list[int] | None``: the evictions that
  free ``nbytes``, or None when impossible.
- ``flush() -> list[Move]``: write back every dirty layer (a drain point); they stay resident.
- ``discard(layer)``: forget the device copy without writing it back (a newer state of the
  layer arrived from another stage: mirroring). The layer must not be pinned.
- ``room_for(layers) -> bool``: whether a task's layers can be placed now without evicting a copy still
  in flight (those cannot be evicted mid-copy). A caller whose copies land on their own (the runtime's
  copy thread) waits for the ones on their way when it is False, then acquires: the budget then only
  has to hold the pinned layers and the task's own, whatever the copies' timing.
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

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal, NamedTuple, NoReturn, cast

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


_move = cast(Callable[[tuple[int, int, Direction]], Move], partial(tuple.__new__, Move))
"""``_move((layer, nbytes, direction)) == Move(layer, nbytes, direction)`` without the named tuple's
argument-parsing ``__new__`` (a few moves per task)."""


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

        for layer in resident:  # arrived: held, not in flight; the peak is the bytes they take
            self._resident.add(layer)
            self.used += self.sizes[layer]
        self.stats.peak_bytes = self.used

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
    def in_flight(self) -> frozenset[int]:
        """Layers whose copy in has started and not arrived (resident, not yet usable, not evictable)."""
        return frozenset(self._in_flight)

    @property
    def free(self) -> int:
        return self.budget - self.used

    def room_for(self, layers: Iterable[int]) -> bool:
        """Whether ``layers``' missing ones fit in the free bytes plus those of the evictable layers (held,
        arrived, unpinned, not among ``layers``): what :meth:`acquire` may evict without a copy in flight."""
        resident, sizes = self._resident, self.sizes
        need = -self.free
        for layer in layers:  # a loop, no set: the simulator asks before most tasks while copies are on their way
            if layer not in resident:
                need += sizes[layer]
        if need <= 0:  # (a layer listed twice only adds to need: room even so)
            return True
        wanted = set(layers)
        need = sum(sizes[x] for x in wanted if x not in resident) - self.free
        if need <= 0:
            return True
        evictable = resident.difference(self._pins, self._in_flight, wanted)
        return sum(self.sizes[x] for x in evictable) >= need

    # -- events -------------------------------------------------------------
    def acquire(self, layers: Iterable[int], upcoming: Upcoming = ()) -> list[Move]:
        wanted, missing = self._use(layers, pin=True)
        return self._fetch(wanted, missing, upcoming, (), ())

    def acquire_and_prefetch(self, layers: Iterable[int], upcoming: Upcoming) -> list[Move]:
        """:meth:`acquire` then :meth:`prefetch`: one ranking of the victims serves both (nothing between the
        two calls changes it: the task's layers are pinned before either places a layer)."""
        wanted, missing = self._use(layers, pin=True)
        return self._fetch(wanted, missing, upcoming, (), upcoming)

    def acquire_prefetch_release(self, layers: Iterable[int], upcoming: Upcoming, dirty: bool = False) -> list[Move]:
        """:meth:`acquire_and_prefetch` then :meth:`release`, for a caller that makes no other call on the cache
        between a task's start and its end (the simulator: a stage's task is acquired and released in one step
        of its loop). The same moves, stats and state; the task's layers are kept from eviction for the call
        without pinning and unpinning them."""
        wanted, missing = self._use(layers, pin=False)
        moves = self._fetch(wanted, missing, upcoming, wanted, upcoming)
        if dirty:
            self._dirty.update(wanted)
        return moves

    def _use(self, layers: Iterable[int], pin: bool) -> tuple[dict[int, int], bool]:
        """A task starts: its distinct layers (in order), each counted as a hit, late or a miss, made the most
        recently used, and pinned when ``pin``; and whether one of them is not held (:meth:`_fetch` places it:
        from the count here, as an ``issuperset`` there would build a set)."""
        tick = self._tick + 1
        wanted = dict.fromkeys(layers, tick)
        if len(wanted) * self._largest > self.budget:  # once per task: most tasks cannot overflow
            self._check_fits(wanted)  # refused before any change
        self._tick = tick
        self._last_use.update(wanted)
        # in flight implies held (_place puts a layer in both; evictions skip it): hits are the held, arrived ones
        held = hits = len(self._resident.intersection(wanted))
        stats = self.stats
        if self._in_flight:
            late = len(self._in_flight.intersection(wanted))
            hits -= late
            stats.late += late
        if pin:
            pins = self._pins
            for layer in wanted:
                pins[layer] = pins.get(layer, 0) + 1
        stats.uses += len(wanted)
        stats.hits += hits
        return wanted, held < len(wanted)

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

    def arrived_all(self, layers: Iterable[int]) -> None:
        """:meth:`arrived` for each of ``layers`` (the simulator lands a stage's copies together)."""
        self._in_flight.difference_update(layers)

    def prefetch(self, upcoming: Upcoming) -> list[Move]:
        return self._fetch((), False, upcoming, (), upcoming)

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
        need = nbytes - self.free
        if need <= 0:
            return []
        limit = -1 if before is None else before
        free = self._resident.difference(self._pins, self._in_flight, *upcoming[:limit + 1])
        ranking = _Ranking.build(self, upcoming, free, limit)
        end = ranking.victims(need, limit)
        return None if end < 0 else [layer for _, _, layer in ranking.order[:end]]

    # -- internals ----------------------------------------------------------
    def _fetch(self, wanted: Iterable[int], missing: bool, upcoming: Upcoming, held: Collection[int],
               ahead: Upcoming) -> list[Move]:
        """Place every missing layer of ``wanted`` (any evictable layer may go), then prefetch ``ahead``'s
        positions in order up to the first layer that cannot be placed. ``upcoming`` ranks the victims
        (``ahead`` is it or empty); ``held``: layers kept from eviction besides the pinned ones (a task's,
        unpinned).

        The prefetch's common case is inline: a layer that fits without evicting, and the layer it stops at
        (most calls: the device holds a few layers, the predicted tasks use more), found from the bytes of the
        evictable layers not needed up to its position, before any next use is looked up or sorted."""
        resident, sizes, budget = self._resident, self.sizes, self.budget
        moves: list[Move] = []
        ranking: _Ranking | None = None
        for layer in wanted if missing else ():  # most tasks: all held
            if layer not in resident:
                need, end = sizes[layer] - budget + self.used, 0
                if need > 0:
                    if ranking is None:
                        free = resident.difference(self._pins, self._in_flight, held)
                        ranking = _Ranking.build(self, upcoming, free, -1)
                    end = ranking.victims(need, -1)
                    if end < 0:
                        self._full(layer, held)
                self._place(layer, ranking, end, moves)
        # positions in order, held layers skipped: a membership test per layer up to the first one to place (one in
        # three tasks: at the third position) costs less than ``set.issuperset`` of each position's tuple (it
        # builds a set from it) mapped over all of them
        for position in range(len(ahead)):
            for layer in ahead[position]:
                if layer in resident:
                    continue
                need, end = sizes[layer] - budget + self.used, 0
                if need > 0:
                    if ranking is None:
                        free = resident.difference(self._pins, self._in_flight, held, *upcoming[:position + 1])
                        for other in free:
                            need -= sizes[other]
                        if need > 0:  # even all of them would not make room (a loop: a comprehension is a frame)
                            return moves
                        need = sizes[layer] - budget + self.used
                        ranking = _Ranking.build(self, upcoming, free, position)
                    end = ranking.victims(need, position)
                    if end < 0:
                        return moves
                self._place(layer, ranking, end, moves)
        return moves

    def _full(self, layer: int, held: Collection[int]) -> NoReturn:
        """A task's own ``layer`` cannot be placed: the running tasks pin too much of the budget."""
        sizes = self.sizes
        pinned = sum(sizes[x] for x in self._resident if x in self._pins or x in held)
        flying = sum(sizes[x] for x in self._in_flight if x not in self._pins and x not in held)
        on_way = f", {flying} bytes are copies on their way" if flying else ""
        raise CacheCapacityError(
            f"layer {layer} ({sizes[layer]} bytes) does not fit the device cache budget of {self.budget} bytes "
            f"({pinned} bytes are pinned by running tasks{on_way})"
        )

    def _place(self, layer: int, ranking: _Ranking | None, end: int, moves: list[Move]) -> None:
        """Evict the ranking's layers up to ``end`` (:meth:`_Ranking.victims`' answer; none if not past its head)
        and start ``layer``'s copy, the moves appended to ``moves``."""
        stats = self.stats
        if ranking is not None and end > ranking.head:
            resident, dirty, sizes = self._resident, self._dirty, self.sizes
            for _, _, victim in ranking.order[ranking.head:end]:  # evict: written back first if dirty
                resident.discard(victim)
                size = sizes[victim]
                self.used -= size
                if victim in dirty:
                    dirty.discard(victim)
                    stats.swap_out_bytes += size
                    moves.append(_move((victim, size, "out")))
                else:
                    moves.append(_move((victim, size, "drop")))
            ranking.head = end
        # start the copy: held and in flight, its bytes counted (inline: a call per placement was ~1% of a task)
        self._resident.add(layer)
        self._in_flight.add(layer)
        size = self.sizes[layer]
        used = self.used = self.used + size
        if used > stats.peak_bytes:
            stats.peak_bytes = used
        stats.swap_in_bytes += size
        moves.append(_move((layer, size, "in")))

    def _check_fits(self, layers: Collection[int]) -> None:
        total = sum(self.sizes[layer] for layer in layers)
        if total <= self.budget:
            return
        largest = max(layers, key=lambda layer: self.sizes[layer])
        raise CacheCapacityError(
            f"a task's layers need {total} bytes but the device cache budget is {self.budget} bytes "
            f"(largest: layer {largest}, {self.sizes[largest]} bytes)"
        )


class _Ranking:
    """The eviction order of one call, built once: on its first placement that must evict.

    Why once is enough: while a call places layers, the candidates (resident, arrived, unpinned) only
    shrink (a placed layer is in flight; pins and last uses change before the first placement), and
    their keys (next use in ``upcoming``, last use, id) stay. So the candidates sorted by the eviction
    rule at the first placement that must evict, minus the ones evicted since, are every later
    placement's sorted candidates; those allowed before a position are a prefix (furthest use first),
    and a placement's victims are the head of that prefix: exactly :meth:`DeviceCache.choose_victims`
    on the state of the moment, without a scan and a sort per placed layer.

    Built at a prefetch's position ``before``, it ranks only the candidates not needed up to there: later
    placements are at ``before`` or after, where the others may not go either, and they would sort after
    (a nearer next use). And most prefetches stop at a layer that cannot be placed (the device holds a few
    layers, the predicted tasks use more): :meth:`DeviceCache._fetch` sees that from those candidates' bytes
    alone and builds no ranking (what the answer would be: the victims must all be needed after the position,
    so the placement is possible exactly when their bytes reach what it must free).
    """

    __slots__ = ("sizes", "order", "head")
    sizes: Mapping[int, int]
    order: list[tuple[int, int, int]]  # (minus the next use (-_NEVER: none), the last use, the layer), sorted
    head: int  # order[:head] were evicted

    @classmethod
    def build(cls, cache: DeviceCache, upcoming: Upcoming, free: set[int], before: int) -> _Ranking:
        """The order of ``free``: the evictable layers not needed up to position ``before`` (-1: all of them).

        Their next uses from a walk over the later positions that stops once all are found; loops, not
        comprehensions (a frame each, for the two or three layers a ranking usually holds). A lone candidate (one
        ranking in five) needs no walk: its next use orders nothing, and the one test made of it (needed after
        ``before``, in :meth:`victims`) holds by construction, as ``free`` leaves out the layers needed up to
        there; so it is ranked as never used again."""
        next_use: dict[int, int] = {}
        left = set(free)
        for position in range(before + 1, len(upcoming) if len(left) > 1 else 0):
            uses = upcoming[position]
            if left.isdisjoint(uses):
                continue
            for layer in left.intersection(uses):
                next_use[layer] = position
            left.difference_update(uses)
            if not left:
                break
        last_use = cache._last_use
        order = []
        for layer in free:
            order.append((-next_use.get(layer, _NEVER), last_use.get(layer, 0), layer))
        order.sort()
        ranking = cls.__new__(cls)  # no __init__: one Python call less per ranking (one task in two builds one)
        ranking.sizes, ranking.order, ranking.head = cache.sizes, order, 0
        return ranking

    def victims(self, need: int, before: int) -> int:
        """Where the head of the order that frees ``need`` bytes ends (``order[head:end]``), each layer needed
        after ``before`` (-1: any); -1 if impossible."""
        sizes, order = self.sizes, self.order
        for i in range(self.head, len(order)):
            negative_use, _, layer = order[i]
            if -negative_use <= before:
                return -1
            need -= sizes[layer]
            if need <= 0:
                return i + 1
        return -1
