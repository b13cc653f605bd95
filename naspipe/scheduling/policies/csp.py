"""Causal synchronous parallel: NASPipe's scheduler (paper section 4.2, Algorithm 2).

Update semantics: every subnet's forward, recompute and backward of a layer see exactly the
writes of all earlier subnets that use that layer and none of the later ones, so training
is bitwise the same as the sequential reference for any number of stages. A subnet's
update (``U``) is applied right after its backward and is what unblocks later users.

Decision: an update first, then a backward, then the lowest-id forward whose layers on
this stage are at the version it needs. Readiness is incremental: each registered subnet
keeps the count of its layers that still wait for an earlier writer, and a write only
decrements the count of that layer's next user (see :class:`VersionTable`).

Mirroring (per-subnet partitions, :meth:`PipelinePlan.per_subnet`): versions are global. A
stage counts every registered subnet's uses of every layer (on any stage), so a user's
required version is the number of earlier users anywhere. After an update, each written
layer whose next user (before the announced stream end) runs it on another stage yields a
:class:`Mirror` to that stage (:meth:`take_mirrors`); the receiving stage applies the state
and calls :meth:`mirror_arrived`, which may unblock its waiting user. A layer whose next
user lies past the stream end is remembered and mirrored when a later end is announced
(a drain point followed by more subnets). Never-written layers need no mirror: every
stage builds them from (seed, layer id).

Windowed shared layers (``shared_policy: windowed``, :mod:`naspipe.scheduling.windows`) are
outside the version rule: on a stage holding them, a subnet's forward also waits until the
windows before last are applied here (a count of applied windows, never a per-subnet
version). Updates run as CSP orders them; the shared gradients join the window's sum in id
order (an update that overtook an earlier one leaves them waiting for that one's update).
"""

from __future__ import annotations

from heapq import heappop, heappush

from naspipe.scheduling.mirror import Mirror
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import PolicyOptions, StagePolicy
from naspipe.scheduling.policies.registration import CHUNK_MASK, CHUNK_SHIFT, stage_rows
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, Task, new_task
from naspipe.scheduling.versions import VersionTable
from naspipe.scheduling.windows import SharedWindow


