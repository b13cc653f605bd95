"""The pure device-cache model: budget, pins, dirty write-back, accounting, victim rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.context import CacheCapacityError, DeviceCache, Move


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


class _ScanEveryPlacement(DeviceCache):
    """The eviction rule as first written (the oracle): at each placement, scan every resident layer, keep the
    evictable ones needed after ``before``, sort them (furthest next use, least recently used, id), take the head."""

    def _place(self, layer, ranking, before):  # type: ignore[no-untyped-def]
        size = self.sizes[layer]
        need = size - self.free
        victims: list[int] | None = []
        if need > 0:
            next_use = {}
            for position in range(len(ranking.upcoming) - 1, -1, -1):
                for lid in ranking.upcoming[position]:
                    next_use[lid] = position
            limit = -1 if before is None else before
            candidates = sorted(
                (lid for lid in self._resident if lid not in self._pins and lid not in self._in_flight
                 and next_use.get(lid, 1 << 62) > limit),
                key=lambda lid: (-next_use.get(lid, 1 << 62), self._last_use.get(lid, 0), lid))
            victims = []
            for lid in candidates:
                if need <= 0:
                    break
                victims.append(lid)
                need -= self.sizes[lid]
            if need > 0:
                victims = None
        if victims is None:
            if before is not None:
                return []
            raise CacheCapacityError(f"layer {layer} does not fit")
        moves = [self._evict(victim) for victim in victims]
        self._add(layer)
        self.stats.swap_in_bytes += size
        return [*moves, Move(layer, size, "in")]


_SIZES = {layer: 4 + 3 * (layer % 4) for layer in range(10)}  # 4..13 bytes: one placement may evict several


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 9), min_size=1, max_size=3),
                          st.lists(st.lists(st.integers(0, 9), max_size=3), max_size=8),
                          st.booleans(), st.booleans(), st.booleans()), min_size=1, max_size=30),
       st.integers(26, 60))
def test_one_ranking_per_task_moves_as_a_scan_per_placement_and_as_two_calls(
        steps: list[tuple[list[int], list[list[int]], bool, bool, bool]], budget: int) -> None:
    """acquire_and_prefetch == acquire then prefetch == the oracle, move for move, with overlapping tasks
    (pins held across steps), copies landing late, dirty write-backs and several victims per placement."""
    fused, apart = DeviceCache(budget, _SIZES), DeviceCache(budget, _SIZES)
    oracle = _ScanEveryPlacement(budget, _SIZES)
    held: list[list[int]] = []
    for layers, upcoming, land, dirty, keep in steps:
        if sum(_SIZES[x] for x in set(layers) | {x for h in held for x in h}) > budget:
            continue  # the pinned layers alone would not fit: refused alike, not the point here
        answers = []
        for cache in (fused, apart, oracle):
            try:
                if cache is fused:
                    moves = cache.acquire_and_prefetch(layers, upcoming)
                else:
                    moves = cache.acquire(layers, upcoming) + cache.prefetch(upcoming)
            except CacheCapacityError:
                moves = None
            answers.append(moves)
            if moves and land:
                for move in moves:
                    if move.direction == "in":
                        cache.arrived(move.layer)
        assert answers[0] == answers[1] == answers[2]
        if answers[0] is None:
            return
        held.append(layers)
        if not keep:  # release the oldest task still running
            for cache in (fused, apart, oracle):
                cache.release(held[0], dirty=dirty)
            held.pop(0)
        assert fused.stats == apart.stats == oracle.stats
        assert fused.resident == apart.resident == oracle.resident and fused.used <= budget
