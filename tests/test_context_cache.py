"""The pure device-cache model: budget, pins, dirty write-back, accounting, victim rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.context import CacheCapacityError, CacheStats, DeviceCache, Move


def test_first_use_misses_then_hits_and_accounts_bytes() -> None:
    cache = DeviceCache(100, {1: 10, 2: 20})
    moves = cache.acquire([1, 2])
    assert moves == [Move(1, 10, "in"), Move(2, 20, "in")]
    assert not cache.is_resident(1)  # in flight until it arrives
    cache.arrived(1)
    cache.arrived(2)
    cache.release([1, 2])
    assert cache.acquire([1, 2, 2]) == []
    assert (cache.stats.uses, cache.stats.hits, cache.stats.swap_in_bytes) == (4, 2, 30)
    assert cache.stats.hit_rate == 0.5


def test_dirty_layer_is_written_back_before_eviction_clean_one_is_dropped() -> None:
    cache = DeviceCache(20, {1: 10, 2: 10, 3: 10})
    for layer in (1, 2):
        cache.acquire([layer])
        cache.arrived(layer)
    cache.release([1], dirty=True)
    cache.release([2])
    assert cache.acquire([3]) == [Move(1, 10, "out"), Move(3, 10, "in")]  # 1 is least recently used
    assert cache.stats.swap_out_bytes == 10
    cache.arrived(3)
    cache.release([3])
    assert cache.acquire([1]) == [Move(2, 10, "drop"), Move(1, 10, "in")]


def test_victim_is_the_layer_needed_furthest_in_the_future() -> None:
    cache = DeviceCache(30, {1: 10, 2: 10, 3: 10, 4: 10}, resident=[1, 2, 3])
    moves = cache.acquire([4], upcoming=[[2], [1], [3]])
    assert moves == [Move(3, 10, "drop"), Move(4, 10, "in")]


def test_pinned_and_in_flight_layers_are_never_evicted() -> None:
    cache = DeviceCache(20, {1: 10, 2: 10, 3: 10})
    cache.acquire([1])  # pinned and in flight
    cache.acquire([2])
    with pytest.raises(CacheCapacityError, match="layer 3 .10 bytes.*20 bytes.*20 bytes are pinned"):
        cache.acquire([3])


def test_room_for_counts_only_what_can_be_evicted_without_a_copy_in_flight() -> None:
    """Prefetched copies on their way take bytes that no eviction can free until they land: ``room_for`` says
    so before ``acquire`` would fail, and once they have arrived the same task fits (issue 41, item 0)."""
    cache = DeviceCache(30, {1: 10, 2: 10, 3: 10, 4: 10})
    cache.acquire([1])  # the running task's layer: pinned
    cache.prefetch([[2], [3]])  # two prefetches, still in flight
    assert cache.room_for([1]) and not cache.room_for([4])
    with pytest.raises(CacheCapacityError, match="10 bytes are pinned by running tasks, 20 bytes are copies on"):
        cache.acquire([4])
    fresh = DeviceCache(30, {1: 10, 2: 10, 3: 10, 4: 10})
    fresh.acquire([1])
    fresh.prefetch([[2], [3]])
    fresh.arrived_all([2, 3])
    assert fresh.room_for([4])
    assert fresh.acquire([4]) == [Move(2, 10, "drop"), Move(4, 10, "in")]  # no next use: the lower id goes


def test_a_task_that_can_never_fit_names_the_layer_its_bytes_and_the_budget() -> None:
    cache = DeviceCache(25, {1: 10, 2: 20})
    with pytest.raises(CacheCapacityError, match=r"need 30 bytes .* budget is 25 bytes .*layer 2, 20 bytes"):
        cache.acquire([1, 2])
    assert cache.stats.uses == 0 and cache.used == 0  # refused before any change


def test_prefetch_fetches_in_order_and_never_evicts_what_is_needed_sooner() -> None:
    cache = DeviceCache(30, {1: 10, 2: 10, 3: 10, 4: 10, 5: 10}, resident=[1, 2])
    moves = cache.prefetch([[1], [3], [2], [4], [5]])
    assert moves == [Move(3, 10, "in")]  # 4 would have to evict 1, 2 or 3, all needed before it
    cache.arrived(3)
    assert cache.acquire([1]) == [] and cache.stats.hits == 1


def test_flush_writes_back_every_dirty_layer_and_keeps_it() -> None:
    cache = DeviceCache(30, {1: 10, 2: 10}, resident=[1, 2])
    cache.acquire([1, 2])
    cache.release([1, 2], dirty=True)
    assert cache.flush() == [Move(1, 10, "out"), Move(2, 10, "out")]
    assert cache.resident == {1, 2} and not cache.is_dirty(1)


def belady_misses(sequence: list[int], capacity: int) -> int:
    """Textbook Belady on unit-size pages, for comparison."""
    resident: list[int] = []
    misses = 0
    for i, page in enumerate(sequence):
        if page in resident:
            continue
        misses += 1
        if len(resident) == capacity:
            future = sequence[i + 1:]
            resident.remove(max(resident, key=lambda p: future.index(p) if p in future else len(future) + p))
        resident.append(page)
    return misses


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=40), st.integers(1, 4))
def test_the_true_future_gives_belady_and_the_budget_always_holds(sequence: list[int], capacity: int) -> None:
    cache = DeviceCache(capacity * 8, {layer: 8 for layer in range(8)})
    for i, layer in enumerate(sequence):
        for move in cache.acquire([layer], upcoming=[[x] for x in sequence[i + 1:]]):
            if move.direction == "in":
                cache.arrived(move.layer)
        assert cache.used <= cache.budget
        cache.release([layer], dirty=i % 3 == 0)
    assert cache.stats.uses - cache.stats.hits == belady_misses(sequence, capacity)
    assert cache.stats.peak_bytes <= cache.budget


class _Oracle:
    """The cache's rules as first written, sharing no code with :class:`DeviceCache`: at each placement, scan
    every resident layer, keep the evictable ones (unpinned, arrived) needed after ``before``, sort them
    (furthest next use, least recently used, id), take the head; a prefetch stops at the first layer it
    cannot place."""

    def __init__(self, budget: int, sizes: dict[int, int]) -> None:
        self.budget, self.sizes, self.stats = budget, sizes, CacheStats()
        self.resident: set[int] = set()
        self.in_flight: set[int] = set()
        self.dirty: set[int] = set()
        self.pins: dict[int, int] = {}
        self.last_use: dict[int, int] = {}
        self.tick = self.used = 0

    def acquire(self, layers: list[int], upcoming: list[list[int]]) -> list[Move]:
        wanted = list(dict.fromkeys(layers))
        if sum(self.sizes[x] for x in wanted) > self.budget:
            raise CacheCapacityError("never fits")
        self.tick += 1
        for layer in wanted:
            self.stats.uses += 1
            self.stats.late += layer in self.in_flight
            self.stats.hits += layer in self.resident and layer not in self.in_flight
            self.pins[layer] = self.pins.get(layer, 0) + 1
            self.last_use[layer] = self.tick
        moves: list[Move] = []
        for layer in wanted:
            if layer not in self.resident:
                placed = self._place(layer, upcoming, -1)
                if placed is None:
                    raise CacheCapacityError(f"layer {layer} does not fit")
                moves += placed
        return moves

    def prefetch(self, upcoming: list[list[int]]) -> list[Move]:
        moves: list[Move] = []
        for position, layers in enumerate(upcoming):
            for layer in layers:
                if layer not in self.resident:
                    placed = self._place(layer, upcoming, position)
                    if placed is None:
                        return moves
                    moves += placed
        return moves

    def release(self, layers: list[int], dirty: bool) -> None:
        for layer in dict.fromkeys(layers):
            self.pins[layer] -= 1
            if not self.pins[layer]:
                del self.pins[layer]
            if dirty:
                self.dirty.add(layer)

    def arrived(self, layer: int) -> None:
        self.in_flight.discard(layer)

    def _place(self, layer: int, upcoming: list[list[int]], before: int) -> list[Move] | None:
        need = self.sizes[layer] - (self.budget - self.used)
        next_use: dict[int, int] = {}
        for position in range(len(upcoming) - 1, -1, -1):
            for lid in upcoming[position]:
                next_use[lid] = position
        candidates = sorted(
            (lid for lid in self.resident if lid not in self.pins and lid not in self.in_flight
             and next_use.get(lid, 1 << 62) > before),
            key=lambda lid: (-next_use.get(lid, 1 << 62), self.last_use.get(lid, 0), lid))
        victims: list[int] = []
        for lid in candidates:
            if need <= 0:
                break
            victims.append(lid)
            need -= self.sizes[lid]
        if need > 0:
            return None
        moves = []
        for victim in victims:
            self.resident.discard(victim)
            self.used -= self.sizes[victim]
            out = victim in self.dirty
            self.dirty.discard(victim)
            self.stats.swap_out_bytes += self.sizes[victim] if out else 0
            moves.append(Move(victim, self.sizes[victim], "out" if out else "drop"))
        self.resident.add(layer)
        self.in_flight.add(layer)
        self.used += self.sizes[layer]
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.used)
        self.stats.swap_in_bytes += self.sizes[layer]
        return [*moves, Move(layer, self.sizes[layer], "in")]


_SIZES = {layer: 4 + 3 * (layer % 4) for layer in range(10)}  # 4..13 bytes: one placement may evict several


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 9), min_size=1, max_size=3),
                          st.lists(st.lists(st.integers(0, 9), max_size=3), max_size=8),
                          st.booleans(), st.booleans(), st.integers(0, 3).map(lambda x: x == 0)),
                 min_size=1, max_size=30),
       st.integers(26, 60))
def test_the_calls_move_as_a_scan_per_placement(
        steps: list[tuple[list[int], list[list[int]], bool, bool, bool]], budget: int) -> None:
    """acquire_and_prefetch == acquire then prefetch == acquire_prefetch_release (for a task released right
    after, as the simulator's) == the oracle, move for move, with overlapping tasks (pins held across steps),
    copies landing late, dirty write-backs, several victims per placement and prefetches that stop."""
    fused, apart, oneshot = (DeviceCache(budget, _SIZES) for _ in range(3))
    oracle = _Oracle(budget, _SIZES)
    held: list[list[int]] = []
    for layers, upcoming, land, dirty, keep in steps:
        if sum(_SIZES[x] for x in set(layers) | {x for h in held for x in h}) > budget:
            continue  # the pinned layers alone would not fit: refused alike, not the point here
        alone = not held and not keep  # released right after: one call for oneshot
        answers: list[list[Move] | None] = []
        for cache in (fused, apart, oneshot, oracle):
            try:
                if cache is fused or (cache is oneshot and not alone):
                    moves = cache.acquire_and_prefetch(layers, upcoming)
                elif cache is oneshot:
                    moves = cache.acquire_prefetch_release(layers, upcoming, dirty)
                else:
                    moves = cache.acquire(layers, upcoming) + cache.prefetch(upcoming)
            except CacheCapacityError:
                moves = None
            answers.append(moves)
            if moves and land:
                landed = [move.layer for move in moves if move.direction == "in"]
                if cache is oneshot:  # as the simulator lands a stage's copies: together
                    cache.arrived_all(landed)
                else:
                    for layer in landed:
                        cache.arrived(layer)
        assert answers[0] == answers[1] == answers[2] == answers[3]
        if answers[0] is None:
            return
        held.append(layers)
        if not keep:  # release the oldest task still running
            for cache in (fused, apart, oneshot, oracle):
                if cache is not oneshot or not alone:
                    cache.release(held[0], dirty=dirty)
            held.pop(0)
        assert fused.stats == apart.stats == oneshot.stats == oracle.stats
        assert fused.resident == apart.resident == oneshot.resident == oracle.resident and fused.used <= budget
        assert {x for x in oracle.resident if fused.is_dirty(x)} == oracle.dirty
        assert all(oneshot.is_resident(x) == fused.is_resident(x) for x in range(10))


def test_one_call_per_task_keeps_its_layers_pins_nothing_and_marks_an_update_dirty() -> None:
    cache = DeviceCache(20, {1: 10, 2: 10, 3: 10}, resident=[1, 2])
    # 1 (the task's, never used again) would be the furthest; it is the running task's: 2 goes
    assert cache.acquire_prefetch_release([1], [[3], [2]], dirty=True) == [Move(2, 10, "drop"), Move(3, 10, "in")]
    assert cache.is_dirty(1) and not cache.is_dirty(3)
    with pytest.raises(RuntimeError, match="layer 1 released but not acquired"):
        cache.release([1])


def test_a_prefetch_that_cannot_free_enough_stops_before_evicting() -> None:
    """Layer 4 needs 10 bytes; of the evictable ones only 3 (5 bytes) is not needed by position 1: stop, no move."""
    cache = DeviceCache(25, {1: 10, 2: 10, 3: 5, 4: 10, 5: 5}, resident=[1, 2, 3])
    assert cache.prefetch([[2], [4, 1], [3]]) == []
    assert cache.choose_victims(10, [[2], [4, 1], [3]], before=1) is None
    assert cache.choose_victims(10, [[2], [4, 1], [3]]) == [3, 1]  # any: furthest use first (3 at 2, then 1)


def test_layers_resident_at_the_start_have_arrived_and_count_in_the_peak() -> None:
    cache = DeviceCache(30, {1: 10, 2: 12, 3: 5}, resident=[1, 2])
    assert cache.is_resident(1) and cache.is_resident(2) and not cache.holds(3)
    assert cache.used == cache.stats.peak_bytes == 22 and cache.stats.swap_in_bytes == 0
    assert cache.acquire([3]) == [Move(3, 5, "in")] and cache.stats.peak_bytes == 27
