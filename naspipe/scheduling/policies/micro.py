"""Micro-batched causal pipelines: CSP and its sequential reference with each subnet's batch in parts.

Why: with one indivisible task per subnet and stage, a later subnet that shares a candidate
with an earlier one waits, at that layer, for the earlier one's forward through every later
stage, its whole backward back down and its update. That chain grows with the number of
stages D while each stage's share of the work shrinks, so CSP's throughput stays flat as D
grows. Splitting each subnet's batch into ``m`` micro-batches lets one subnet fill the
pipeline by itself (as GPipe's chunks do) and shortens that chain; a split backward takes the
weight gradients off it; and a stage that orders its ready tasks by what a later subnet waits
for runs the chain's tasks first.

Semantics (what :class:`MicroSequential`, the reference, computes, and every D reproduces):
subnet ``y``'s batch is split into ``m`` fixed parts (the split depends on ``m`` only); each
part runs forward and backward through ``y``'s layers on the parameter version CSP gives
``y`` (every earlier user's writes, no later one's); the parts' weight gradients are summed
in part order (part 0's first); then one optimizer step per layer, as for ``m = 1``. With a
split backward, part ``j``'s backward is two tasks: ``B`` (the gradient of the stage's input,
sent upstream at once) and ``W`` (the weight gradients, summed in part order). Both are part
of the reference: sequential with the same ``m`` and split computes the same bits.

Scheduling on a stage (tasks are :class:`~naspipe.scheduling.task.MicroTask`):

- ``F(y, j)`` is ready when part ``j`` arrived and ``y``'s layers here are at its version
  (CSP's version rule, :class:`~naspipe.scheduling.versions.VersionTable`, once per subnet:
  its parts all read one version); ``B(y, j)`` when its gradient arrived (the last stage: after
  its own forward); ``W(y, j)`` after ``B(y, j)``; ``U(y)`` after the ``m`` parts' weight
  gradients (``B`` or ``W``). Parts arrive in order over a link and are taken lowest first, so
  each stage sums the parts' gradients in part order whatever the interleaving.
- ``priority: critical``: first an update that a later subnet is waiting for (one that uses a
  layer of it here within the in-flight window; on stage 0 every update, which also frees an
  admission), then backwards, then forwards (lowest subnet first), then weight tasks (those of
  such subnets first) and the remaining updates, which fill idle time. Weight tasks come after
  the forwards because a subnet's weight task gates only its update on this stage, while its
  forward and backward parts gate its updates on every stage above (its last part's gradient
  must come back down): when a later subnet conflicts with it upstream, weight tasks run first
  hold up that gradient's round trip, and the stages above idle (nlp.c3 on 8 stages: 12-16 % of
  the busiest stages' time before). ``fifo``: update, weight, backward, forward, as CSP orders
  them. Either way at most ``m`` weight tasks wait when a backward starts (with more, one runs
  first): each keeps its part's activations alive (the memory model counts them).
- ``one_holder`` (on with the context manager, which keeps a subnet's layers on the device from its
  first backward part here, on the last stage its first forward part, to its update): a task that
  would start a second such hold waits for the holder's update. So a stage's cache holds at most the
  holder's layers and one running task's, and the budget checked at the start (two shares) is
  enough for the whole run. It cannot deadlock: a subnet holding here holds on every later stage it
  has reached, so none of its own tasks ever waits for this rule.

Registration, the version table, mirrors (per-subnet partitions) and windowed shared layers
are CSP's own, unchanged: a subnet registers when its first part arrives, writes at its update.
"""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heapify, heappop, heappush

from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import PolicyOptions
from naspipe.scheduling.policies.csp import CSP
from naspipe.scheduling.policies.registration import CHUNK_MASK, CHUNK_SHIFT
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, WEIGHT, AnyTask, Kind, MicroTask, Task, new_task

Part = tuple[int, int]  # (subnet, micro-batch)


