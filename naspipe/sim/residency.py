"""Where a stage's parameters live, priced on a copy engine: the seam for cache decisions.

Before a task computes, its layers' parameters must be on the device; after it, some
may go back to the host. A :class:`Residency` answers both in simulated time on one copy
engine per stage (a queue of host-device copies that runs alongside compute), and counts
hits, misses and bytes. Two implementations follow the runtime's policies:

- :class:`Resident`: the stage's whole slice stays on the device (gpipe, pipedream,
  sequential, and csp without the cache, as in the runtime), no copies.
- :class:`ContextCache`: NASPipe's context manager (``cache.enabled``): the byte-bounded
  device cache and the predictor of issue 9, the very objects the runtime drives, with
  simulated copies on the copy engine. A micro-batched stage asks it before every part, with the
  layers of the part's subnet-level task; a repeat of the last call on an unchanged cache is priced
  without the cache's walk (:meth:`ContextCache._repeat`).
- :class:`SynchronousSwap`: VPipe (``swap_parameters``): a task's layers are fetched on
  demand right before it runs and written back around the update, the stage waiting on
  each copy, as :mod:`naspipe.scheduling.policies.vpipe` documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from naspipe.context.cache import DeviceCache, Move
from naspipe.runplan.rules import prefetch_horizon
from naspipe.scheduling.micro_predictor import predict_parts
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import StagePolicy
from naspipe.scheduling.policies.micro import MicroCSP, plain_task
from naspipe.scheduling.predictor import predict
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, WEIGHT, Kind, Task
from naspipe.sim.costs import CostModel
from naspipe.space.structure import SpaceStructure


@dataclass
class CopyStats:
    hits: int = 0
    misses: int = 0
    in_bytes: float = 0.0
    out_bytes: float = 0.0
    wait_s: float = 0.0

    @property
    def hit_rate(self) -> float:
        uses = self.hits + self.misses
        return self.hits / uses if uses else 1.0


class Residency(Protocol):
    @property
    def stats(self) -> CopyStats:
        """Hits, misses, bytes copied and seconds waited so far."""

    def acquire(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        """When ``task``'s parameters are on the device (>= ``now``)."""

    def release(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        """When the stage may start its next task after ``task`` ended at ``now``."""

    def replaced(self, layer: int) -> None:
        """A newer state of ``layer`` arrived from another stage (mirroring)."""

    @property
    def release_noop(self) -> bool:
        """True when :meth:`release` changes nothing and returns its ``now``: the engine need not call it (a
        Python call per task saved where the release was folded into the acquire, as :class:`ContextCache`'s)."""


class Resident:
    """Every layer of the stage stays on the device: each use is a hit, nothing is copied."""

    release_noop = True

    def __init__(self) -> None:
        self.stats = CopyStats()

    def acquire(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        self.stats.hits += len(layers)
        return now

    def release(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        return now

    def replaced(self, layer: int) -> None:
        """The mirror overwrites the resident copy in place: nothing to copy."""


class SynchronousSwap:
    """VPipe: fetch a task's layers right before it runs, write back around the update; the stage waits.

    The engine's hot loop does not call it per task: what it copies is fixed by the plan, so the
    cost table prices it (:class:`naspipe.sim.tables.SwapBlock`, equal entry by entry) and the
    loop fills :attr:`stats`. These methods remain the definition, and drive any other use.
    """

    release_noop = False  # the write-back

    def __init__(self, costs: CostModel, trainable: frozenset[int]) -> None:
        self.stats = CopyStats()
        self.costs, self.trainable = costs, trainable
        self._param_bytes = {lid: costs.param_bytes(lid) for lid in trainable}  # per task: no call per layer

    def _bytes(self, layers: tuple[int, ...], per_param: int) -> float:
        param_bytes = self._param_bytes
        return sum([param_bytes[lid] for lid in layers if lid in param_bytes]) * per_param

    def acquire(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        """A part (:class:`MicroTask`) copies what its subnet-level task copies (a weight task: its backward's)."""
        self.stats.misses += len(layers)
        # parameters; at the update also the optimizer state and the subnet's stashed gradient
        per_param = 1 if task.kind is not UPDATE else 2 + self.costs.optimizer_states
        return self._copy(self._bytes(layers, per_param), now, inbound=True)

    def release(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        kind = task[0]
        if kind is FORWARD:
            return now  # unchanged parameters are dropped, not copied back
        per_param = 1 if kind is BACKWARD or kind is WEIGHT else 1 + self.costs.optimizer_states  # gradient / state
        return self._copy(self._bytes(layers, per_param), now, inbound=False)

    def replaced(self, layer: int) -> None:
        """VPipe never mirrors (static partitions only)."""

    def _copy(self, nbytes: float, now: float, inbound: bool) -> float:
        if inbound:
            self.stats.in_bytes += nbytes
        else:
            self.stats.out_bytes += nbytes
        seconds = 0.0 if self.costs.free_io else self.costs.hardware.copy_s(nbytes)
        self.stats.wait_s += seconds
        return now + seconds


class ContextCache:
    """NASPipe's context manager (csp with ``cache.enabled``): issue 9's cache and predictor, copies simulated.

    The decisions are :class:`naspipe.context.cache.DeviceCache`'s and
    :func:`naspipe.scheduling.predictor.predict`'s, called exactly as the runtime's worker
    calls them (``_cache_in``: predict the next ``horizon`` tasks of the live policy, acquire
    the task's layers, prefetch the predicted ones; release after, dirty after an update).
    Only the copies are simulated: each move runs on the stage's copy engine, one at a time,
    for ``bytes / host_device_bandwidth``; a prefetched layer counts as resident once its
    copy has landed, and a task waits for the copies of its own layers.

    The engine makes a task's :meth:`acquire` and :meth:`release` back to back, with no other call on
    the stage's residency between them (a stage runs one task at a time; mirrors arrive at events of
    their own). So :meth:`acquire` makes the worker's three cache calls as one,
    :meth:`DeviceCache.acquire_prefetch_release` (the same moves and state), and :meth:`release` has
    nothing left to do (:attr:`release_noop`: the engine does not call it).
    """

    release_noop = True

    def __init__(self, policy: StagePolicy, plan: PipelinePlan, costs: CostModel, budget: int,
                 sizes: dict[int, int], horizon: int, end: int) -> None:
        self.cache = DeviceCache(budget, sizes)
        self.policy, self.plan, self.costs = policy, plan, costs
        self.horizon = prefetch_horizon(policy.name, horizon)
        # predict's answer: a micro-batched stage's straight from predict_parts (what predict calls for it)
        self._predict = predict_parts if isinstance(policy, MicroCSP) and self.horizon > 0 else predict
        self.end = end
        self.copy_free = 0.0
        self.landing: dict[int, float] = {}  # layer -> when its copy lands
        self.wait_s = 0.0
        # layer_uses' lists, kept per task until it starts (the plan's caches hold every stage's)
        self._uses = _TaskLayers(plan)
        self._layers_of = self._uses.__getitem__
        self._started = self._uses.pop
        self._last_lands = 0.0  # when the last copy in lands (the copy engine's copies end in order)
        self._copy_s: dict[int, float] = {}  # copy seconds by bytes (a layer's few sizes): no call per move
        # the last acquire's layers and prediction, and its layers' count, while the cache has not changed since
        # it (no copy landed, no mirror replaced a layer): a repeat of it is a hit on each layer and nothing else
        # (:meth:`_repeat`); parts of one subnet-level task repeat it, as do a stage's tasks without prediction
        self._last: tuple[tuple[int, ...], list[Task], int] | None = None

    @property
    def stats(self) -> CopyStats:
        s = self.cache.stats
        return CopyStats(s.hits, s.uses - s.hits, float(s.swap_in_bytes), float(s.swap_out_bytes), self.wait_s)

    def acquire(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        landing = self.landing
        if landing:
            if self._last_lands <= now:  # all have landed (one copy engine runs them in turn: the last lands last)
                self.cache.arrived_all(landing)
                landing.clear()
                self._last = None
            elif self._land_due(now):
                self._last = None
        predicted = self._predict(self.policy, self.horizon, self.end, running=task)  # type: ignore[arg-type]
        # a task that started is not predicted again: its list goes (if it was kept); a part's is its subnet-level
        # task's, predicted again while that task's parts run, and gone after the last of them
        self._started(plain_task(task), None)
        update = task[0] is UPDATE
        last = self._last
        if last is not None and not update and last[0] == layers and last[1] == predicted:
            self._repeat(last[2])
            return now
        # the predicted tasks' layer lists (a map, not a comprehension: one frame less per task)
        upcoming = list(map(self._layers_of, predicted))
        self._last = (layers, predicted, len(set(layers)))
        # the worker's acquire, prefetch and (after the task) release: nothing reaches this stage's cache
        # between a task's acquire and its release (the engine calls them back to back), so one call
        if landing and not self.cache.room_for(layers):
            now = self._land_all(now)  # the task's own layers need the room that copies on their way hold
        moves = self.cache.acquire_prefetch_release(layers, upcoming, update)
        if moves:
            self._perform(moves, now)
        if landing and not landing.keys().isdisjoint(layers):  # most tasks: none of its layers is on its way
            return self._wait(layers, now)
        return now

    def _repeat(self, count: int) -> None:
        """A task with the last acquire's layers and prediction, the cache unchanged since: what
        :meth:`DeviceCache.acquire_prefetch_release` does then, without its walk.

        Why that is all. The last call left its layers held and arrived (it waited for their copies), and its
        prefetch placed what it could of the same prediction, in order, up to the first layer it could not; the
        call again, on that state, finds each of its layers held (a hit each; made the most recent again, which
        orders nothing new: they were the most recent), places none (its prefetch stops where the last one did:
        whether a layer fits depends on the state alone, :class:`~naspipe.context.cache._Ranking`) and moves
        nothing. Copies that landed since, or a mirror that replaced a layer, change that state: the full call."""
        stats = self.cache.stats
        stats.uses += count
        stats.hits += count

    def release(self, task: Task, layers: tuple[int, ...], now: float) -> float:
        """The cache released ``task``'s layers in :meth:`acquire` (dirty after an update)."""
        return now

    def replaced(self, layer: int) -> None:
        """As the runtime's ``ContextManager.replace``: wait for a copy in flight, drop the device copy
        (the host copy is overwritten; the next use fetches it)."""
        self._last = None
        if layer in self.landing:
            del self.landing[layer]
            self.cache.arrived(layer)
        if self.cache.holds(layer):
            self.cache.discard(layer)

    def _wait(self, layers: tuple[int, ...], now: float) -> float:
        """When the copies of ``layers`` on their way have landed (they arrive then: the task waits for them)."""
        landing, ready = self.landing, now
        for lid in layers:
            lands = landing.pop(lid, None)
            if lands is not None:
                if lands > ready:
                    ready = lands
                self.cache.arrived(lid)
        self.wait_s += ready - now
        return ready

    def _land_all(self, now: float) -> float:
        """Wait for every copy on its way (they land in order: the last one last); returns when it has.

        A mispredicted task can find the budget held by prefetched copies still in flight, which cannot be
        evicted mid-copy; it waits for them, then places its layers (micro-batched schedules, whose predictor
        re-plans less often, meet this)."""
        ready = max(now, self._last_lands)
        self.wait_s += ready - now
        self.cache.arrived_all(self.cache.in_flight)  # (a refused call's own copies too: they start now as well)
        self.landing.clear()
        return ready

    def _land_due(self, now: float) -> bool:
        """The copies landed by ``now`` arrive (the last one started has not: :meth:`acquire` lands all at once
        otherwise); whether any did."""
        landing = self.landing
        landed = [lid for lid, lands in landing.items() if lands <= now]
        if not landed:
            return False
        for lid in landed:
            del landing[lid]
        self.cache.arrived_all(landed)
        return True

    def _perform(self, moves: list[Move], now: float) -> None:
        copy_free, landing, copy_s = self.copy_free, self.landing, self._copy_s
        for layer, nbytes, direction in moves:
            if direction == "drop":
                continue
            seconds = copy_s.get(nbytes)
            if seconds is None:
                seconds = copy_s[nbytes] = 0.0 if self.costs.free_io else self.costs.hardware.copy_s(nbytes)
            copy_free = (now if now > copy_free else copy_free) + seconds
            if direction == "in":
                landing[layer] = self._last_lands = copy_free
        self.copy_free = copy_free


class _TaskLayers(dict[tuple[Kind, int, int], tuple[int, ...]]):
    """:func:`naspipe.scheduling.predictor.task_layers` of one stage's tasks, memoised by task: a subnet's tasks
    are predicted several times before they run, and the plan's caches, keyed by (subnet, stage) for every
    stage, cost more per lookup and stop holding a long run's window.

    A missing task (about one in four) is answered from the plan's per-subnet caches: an update's from
    ``trainable_slices`` (the same layers as ``trainable_layers``), and on a static plan a forward's or
    backward's as the stage's slice of ``subnet_layers`` (what ``stage_layers`` computes): a lookup and a slice,
    where the per-stage caches made one or two more Python calls and an insertion into their full LRU at each
    new task (per-subnet partitions still ask ``stage_layers``). An entry goes when its task starts
    (:meth:`ContextCache.acquire`: one ``pop`` per task, no call per update): every task predicted here runs
    here, and none is predicted once it started, so the memo holds the predicted window."""

    def __init__(self, plan: PipelinePlan) -> None:
        super().__init__()
        self._stage_layers, self._trainable_slices = plan.stage_layers, plan.trainable_slices
        self._subnet_layers = None if plan.mirrored else plan.subnet_layers
        self._bounds = plan.partition.bounds

    def __missing__(self, task: Task) -> tuple[int, ...]:
        kind, subnet, stage = task
        if kind is UPDATE:
            layers = self[task] = self._trainable_slices(subnet)[stage]
        elif self._subnet_layers is not None:  # a static plan: the stage's positions of the subnet's layers
            bounds = self._bounds
            layers = self[task] = self._subnet_layers(subnet)[bounds[stage]:bounds[stage + 1]]
        else:
            layers = self[task] = self._stage_layers(subnet, stage)
        return layers


def cache_sizes(costs: CostModel, structure: SpaceStructure) -> dict[int, int]:
    """Device bytes of each layer when resident: parameters, and for trainable ones gradients and optimizer state.

    As the runtime's :func:`naspipe.runtime.context.layer_bytes`, from shapes (buffers left out).
    """
    sizes = {}
    for lid in range(structure.num_layers):
        per_param = 2 + costs.optimizer_states if structure.is_trainable(lid) else 1
        sizes[lid] = max(1, int(costs.param_bytes(lid)) * per_param)
    return sizes