class CSP(StagePolicy):
    name = "csp"
    label = "NASPipe (CSP)"
    report_order = 1
    uses_cache = True
    causal = True
    mirroring = True
    windowed_shared = True

    def __init__(self, stage: int, plan: PipelinePlan, options: PolicyOptions) -> None:
        super().__init__(stage, plan, options)
        self.versions = VersionTable()
        self._mirrored = plan.mirrored  # read per task
        self._blocked: dict[int, int] = {}  # registered subnet -> layers not yet at its version
        self._waiting: set[int] = set()  # arrived forwards still blocked
        self._ready_f: list[int] = []
        self._ready_b: list[int] = []
        self._ready_u: list[int] = []
        self._uses: dict[int, int] = {}  # mirroring: users of each layer among registered subnets, any stage
        self._end: int | None = None
        self._mirrors: list[Mirror] = []
        self._unsent: dict[int, tuple[int, int]] = {}  # layer -> (writer, version): next user past the end
        holds_window = plan.windowed and stage in plan.windowed_stages
        self._window = SharedWindow(options.shared_window) if holds_window else None
        self._applied = 0  # windows applied here (the shared layers' version on this stage)
        self._next_update = 0  # the next subnet whose shared gradients join the window's sum here
        self._updated: set[int] = set()  # updates done above it (their shared gradients wait their turn)
        self._window_wait: dict[int, list[int]] = {}  # windows applied -> registered subnets waiting for it
        # Registration inlined in forward_arrived (once per subnet and stage, the simulator's hot path at
        # scale): a static plan, no shared window, and CSP's own _on_register (subclasses may override it).
        # Its layers come a chunk of subnets at a time (StageRows: no per-subnet walk of every stage's slice).
        self._rows = stage_rows(plan, stage) if self._window is None and type(self)._on_register is CSP._on_register \
            else None
        self._plain = self._rows is not None
        self._chunks = self._rows.chunks if self._rows is not None else {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A subclass that changes a part of :meth:`completed_then_next` (the completion or the choice) but
        not the fused method itself gets the plain one (the two calls), so the fusion stays exact."""
        super().__init_subclass__(**kwargs)
        parts = ("completed", "next_task", "_write", "_accumulated")
        if "completed_then_next" not in cls.__dict__ and any(getattr(cls, p) is not getattr(CSP, p) for p in parts):
            cls.completed_then_next = StagePolicy.completed_then_next  # type: ignore[method-assign]

    def clone(self) -> CSP:
        """Copies only what running ahead mutates (a deep copy costs far more per task)."""
        other = self._clone_base()
        other.versions = self.versions.copy()
        other._blocked = dict(self._blocked)
        other._waiting = set(self._waiting)
        other._ready_f, other._ready_b, other._ready_u = list(self._ready_f), list(self._ready_b), list(self._ready_u)
        other._uses = dict(self._uses)
        other._mirrors = []
        other._unsent = dict(self._unsent)
        other._updated = set(self._updated)
        other._window_wait = {v: list(ys) for v, ys in self._window_wait.items()}
        return other

    def resume_at(self, start: int) -> None:
        super().resume_at(start)
        if self._window is not None:  # the restored shared layers hold every window closed before start
            self._applied, self._next_update = self._window.applied_before(start), start
        if not self.plan.mirrored:
            return
        for subnet in range(start):  # everything restored is at its newest version
            for layer in self.plan.subnet_versioned(subnet):
                self._uses[layer] = self._uses.get(layer, 0) + 1
        for layer, count in self._uses.items():  # every stage restored the newest states: no mirrors due
            self.versions.advance(layer, count)

    def stream_ends_at(self, total: int) -> None:
        self.messages += 1
        self._end = total
        for layer, (writer, version) in list(self._unsent.items()):
            del self._unsent[layer]
            self._mirror(layer, writer, version)

    def take_mirrors(self) -> list[Mirror]:
        mirrors, self._mirrors = self._mirrors, []
        return mirrors

    def mirror_arrived(self, layer: int, version: int) -> None:
        self.messages += 1
        self._unblock(self.versions.advance(layer, version))

    def may_admit(self, subnet: int) -> bool:
        return self.inflight < self.options.max_inflight

    def next_task(self) -> Task | None:
        if self._ready_u:  # updates, then backwards, then the lowest ready forward
            return new_task((UPDATE, heappop(self._ready_u), self.stage))
        if self._ready_b:
            return new_task((BACKWARD, heappop(self._ready_b), self.stage))
        if self._ready_f:
            return new_task((FORWARD, heappop(self._ready_f), self.stage))
        return None

    def completed(self, task: Task) -> None:
        """:meth:`StagePolicy.completed`, whole: a backward queues its update, an update writes (once per task)."""
        kind, subnet, _ = task
        if kind is FORWARD:
            if not self.is_last:
                self._awaiting_backward[subnet] = None
        elif kind is BACKWARD:
            heappush(self._ready_u, subnet)
        else:  # the update, CSP's final kind
            self._write(subnet)
            self.finished += 1
            if self._window is not None:
                self._accumulated(subnet)

    def completed_then_next(self, task: Task) -> Task | None:
        """:meth:`completed` then :meth:`next_task` in one pass (the simulator's call after every task).

        After a backward its update is next (the ready updates are empty then: an update is taken as soon
        as it is queued; if one were there, the heap decides, as before); after an update, the writes."""
        kind, subnet, _ = task
        if kind is BACKWARD:
            if not self._ready_u:  # heappush then heappop of a heap holding only it
                return new_task((UPDATE, subnet, self.stage))
            heappush(self._ready_u, subnet)
        elif kind is FORWARD:
            if not self.is_last:
                self._awaiting_backward[subnet] = None
        else:  # the update, CSP's final kind
            self._write(subnet)
            self.finished += 1
            if self._window is not None:
                self._accumulated(subnet)
        if self._ready_u:  # next_task, inlined
            return new_task((UPDATE, heappop(self._ready_u), self.stage))
        if self._ready_b:
            return new_task((BACKWARD, heappop(self._ready_b), self.stage))
        if self._ready_f:
            return new_task((FORWARD, heappop(self._ready_f), self.stage))
        return None

    def forward_arrived(self, subnet: int) -> None:
        """:meth:`StagePolicy.forward_arrived`, whole: ready if its layers are at its versions, else waiting."""
        self.messages += 1
        if self._registered <= subnet:
            if self._plain and self._registered == subnet:  # _on_register, inlined for the common case
                rows = self._chunks.get(subnet >> CHUNK_SHIFT)
                if rows is None:
                    rows = self._rows.chunk(subnet >> CHUNK_SHIFT)  # type: ignore[union-attr]
                self._blocked[subnet] = self.versions.register_local(subnet, rows[subnet & CHUNK_MASK])
            else:
                for y in range(self._registered, subnet + 1):
                    self._on_register(y)
            self._registered = subnet + 1
        if subnet == self._arrived_below and not self._arrived_ahead:
            self._arrived_below = subnet + 1
        else:
            self._note_arrival(subnet)
        if self._blocked[subnet]:
            self._waiting.add(subnet)
        else:
            heappush(self._ready_f, subnet)

    def backward_arrived(self, subnet: int) -> None:
        """:meth:`StagePolicy.backward_arrived`, whole: the backward is ready."""
        self.messages += 1
        self._awaiting_backward.pop(subnet, None)
        heappush(self._ready_b, subnet)

    def _on_register(self, subnet: int) -> None:
        here = self.plan.versioned_slices(subnet)[self.stage]
        if not self._mirrored:
            self._blocked[subnet] = self.versions.register(subnet, here)
        else:
            uses = self._uses
            required = {layer: uses.get(layer, 0) for layer in here}
            for layer in self.plan.subnet_versioned(subnet):
                uses[layer] = uses.get(layer, 0) + 1
            self._blocked[subnet] = self.versions.register(subnet, here, required)
        if self._window is not None:
            self._register_window(subnet)

    def _register_window(self, subnet: int) -> None:
        """Block ``subnet`` until the shared-layer version it reads is here (windows before last applied)."""
        assert self._window is not None
        need = self._window.read_version(subnet)
        if need > self._applied:
            self._blocked[subnet] += 1
            self._window_wait.setdefault(need, []).append(subnet)

    def _accumulated(self, subnet: int) -> None:
        """``subnet``'s update is done: the shared gradients of every update done in id order so far join
        the window's sum (the executor does the same at the same update), and closed windows unblock readers."""
        window = self._window
        assert window is not None
        self._updated.add(subnet)
        while self._next_update in self._updated:
            self._updated.remove(self._next_update)
            if window.closes_window(self._next_update):
                self._applied += 1
                for reader in self._window_wait.pop(self._applied, []):
                    self._unblock(reader)
            self._next_update += 1

    def _write(self, subnet: int) -> None:
        if not self._mirrored:  # the layers it registered here, in that order: no plan lookup
            blocked, waiting, ready = self._blocked, self._waiting, self._ready_f
            for unblocked in self.versions.write_all(subnet):  # the layers it registered; _unblock, inlined
                left = blocked[unblocked] - 1
                blocked[unblocked] = left
                if not left and unblocked in waiting:
                    waiting.remove(unblocked)
                    heappush(ready, unblocked)
            del blocked[subnet]
            return
        layers = self.plan.versioned_slices(subnet)[self.stage]
        versions = [self.versions.required(subnet, layer) + 1 for layer in layers]
        for unblocked in self.versions.write_all(subnet, layers):
            self._unblock(unblocked)
        del self._blocked[subnet]
        for layer, version in zip(layers, versions, strict=True):
            self._mirror(layer, subnet, version)

    def _unblock(self, subnet: int | None) -> None:
        if subnet is None:
            return
        self._blocked[subnet] -= 1
        if not self._blocked[subnet] and subnet in self._waiting:
            self._waiting.remove(subnet)
            heappush(self._ready_f, subnet)

    def lookahead_view(self) -> tuple[list[int], list[int], list[int], set[int], dict[int, int], int]:
        """The live queues the predictor's :class:`~naspipe.scheduling.predictor.CSPLookahead` reads (not
        copies): ready updates, backwards and forwards (heaps), arrived forwards still blocked, the
        registered subnets that have not written here (keys), and how many subnets are registered."""
        return self._ready_u, self._ready_b, self._ready_f, self._waiting, self._blocked, self._registered

    def overtaken(self) -> set[int]:
        """Forwards that arrived here before an earlier one (not future arrivals: the predictor's)."""
        return self._arrived_ahead

    def _mirror(self, layer: int, writer: int, version: int) -> None:
        """Send ``layer`` to its next user's stage if that is elsewhere; past the end, remember it."""
        if self.speculative:
            return
        end = self._end if self._end is not None else writer + (1 << 20)
        user = self.plan.next_user(layer, writer, end)
        if user is None:
            self._unsent[layer] = (writer, version)
        elif (stage := self.plan.stage_of(user, layer)) != self.stage:
            self._mirrors.append(Mirror(layer, version, stage, writer))