class MicroCSP(CSP):
    """CSP over micro-batch tasks (module docstring)."""

    def __init__(self, stage: int, plan: PipelinePlan, options: PolicyOptions) -> None:
        super().__init__(stage, plan, options)
        self.micro_batches = options.parts_here  # the parts this stage runs: m, or m / R on each of R replicas
        # replicated stages: an update waits, after the stage's own parts, for the replicas' ordered sum (reduced)
        self._gated = options.replicas > 1
        self._awaiting_sum: set[int] = set()  # own parts done, the replicas' sum not here yet
        self.newly_awaiting: list[int] = []  # subnets that began awaiting the sum (the simulator prices the exchange)
        self.split = options.split_backward
        self._critical = options.priority == "critical"
        self._plain = False  # registration through _on_register (CSP's inlined path is its own forward_arrived)
        self._pending_f: dict[int, list[int]] = {}  # arrived parts not yet run forward, per subnet, in order
        self._arrived_parts: dict[int, int] = {}  # parts arrived so far of subnets not all arrived
        self._ready_parts_b: list[Part] = []
        # weight tasks and updates that a later subnet waits for (critical), and the others (idle time)
        self._urgent_w: list[Part] = []
        self._idle_w: list[Part] = []
        self._urgent_u: list[int] = []
        self._parts_done: dict[int, int] = {}  # parts whose weight gradients are summed, per subnet
        # subnet -> a later in-flight subnet uses one of its layers here: a function of the plan alone, so the
        # predictor's clones share it (a shallow copy keeps the dict) and nobody removes an entry
        self._needed: dict[int, bool] = {}
        self._awaiting_parts: dict[Part, None] = {}  # forwards done here, gradient not back yet, in order
        # the predictor's last plan: (horizon, the running subnet-level task and the answer after it) (micro_predictor)
        self.last_prediction: tuple[int, list[Task]] | None = None
        self._one_holder = options.one_holder
        self._holder: int | None = None  # (one_holder) the subnet between its first hold and its update here
        # (the predictor's clones only) subnets [a, b) that arrived whole and blocked, not yet registered: see
        # arrivals_ahead; and the layers of each of the stage's versioned positions, which tell when that holds
        self._lazy: tuple[int, int] | None = None
        self._positions = _versioned_positions(plan, stage) if self._rows is not None else None

    def clone(self) -> MicroCSP:
        other = super().clone()
        assert isinstance(other, MicroCSP)
        other._pending_f = {y: parts[:] for y, parts in self._pending_f.items()}
        other._arrived_parts = dict(self._arrived_parts)
        other._ready_parts_b = list(self._ready_parts_b)
        other._urgent_w, other._idle_w, other._urgent_u = list(self._urgent_w), list(self._idle_w), list(self._urgent_u)
        other._parts_done = dict(self._parts_done)
        other._awaiting_parts = dict(self._awaiting_parts)
        other._awaiting_sum, other.newly_awaiting = set(), []
        for subnet in sorted(self._awaiting_sum):  # a copy runs ahead as if every sum came at once (sends nothing)
            other._update_ready(subnet)
        return other

    # -- events -------------------------------------------------------------
    def admit(self, subnet: int) -> None:
        """All of ``subnet``'s parts enter the pipeline (stage 0 splits its batch)."""
        if not self.is_first or subnet != self.admitted:
            raise RuntimeError(f"stage {self.stage}: cannot admit subnet {subnet} (next is {self.admitted})")
        self.admitted += 1
        self.forward_arrived(subnet, 0)
        self._arrive_more(subnet, 1)

    def _arrive_more(self, subnet: int, first: int) -> None:
        """Parts ``first`` .. ``m - 1`` of ``subnet`` arrive, part ``first - 1`` having arrived just before (it
        registered the subnet and queued it): :meth:`forward_arrived` for each, in one step (none of them
        changes whether the subnet is blocked or queued; each adds one message, one arrived part and one
        pending forward)."""
        rest = self.micro_batches - first
        if rest <= 0:
            return
        self.messages += rest
        count = self._arrived_parts[subnet] + rest  # (part first - 1 left it short of m: it is listed)
        if count == self.micro_batches:
            del self._arrived_parts[subnet]
        else:
            self._arrived_parts[subnet] = count
        self._pending_f[subnet].extend(range(first, self.micro_batches))

    def forward_arrived(self, subnet: int, micro: int = 0) -> None:
        self.messages += 1
        if micro == 0:
            self._register_through(subnet)
            self._note_arrival(subnet)
        count = self._arrived_parts.get(subnet, 0) + 1
        if count == self.micro_batches:
            self._arrived_parts.pop(subnet, None)
        else:
            self._arrived_parts[subnet] = count
        pending = self._pending_f.setdefault(subnet, [])
        pending.append(micro)
        if self._blocked[subnet]:
            self._waiting.add(subnet)
        elif len(pending) == 1:  # not queued yet (a queued subnet keeps its place until its parts ran)
            heappush(self._ready_f, subnet)

    def _register_through(self, subnet: int) -> None:
        """Registration through ``subnet``: on a static plan without a shared window, each subnet's layers from the
        stage's rows a chunk at a time and straight into the version table, as :meth:`CSP.forward_arrived`'s inlined
        path registers them (the predictor's run ahead registers tens of subnets); else CSP's ``_on_register``."""
        rows_of = self._rows
        if rows_of is None:
            super()._register_through(subnet)
            return
        chunks, blocked, register = self._chunks, self._blocked, self.versions.register_local
        y = self._registered
        while y <= subnet:
            rows = chunks.get(y >> CHUNK_SHIFT)
            if rows is None:
                rows = rows_of.chunk(y >> CHUNK_SHIFT)
            blocked[y] = register(y, rows[y & CHUNK_MASK])
            y += 1
        self._registered = y

    def backward_arrived(self, subnet: int, micro: int = 0) -> None:
        self.messages += 1
        self._awaiting_parts.pop((subnet, micro), None)
        heappush(self._ready_parts_b, (subnet, micro))

    def completed(self, task: Task | MicroTask) -> None:
        kind, subnet, _, micro = task  # type: ignore[misc]
        if kind is FORWARD:
            if not self.is_last:
                self._awaiting_parts[(subnet, micro)] = None
        elif kind is BACKWARD:
            if not self.split:
                self._part_done(subnet)
            elif self._critical and self._is_needed(subnet):
                heappush(self._urgent_w, (subnet, micro))
            else:
                heappush(self._idle_w, (subnet, micro))
        elif kind is WEIGHT:
            self._part_done(subnet)
        else:  # the update: CSP's writes, mirrors and window
            if self._lazy is not None:  # the write reads the queues and counts of the subnets it may unblock
                self._materialize_for(subnet)
            if self._holder == subnet:
                self._holder = None
            del self._parts_done[subnet]
            self._write(subnet)
            self.finished += 1
            if self._window is not None:
                self._accumulated(subnet)

    def completed_then_next(self, task: Task | MicroTask) -> MicroTask | None:  # type: ignore[override]
        """:meth:`completed` then :meth:`next_task` (CSP's one-pass version reads subnet-level tasks)."""
        self.completed(task)
        return self.next_task()

    def _part_done(self, subnet: int) -> None:
        done = self._parts_done.get(subnet, 0) + 1
        self._parts_done[subnet] = done
        if done == self.micro_batches:
            if self._gated and not self.speculative:
                self._awaiting_sum.add(subnet)
                self.newly_awaiting.append(subnet)
            else:
                self._update_ready(subnet)

    def _update_ready(self, subnet: int) -> None:
        heappush(self._urgent_u if self._critical and self._is_needed(subnet) else self._ready_u, subnet)

    def reduced(self, subnet: int) -> None:
        """(replicated stages) The replicas' ordered sum of ``subnet``'s part gradients is here: its update may run
        once this stage's own parts are done (:mod:`naspipe.runtime.exchange`). The sum always follows them: each
        replica contributes only once its own parts are in, and the total comes after every contribution."""
        if subnet not in self._awaiting_sum:
            raise RuntimeError(f"stage {self.stage}: the replicas' sum of subnet {subnet} came before its own parts")
        self.messages += 1
        self._awaiting_sum.discard(subnet)
        self._update_ready(subnet)

    # -- decisions ----------------------------------------------------------
    def next_task(self) -> MicroTask | None:  # type: ignore[override]
        stage = self.stage
        if self._urgent_u:  # critical: what a later subnet waits for
            return MicroTask(UPDATE, heappop(self._urgent_u), stage)
        if not self._critical:
            return self._next_fifo()
        if len(self._urgent_w) + len(self._idle_w) <= self.micro_batches:  # else one runs first (module docstring)
            task = self._next_part()
            if task is not None:
                return task
        if self._urgent_w or self._idle_w:  # they fill idle time, those a later subnet waits for first
            y, j = heappop(self._urgent_w or self._idle_w)
            return MicroTask(WEIGHT, y, stage, j)
        if self._ready_u:
            return MicroTask(UPDATE, heappop(self._ready_u), stage)
        return None

    def _next_fifo(self) -> MicroTask | None:
        """:meth:`next_task` with ``priority: fifo``: update, weight, backward, forward."""
        stage = self.stage
        if self._ready_u and len(self._idle_w) <= self.micro_batches:
            return MicroTask(UPDATE, heappop(self._ready_u), stage)
        if self._idle_w:
            y, j = heappop(self._idle_w)
            return MicroTask(WEIGHT, y, stage, j)
        return self._next_part()

    def _next_part(self) -> MicroTask | None:
        """The next backward part, else the next forward part, else None."""
        part = self._take_backward()
        if part is not None:
            return MicroTask(BACKWARD, part[0], self.stage, part[1])
        part = self._take_forward()
        if part is not None:
            return MicroTask(FORWARD, part[0], self.stage, part[1])
        return None

    def _take_backward(self) -> Part | None:
        """The next backward part: the lowest ready one; with ``one_holder``, the holder's (or none)."""
        heap, holder = self._ready_parts_b, self._next_holder()
        if not heap:
            return None
        if not self._one_holder or holder is None or heap[0][0] == holder:
            part = heappop(heap)
            if starts_hold(BACKWARD, self.is_last):
                self._hold(part[0])
            return part
        mine = min((p for p in heap if p[0] == holder), default=None)
        if mine is None:
            return None  # another subnet's backward would start a second hold: after the holder's update
        heap.remove(mine)
        heapify(heap)
        if starts_hold(BACKWARD, self.is_last):  # (a replicated stage's next holder starts its hold here)
            self._hold(mine[0])
        return mine

    def _take_forward(self) -> Part | None:
        """The next forward part: the lowest ready subnet's next part. With ``one_holder`` on the last stage
        (which keeps its forward state for the backward: a forward starts the hold), the holder's or none."""
        ready = self._ready_f
        if not ready:
            return None
        y = ready[0]
        holder = self._next_holder()
        if self._one_holder and self.is_last and holder is not None and y != holder:
            if holder not in ready:
                return None
            y = holder
        pending = self._pending_f[y]
        j = pending.pop(0)
        if not pending:
            if y == ready[0]:
                heappop(ready)
            else:
                ready.remove(y)
                heapify(ready)
            del self._pending_f[y]
        if starts_hold(FORWARD, self.is_last):
            self._hold(y)
        return y, j

    def _hold(self, subnet: int) -> None:
        if self._one_holder:
            self._holder = subnet

    def _next_holder(self) -> int | None:
        """(one_holder) The subnet whose tasks may hold the stage now: the holder's, or with none, any subnet (None)
        but on a replicated stage: there holds go in subnet order (the next is the first not yet updated here), so
        that every replica holds the same subnet at a time. Otherwise two replicas could each hold a subnet whose
        update waits for the replicas' sum, which waits for the other replica's parts of it, behind the other hold."""
        if self._holder is not None or not self._gated:
            return self._holder
        return self.finished

    def _is_needed(self, subnet: int) -> bool:
        """Whether a later subnet within the in-flight window uses one of ``subnet``'s layers here (its
        update unblocks that one), or the update has more to do than write: stage 0's frees an admission,
        a windowed stage's closes windows. The predictor's question, asked of the plan's stream."""
        needed = self._needed.get(subnet)
        if needed is None:
            if self.is_first or self._window is not None:
                needed = True
            else:
                end = subnet + 1 + self.options.max_inflight
                if self._end is not None and self._end < end:
                    end = self._end
                here = set(self.plan.versioned_slices(subnet)[self.stage])
                versioned = self.plan.subnet_versioned  # every stage's: with mirroring the user may run elsewhere
                needed = any(not here.isdisjoint(versioned(later)) for later in range(subnet + 1, end))
            self._needed[subnet] = needed
        return needed

    # -- what the predictor reads and runs --------------------------------
    def arrive_ahead(self, subnet: int, first: int, limit: int) -> int:
        """The predictor's arrivals on a stage between the first and the last with nothing to run: parts
        ``first``, ``first + 1``, ... of ``subnet`` arrive one at a time and, unless the subnet is blocked, each
        one's forward runs and completes before the next arrives (with nothing else queued, :meth:`next_task`
        answers it), for at most ``limit`` parts. Returns how many forwards ran; 0: the subnet is blocked, and
        every part of it arrived. The state after is that of those calls (:meth:`forward_arrived`,
        :meth:`next_task`, :meth:`completed`), made one by one."""
        self.forward_arrived(subnet, first)  # registers the subnet at its first part
        if self._blocked[subnet]:
            self._arrive_more(subnet, first + 1)
            return 0
        return self._run_arrived(subnet, first, limit)

    def arrivals_ahead(self, arrival: Part, runs: Iterator[Part], limit: int,
                       end: int) -> tuple[int, int, int, Part | None]:
        """:meth:`arrive_ahead` of ``arrival``, then, while its subnet is blocked, of the next runs of ``runs`` in
        turn (the predictor does nothing between them then: a blocked subnet's arrival leaves nothing to run and
        no gradient to release while more can arrive). Returns ``(subnet, first, ran, next arrival)``: the last
        subnet that arrived, its first part that did, how many forwards it ran (0: it was blocked, and ``runs``
        ended) and what arrives next. A subnet none of whose parts had arrived arrives whole in one step (part
        0's :meth:`forward_arrived` inlined, the others' counts added), the predictor's longest stretches.

        Such a stretch can run to the stream's ``end`` (each blocked subnet that registers is one more unwritten
        user, so later ones are blocked the more): once every subnet still to come is certainly blocked (a
        versioned position of the stage whose every candidate has an unwritten user, and none of them registered
        yet), they all arrive at once, lazily (:attr:`_lazy`). Nothing reads them until a write: none can run,
        and only a write looks at the version queues and blocked counts, of the next user of each layer it
        writes; so a write first registers the lazy subnets up to those (:meth:`_materialize_for`), in order."""
        m, pending_f, arrived_parts, blocked = self.micro_batches, self._pending_f, self._arrived_parts, self._blocked
        checks = 0
        while True:
            subnet, first = arrival
            if first or subnet in arrived_parts or subnet in pending_f:
                ran = self.arrive_ahead(subnet, first, limit)
            else:  # forward_arrived(subnet, 0): registration, arrival, the part queued or waiting
                self.messages += 1
                self._register_through(subnet)
                self._note_arrival(subnet)
                if blocked[subnet]:  # and every later part (_arrive_more): none runs
                    self.messages += m - 1
                    pending_f[subnet] = list(range(m))
                    self._waiting.add(subnet)
                    ran = 0
                    checks += 1
                    if checks == _LAZY_CHECK:
                        checks = 0
                        if subnet + 1 < end and subnet + 1 == self._registered and self._all_blocked():
                            self._lazy = (subnet + 1, end)
                            return subnet, first, 0, None
                else:
                    if m > 1:
                        arrived_parts[subnet] = 1
                    pending_f[subnet] = [0]
                    heappush(self._ready_f, subnet)
                    ran = self._run_arrived(subnet, 0, limit)
            if ran:
                after = first + ran
                return subnet, first, ran, (subnet, after) if after < m else next(runs, None)
            following = next(runs, None)
            if following is None:
                return subnet, first, 0, None
            arrival = following

    def _all_blocked(self) -> bool:
        """Whether every subnet that registers next here is blocked: some versioned position of the stage has an
        unwritten user queued on each of its candidates (a subnet's layer there is one of them)."""
        assert self._positions is not None
        waiting = self.versions._waiting  # noqa: SLF001 - the queues, read (a subnet registers blocked where one is)
        return any(all(waiting.get(layer) for layer in layers) for layers in self._positions)

    def _materialize_for(self, writer: int) -> None:
        """Before ``writer``'s write: the lazy arrivals of :meth:`arrivals_ahead` up to the first lazy user of each
        layer whose last registered user is ``writer`` (the one its write unblocks), made as the stretch would
        have made them (registered, arrived whole and waiting, in id order). The rest stay lazy and blocked: a
        layer the write leaves without users has none among them."""
        assert self._lazy is not None and self._rows is not None
        first, end = self._lazy
        queues = self.versions._waiting  # noqa: SLF001 - read: whose write leaves a layer to a lazy user
        row = self._row
        wanted = {layer for layer in row(writer) if (queue := queues.get(layer)) and queue[-1] == writer}
        upto = first
        subnet = first
        while wanted and subnet < end:
            found = wanted.intersection(row(subnet))
            subnet += 1
            if found:
                wanted -= found
                upto = subnet
        if upto == first:
            return
        self._lazy = (upto, end) if upto < end else None
        m, pending_f, waiting, blocked = self.micro_batches, self._pending_f, self._waiting, self._blocked
        for y in range(first, upto):
            self.messages += m
            self._register_through(y)
            self._note_arrival(y)
            assert blocked[y], f"subnet {y} arrived lazily but is not blocked"
            pending_f[y] = list(range(m))
            waiting.add(y)

    def _row(self, subnet: int) -> list[int]:
        """The layers ``subnet`` registers here (a static plan's stage rows)."""
        assert self._rows is not None
        rows = self._chunks.get(subnet >> CHUNK_SHIFT)
        if rows is None:
            rows = self._rows.chunk(subnet >> CHUNK_SHIFT)
        return rows[subnet & CHUNK_MASK]

    def _run_arrived(self, subnet: int, first: int, limit: int) -> int:
        """Part ``first`` of ``subnet`` arrived, not blocked, the only queued forward: it and the later parts, each
        arriving after the last one's forward, run and complete, at most ``limit`` (:meth:`arrive_ahead`)."""
        ready = self._ready_f
        assert ready == [subnet] and self._pending_f[subnet] == [first] and not self.is_last, "not an idle middle stage"
        ran = min(limit, self.micro_batches - first)
        ready.clear()  # _take_forward's pops: the part was the only queued forward, as is each next one
        del self._pending_f[subnet]
        if ran > 1:  # the later parts' arrivals (forward_arrived's counts)
            self.messages += ran - 1
            count = self._arrived_parts[subnet] + ran - 1
            if count == self.micro_batches:
                del self._arrived_parts[subnet]
            else:
                self._arrived_parts[subnet] = count
        awaiting = self._awaiting_parts  # completed(F): the gradients to come back
        for j in range(first, first + ran):
            awaiting[(subnet, j)] = None
        return ran

    def forwards_ahead(self, subnet: int) -> int:
        """The predictor's run of ``subnet``'s forwards right after its admission on the first stage (not also
        the last), with nothing else to run: each part's forward runs and completes in part order (what
        :meth:`next_task` and :meth:`completed` do, one by one). Returns how many ran: ``m``, or 0 when the
        subnet is blocked or other work is queued (nothing then changed)."""
        ready = self._ready_f
        if self._blocked[subnet] or ready != [subnet] or self.is_last or self._urgent_u or self._ready_parts_b \
                or len(self._urgent_w) + len(self._idle_w) > self.micro_batches or (
                    not self._critical and (self._ready_u or self._idle_w)):
            return 0
        ready.clear()
        parts = self._pending_f.pop(subnet)
        awaiting = self._awaiting_parts
        for j in parts:
            awaiting[(subnet, j)] = None
        return len(parts)

    def pending_part_runs(self, end: int) -> Iterator[Part]:
        """:meth:`pending_parts` as runs: ``(subnet, first)`` for parts ``first`` .. ``m - 1`` of ``subnet``."""
        partial = sorted(self._arrived_parts.items())
        for subnet in self.pending_arrivals(end):
            while partial and partial[0][0] < subnet:
                yield partial.pop(0)
            yield subnet, 0
        yield from partial

    def awaiting_parts(self) -> list[Part]:
        """Parts whose forward ran here and whose gradient has not come back, in forward order."""
        return list(self._awaiting_parts)

    def pending_parts(self, end: int) -> Iterator[Part]:
        """Parts of subnets below ``end`` that have not reached this stage yet, in (subnet, part) order."""
        partial = sorted(self._arrived_parts.items())
        for subnet in self.pending_arrivals(end):
            while partial and partial[0][0] < subnet:
                y, count = partial.pop(0)
                yield from ((y, j) for j in range(count, self.micro_batches))
            yield from ((subnet, j) for j in range(self.micro_batches))
        for y, count in partial:
            yield from ((y, j) for j in range(count, self.micro_batches))


class MicroSequential(MicroCSP):
    """The reference with micro-batches (or a split backward): one subnet in the pipeline at a time.

    Its parts still flow through the stages as CSP's do (the per-part arithmetic does not depend on
    the order of unrelated tasks); only one subnet is admitted until the previous one's last update."""

    name = "sequential"
    label = "sequential reference"
    report_order = 0
    mirroring = False

    def may_admit(self, subnet: int) -> bool:
        return self.inflight == 0


_LAZY_CHECK = 32  # blocked arrivals in a row between two looks at whether every later one is blocked


def _versioned_positions(plan: PipelinePlan, stage: int) -> list[tuple[int, ...]]:
    """The layers (every candidate) of each of ``stage``'s versioned positions on a static plan (those whose layers
    are trainable; with a static plan and no shared window, the positions :class:`StageRows` keeps)."""
    s = plan.structure
    n_prefix, n_blocks = len(s.prefix), len(s.blocks)
    out = []
    for position in range(plan.partition.bounds[stage], plan.partition.bounds[stage + 1]):
        if position < n_prefix:
            layers: tuple[int, ...] = (position,)
        elif position < n_prefix + n_blocks:
            block = position - n_prefix
            layers = tuple(s.layer_id(block, c) for c in range(len(s.blocks[block])))
        else:
            layers = (s.num_layers - len(s.suffix) + (position - n_prefix - n_blocks),)
        if s.is_trainable(layers[0]):
            out.append(layers)
    return out


MICRO_POLICIES: dict[str, type[MicroCSP]] = {"csp": MicroCSP, "sequential": MicroSequential}
"""The systems that run micro-batched schedules (the others refuse ``micro_batches`` > 1 or a split)."""


def starts_hold(kind: Kind, is_last: bool) -> bool:
    """Whether a task of ``kind`` leaves its subnet's layers held on the stage (kept on the device, with the
    context manager) until the subnet's update there: a backward part (its weight gradients wait for the update),
    and on the last stage a forward part (it keeps its state for the backward that follows at once instead of
    recomputing it). The one statement of the rule: the policy's ``one_holder`` and the runtime's cache both
    read it."""
    return kind is not FORWARD or is_last


def as_plain(task: MicroTask) -> Task:
    """The subnet-level task whose layers ``task`` uses (a weight task: the backward's)."""
    kind = task[0]
    return new_task((BACKWARD if kind is WEIGHT else kind, task[1], task[2]))


def plain_task(task: AnyTask) -> Task:
    """The subnet-level task whose layers ``task`` uses, for a task of either kind (a subnet-level one: itself);
    what the runtime's and the simulator's residencies ask the cache and the predictor with."""
    return task if isinstance(task, Task) else as_plain(task)


__all__ = ["MICRO_POLICIES", "MicroCSP", "MicroSequential", "as_plain", "plain_task", "starts_hold"]
