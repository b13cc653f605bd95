"""The predictor (paper Algorithm 3): which tasks a stage runs next, hence which layers it needs.

Public API (stable; the simulator reuses it):

- :func:`predict` ``(policy, horizon, end, running=None) -> list[Task]``: the next ``horizon``
  tasks the stage's own policy would run, found by running that policy forward on a *copy*
  of its state. The live policy is never touched. For CSP on a static plan the answer comes from
  :class:`CSPLookahead` (the same tasks, without the copy: the cache's cost at scale); elsewhere,
  and as the reference, from :func:`predict_by_copy`.
- :func:`task_layers` ``(plan, task) -> tuple[int, ...]``: the layers a task uses on its stage
  (forward and backward: all of the subnet's layers there; update: the trainable ones).
- :func:`layer_uses` ``(plan, tasks) -> list[tuple[int, ...]]``: the same for a list of tasks,
  the ``upcoming`` argument of :class:`naspipe.context.cache.DeviceCache`.

Why a copy of the policy and not a separate model: the prediction is then exactly the
decision rule the stage will apply (CSP, or any other policy), with no second implementation
to drift. What the copy cannot know is when messages will arrive, so it assumes:

- the running task (if any) completes first;
- a forward the copy runs on the last stage produces its own backward at once; on another
  stage it leaves a *pending backward* (the gradient will come back from downstream), after
  those the live stage already awaits (:meth:`StagePolicy.awaiting_backward`);
- when the copy has nothing to run it releases the lowest-id pending backward (downstream
  stages favour earlier subnets too) once
  as many are pending as there are stages downstream (the pipeline's depth below it), or
  when no new forward can come; otherwise the next forward that has not arrived yet arrives
  (on stage 0: is admitted, if the policy admits it). Subnets ``>= end`` never come.

The offline optimum needs no code here: given the stage's true future uses (from a recorded
run) instead of predicted ones, the cache's victim rule (furthest next use) is Belady's.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache, partial
from heapq import heappop, heappush
from typing import TypeGuard
from weakref import ref

from naspipe.scheduling.micro_predictor import predict_parts
from naspipe.scheduling.plan import PipelinePlan
from naspipe.scheduling.policies.base import StagePolicy
from naspipe.scheduling.policies.csp import CSP
from naspipe.scheduling.policies.micro import MicroCSP
from naspipe.scheduling.task import BACKWARD, FORWARD, UPDATE, Kind, Task, new_task
from naspipe.space.structure import SpaceStructure


def task_layers(plan: PipelinePlan, task: Task) -> tuple[int, ...]:
    """The layers ``task`` touches on its stage (an update touches only trainable ones)."""
    if task.kind is Kind.UPDATE:
        return plan.trainable_layers(task.subnet, task.stage)
    return plan.stage_layers(task.subnet, task.stage)


def layer_uses(plan: PipelinePlan, tasks: Iterable[Task]) -> list[tuple[int, ...]]:
    """:func:`task_layers` of each task (inlined: once per predicted task)."""
    trainable_layers, stage_layers = plan.trainable_layers, plan.stage_layers
    return [trainable_layers(subnet, stage) if kind is UPDATE else stage_layers(subnet, stage)
            for kind, subnet, stage in tasks]


def predict(policy: StagePolicy, horizon: int, end: int, running: Task | None = None) -> list[Task]:
    """The next ``horizon`` tasks of ``policy``'s stage (fewer when the stream ends first).

    Exactly :func:`predict_by_copy`'s answer; for CSP on a static plan without shared windows
    (the cache's common case) it comes from :class:`CSPLookahead`,
    which reads the live state instead of copying it (see it for why it is the same)."""
    if horizon <= 0:
        return []
    entry = _FAST.get(id(policy))  # _fast_lookahead's found case, without its call (once per task)
    fast = entry[1] if entry is not None and entry[0]() is policy else _fast_lookahead(policy)
    if fast is not None:
        return fast.answer(policy, horizon, end, running)  # type: ignore[arg-type]  # a CSP: supports() said so
    if isinstance(policy, MicroCSP):  # a micro-batched schedule: its parts' subnet-level tasks
        return predict_parts(policy, horizon, end, running)  # type: ignore[arg-type]  # its running MicroTask
    return _Lookahead(policy, end, running).take(horizon)


def predict_by_copy(policy: StagePolicy, horizon: int, end: int, running: Task | None = None) -> list[Task]:
    """The reference prediction: the policy's own clone run ahead (the rules of the module docstring)."""
    if horizon <= 0:
        return []
    return _Lookahead(policy, end, running).take(horizon)


# id(policy) -> (a weak reference to it, its lookahead): a plain dict, read once per task (a weak-key
# dictionary builds a weak reference per lookup); the reference's callback drops the entry when the
# policy dies, before its id can be reused.
_FAST: dict[int, tuple[ref[StagePolicy], CSPLookahead | None]] = {}


def _fast_lookahead(policy: StagePolicy) -> CSPLookahead | None:
    """The stage's :class:`CSPLookahead` (kept across calls: it registers subnets ahead once), or None
    when the policy is not one it reproduces."""
    entry = _FAST.get(id(policy))
    if entry is not None and entry[0]() is policy:
        return entry[1]
    key = id(policy)
    fast = CSPLookahead(policy) if CSPLookahead.supports(policy) else None
    _FAST[key] = (ref(policy, partial(_forget, key)), fast)
    return fast


def _forget(key: int, _: object) -> None:
    """A policy died: its lookahead goes too (its id may be reused by a new policy)."""
    _FAST.pop(key, None)


class _Forwards(dict[int, Task]):
    """Forward tasks of one stage by subnet, built on first use: a subnet's forward is predicted several
    times before it runs, and a lookup costs a fraction of building the task."""

    def __init__(self, stage: int) -> None:
        super().__init__()
        self.stage = stage

    def __missing__(self, subnet: int) -> Task:
        task = self[subnet] = new_task((FORWARD, subnet, self.stage))
        return task


class _Lookahead:
    def __init__(self, policy: StagePolicy, end: int, running: Task | None) -> None:
        self.sim = policy.clone()  # the plan is shared, read-only
        self.end = end
        self.arrivals: Iterator[int] = policy.pending_arrivals(end)
        self.next_arrival = next(self.arrivals, None)
        self.pending: list[int] = policy.awaiting_backward()
        self.depth = policy.plan.num_stages - 1 - policy.stage
        if running is not None:
            self._complete(running)

    def take(self, horizon: int) -> list[Task]:
        """Run the copy: its next task (completed as :meth:`_complete` does), or when it has none,
        the next message it can expect (the module docstring's rules); stop when none can come.
        One loop with locals: it is most of a prediction's cost."""
        sim, pending, depth = self.sim, self.pending, self.depth
        next_task, completed, backward_arrived = sim.next_task, sim.completed, sim.backward_arrived
        is_first, is_last = sim.is_first, sim.is_last
        arrive = sim.admit if is_first else sim.forward_arrived
        out: list[Task] = []
        while len(out) < horizon:
            task = next_task()
            if task is not None:
                out.append(task)
                completed(task)
                if task[0] is FORWARD:
                    if is_last:
                        backward_arrived(task[1])
                    else:
                        pending.append(task[1])
                continue
            subnet = self.next_arrival  # no task: release a pending backward or the next arrival
            arrival = subnet is not None and (not is_first or sim.may_admit(subnet))
            if pending and (len(pending) >= depth or not arrival):
                lowest = min(pending)
                pending.remove(lowest)
                backward_arrived(lowest)
                continue
            if not arrival:
                break
            assert subnet is not None
            self.next_arrival = next(self.arrivals, None)
            arrive(subnet)
        return out

    def _complete(self, task: Task) -> None:
        self.sim.completed(task)
        if task.kind is Kind.FORWARD:
            if self.sim.is_last:
                self.sim.backward_arrived(task.subnet)
            else:
                self.pending.append(task.subnet)


class CSPLookahead:
    """CSP's run-ahead without a copy of its state: :func:`predict_by_copy`'s answer, cheaper.

    Why it is the same. On a static plan a subnet ``y``'s forward on a stage is blocked exactly
    while some *predecessor* of ``y`` there (for each of ``y``'s versioned layers on the stage,
    the last earlier subnet that uses it) has not written it: writes of a layer land in user
    order, so the predecessor's write implies every earlier one, and CSP's per-subnet count of
    blocking layers (:class:`naspipe.scheduling.versions.VersionTable`) is the number of
    unwritten predecessors. Predecessors depend on the plan alone, not on when a subnet
    registers, so this object registers each subnet once per stage, ahead, for all predictions;
    a prediction then reads the live policy's small queues (:meth:`CSP.lookahead_view`), keeps
    the few subnets the run-ahead writes in a set of its own, and runs the module docstring's
    rules with CSP's decisions inlined (updates, then backwards, then the lowest ready forward).
    What the clone cost per task (copying the version table, registering every arrival again:
    most of a cached simulation) is gone; ``tests/test_predictor_equivalence.py`` checks the
    answer against the copy at every task.
    """

    _PRUNE_EVERY = 2048  # registrations between drops of predecessor lists nobody can ask for again
    _AHEAD = 32  # subnets registered ahead at a time when a prediction runs past the registered ones
    _SPARE = 2  # tasks run ahead past the horizon and kept: the next calls may shift them (see answer)

    def __init__(self, policy: CSP) -> None:
        self._policy = ref(policy)  # weak: the lookahead lives as long as its policy (kept in _FAST), not longer
        self.stage = policy.stage
        self.depth = policy.plan.num_stages - 1 - policy.stage
        self._slices = policy.plan.versioned_slices
        _, _, _, _, unwritten, registered = policy.lookahead_view()
        start = min(min(unwritten, default=registered), registered)  # every subnet below it has written
        self._next = start  # subnets [start, _next) are registered here
        self._last_user: dict[int, int] = {}  # layer -> its last user registered here
        self._low_user: int | None = None  # the lowest of them, kept until the next registration (_covered)
        self.preds: dict[int, tuple[int, ...]] = {}  # subnet -> its distinct predecessors on this stage
        # The live writes, as far as the last prediction saw them: a subnet below _synced and not in
        # _tracked has written. For each registered subnet, the predecessors not known to have written:
        self._synced = start
        self._tracked: set[int] = set()
        self._seen = (-1, -1)  # (registered, unwritten subnets) at the last sync: unchanged, nothing wrote
        self._blocking: dict[int, int] = {}  # subnet -> how many (absent: none; the subnet is in _zeros)
        self._followers: dict[int, list[int]] = {}  # unwritten subnet -> registered subnets it blocks
        self._zeros: list[int] = []  # registered subnets none blocks, in id order
        self._until_prune = self._PRUNE_EVERY
        self._forwards = _Forwards(self.stage)
        self._end = 0  # the stream's end in the prediction running now
        self._is_first, self._is_last, self._cap = policy.is_first, policy.is_last, policy.options.max_inflight
        # The last run-ahead (see answer): its tasks, how many of them have started since, whether it ran out
        # before its horizon (the stream's end), and the policy's message count and the stream's end it saw.
        self._answer: list[Task] = []
        self._started = 0
        self._ran_out = False
        self._heard: dict[int, int] = {}  # position in _answer -> messages assumed just before it (_run_ahead)
        self._messages, self._answer_end = -1, -1
        self._tail = 0  # where the last run-ahead's full arrivals-only tail starts (_heard_at; none: its length)
        self.reused = 0  # answers given by shifting the last one (a count for tests and benchmarks)
        bounds = policy.plan.partition.bounds
        per_position = _versioned_per_position(policy.plan.structure)  # the versioned layers any subnet can run here:
        self._layer_count = sum(per_position[bounds[self.stage]:bounds[self.stage + 1]])

    @property
    def policy(self) -> CSP:
        """The live policy it reads (alive while anyone predicts for it)."""
        policy = self._policy()
        assert policy is not None
        return policy

    @staticmethod
    def supports(policy: StagePolicy) -> TypeGuard[CSP]:
        """CSP itself (not a subclass: they may decide otherwise) on a static plan, no shared windows."""
        return type(policy) is CSP and not policy.plan.mirrored and not policy.plan.windowed

    def register_through(self, subnet: int) -> None:
        """Record the predecessors of every subnet up to ``subnet`` (in id order, once each)."""
        slices, stage, last_user, preds = self._slices, self.stage, self._last_user, self.preds
        synced, tracked, blocking, followers, zeros = (self._synced, self._tracked, self._blocking,
                                                       self._followers, self._zeros)
        y = self._next
        while y <= subnet:
            found: list[int] = []
            for layer in slices(y)[stage]:
                earlier = last_user.get(layer)
                if earlier is not None and earlier not in found:
                    found.append(earlier)
                last_user[layer] = y
            preds[y] = tuple(found)
            count = 0
            for p in found:
                if p >= synced or p in tracked:  # not known to have written
                    followers.setdefault(p, []).append(y)
                    count += 1
            if count:
                blocking[y] = count
            else:
                zeros.append(y)
            y += 1
        self._until_prune -= y - self._next
        self._next = y
        self._low_user = None  # the lowest last user, for _covered: found again when next asked

    def _sync(self, unwritten: dict[int, int], registered: int) -> None:
        """Catch up with the live writes: a registered subnet has written once it left ``unwritten``.

        Only registering adds to ``unwritten`` (and raises ``registered``), only a write removes from it:
        with both sizes unchanged since the last call (:attr:`_seen`; two tasks in three) there is nothing
        to do, and :meth:`_run_ahead` does not call it."""
        self._seen = (registered, len(unwritten))
        tracked = self._tracked
        written = tracked.difference(unwritten)  # in C: tracked holds every unwritten subnet in flight here
        if written:
            tracked -= written
            for subnet in written:  # in any order: each write lowers counts, the ready ones are inserted sorted
                self._has_written(subnet)
        for subnet in range(self._synced, registered):
            if subnet in unwritten:
                tracked.add(subnet)
            else:
                self._has_written(subnet)
        if registered > self._synced:
            self._synced = registered

    def _has_written(self, subnet: int) -> None:
        blocking, zeros = self._blocking, self._zeros
        for follower in self._followers.pop(subnet, ()):
            left = blocking[follower] - 1
            if left:
                blocking[follower] = left
            else:
                del blocking[follower]
                insort(zeros, follower)

    def _prune(self) -> None:
        """Drop the lists of subnets below every unwritten one: written, never asked about again."""
        _, _, _, _, unwritten, registered = self.policy.lookahead_view()
        floor = min(min(unwritten, default=registered), registered)
        for subnet in [y for y in self.preds if y < floor]:
            del self.preds[subnet]
        for subnet in [y for y in self._forwards if y < floor]:
            del self._forwards[subnet]
        del self._zeros[:bisect_left(self._zeros, floor)]
        self._until_prune = self._PRUNE_EVERY

    def answer(self, live: CSP, horizon: int, end: int, running: Task | None) -> list[Task]:
        """The next ``horizon`` tasks of ``live`` (this lookahead's policy): the last answer shifted when that
        is exact, else a fresh run-ahead (:meth:`_run_ahead`) of :attr:`_SPARE` more tasks, kept.

        Why the shift is exact. Let ``A`` be the last run-ahead, made while the stage ran ``T``, ``H``
        tasks long, and let the stage now run ``A[i]``, every earlier call since having shifted ``A``
        (so the stage ran ``T, A[0], ..., A[i]``). Between two predictions a stage completes its running
        task and pops the next (``completed``, ``next_task``: the executors run one task at a time per
        stage); every other change to its state comes from outside, through a message method, and each
        of those bumps :attr:`StagePolicy.messages` once. The run-ahead (:func:`predict_by_copy`'s clone:
        the policy's own ``completed`` and ``next_task`` on a copy) went from the state after popping
        ``A[i - 1]`` to ``A[i]`` by completing it, then, only while nothing was ready, assuming messages
        (an arrival, a released backward, the last stage's own backward): ``_heard[i]`` of them.

        - None assumed, none came (the count unchanged): the live stage did what the clone did.
        - One assumed, one came: ``A[i]`` is that message's task (it was assumed because nothing was
          ready, so the task it brought is the next: ``F y`` after the arrival of ``y``, ``B y`` after
          the gradient of ``y``), and the live stage runs ``A[i]``, which it could not without that
          message since the last call (``y`` had not arrived when ``A`` was made, nor in the calls
          since: each of their messages was its own task's; a backward runs once). So the one message
          was the assumed one. It may have come before the completion rather than after: for CSP on a
          static plan the two commute (an arrival registers with the versions then current and a write
          decrements its count if it follows, so its count and queue end the same; a gradient touches
          only the awaited set and the backward heap; admission on stage 0 allowed before the
          completion is allowed after it, which only lowers the in-flight count).
        - More assumed: not reused (which of several messages came is not known from a count).

        The live state then equals the clone's after popping ``A[i]``; the clone's run from there is the
        rest of ``A``: its decisions read the state alone, never the horizon, so a run of ``h`` tasks is
        the first ``h`` of a longer run (the prefix property; ``tests/test_predictor_prefix.py``). This
        lookahead's run-ahead equals the clone's at every horizon (``tests/test_predictor_equivalence.py``),
        so the property holds for it too, its arrivals-only tail included: the tail is taken only when no
        backward can be released within the horizon, and gives what the step-by-step rules give. Hence
        the answer is ``A[i + 1:i + 1 + h]`` when ``A`` has that many, or when ``A`` stopped short of
        ``H`` (no task could come after its last, and with the same state none can now)."""
        answer = self._answer
        if answer and running is not None and end == self._answer_end:
            i = self._started
            if i < len(answer) and answer[i] == running:
                messages = live.messages
                heard = messages - self._messages
                if heard <= 1 and heard == (self._heard.get(i, 0) if i < self._tail
                                            else _heard_at(answer, self._heard, i)):
                    i += 1
                    if self._ran_out or len(answer) - i >= horizon:
                        self._started, self._messages = i, messages
                        self.reused += 1
                        return answer[i:i + horizon]
        messages, longer = live.messages, horizon + self._SPARE
        heard_at: dict[int, int] = {}
        answer = self._answer = self._run_ahead(live, longer, end, running, heard_at)
        self._started, self._ran_out, self._messages, self._answer_end = 0, len(answer) < longer, messages, end
        self._heard, self._tail = heard_at, heard_at.get(_TAIL, longer)
        return answer[:horizon]

    def _run_ahead(self, live: CSP, horizon: int, end: int, running: Task | None,
                   heard: dict[int, int]) -> list[Task]:
        """The next ``horizon`` tasks, run ahead from the live state (the rules of :class:`_Lookahead`, CSP's
        decisions inlined). ``heard`` receives, for each position ``i`` of the answer, how many messages
        the run-ahead assumed between the previous task (or ``running``) and task ``i`` (absent: none; 2
        stands for two or more; a full arrivals-only tail's entries by the rule of :func:`_heard_at`), what
        :meth:`answer` compares with the live count.

        Off stage 0 the run-ahead's arrivals are every subnet in ``[lo, hi)`` not already arrived
        (``ahead``); those that were not ready then wait. They are not listed: a run of blocked
        arrivals, up to the stream's end near the end of a run, is skipped in one step
        (:meth:`_next_ready`), and a write looks only at its followers (none of which was ready
        before it), so a prediction's cost does not grow with what is left of the stream."""
        self._end = end
        unwritten, registered = live._blocked, live._registered  # live.lookahead_view() without the call
        if (registered, len(unwritten)) != self._seen:
            self._sync(unwritten, registered)
        if self._until_prune <= 0:  # here, not while registering: a prediction holds indices into _zeros
            self._prune()
        ready_u, ready_b, ready_f = live._ready_u[:], live._ready_b[:], live._ready_f[:]
        waiting = set(live._waiting)  # arrived before this prediction, still blocked
        pending = list(live._awaiting_backward)  # live.awaiting_backward(), one call less
        written: set[int] = set()  # subnets the run-ahead updates
        stage, depth, is_first, is_last = self.stage, self.depth, self._is_first, self._is_last
        admitted, finished, cap = live.admitted, live.finished, self._cap
        if waiting and self._next <= max(waiting):
            self.register_through(max(waiting))
        preds, followers = self.preds, self._followers
        ahead = live._arrived_ahead  # arrived already: not an arrival (live.overtaken())
        # the first of live.pending_arrivals(end), without the generator (a third of a short prediction's cost)
        next_arrival: int | None = live._arrived_below
        if ahead:
            next_arrival = _arrival_from(live._arrived_below, end, ahead)
        elif live._arrived_below >= end:
            next_arrival = None
        lo = hi = end if next_arrival is None else next_arrival

        def ready(subnet: int) -> bool:
            """All of ``subnet``'s predecessors here have written (live or in the run-ahead)."""
            for p in preds[subnet]:
                if p not in written and (p >= registered or p in unwritten):
                    return False
            return True

        def write(subnet: int) -> None:
            """Every waiting subnet it blocked is one of its followers (it has not written live)."""
            written.add(subnet)
            if hi > self._next:  # arrivals not registered yet wait too: register its followers among them
                self._register_followers(subnet, min(hi, end))
            for other in followers.get(subnet, ()):
                if other in waiting:
                    if ready(other):
                        waiting.remove(other)
                        heappush(ready_f, other)
                elif lo <= other < hi and other not in ahead and ready(other):  # an arrival left waiting
                    heappush(ready_f, other)

        if running is not None:
            kind, subnet, _ = running
            if kind is FORWARD:
                if is_last:
                    heappush(ready_b, subnet)
                    heard[0] = 1  # the gradient, at once
                else:
                    pending.append(subnet)
            elif kind is BACKWARD:
                heappush(ready_u, subnet)
            else:
                write(subnet)
                finished += 1
        out: list[Task] = []
        while len(out) < horizon:
            if ready_u:
                subnet = heappop(ready_u)
                out.append(new_task((UPDATE, subnet, stage)))
                write(subnet)
                finished += 1
                continue
            if ready_b:
                subnet = heappop(ready_b)
                out.append(new_task((BACKWARD, subnet, stage)))
                heappush(ready_u, subnet)
                continue
            if ready_f:
                subnet = heappop(ready_f)
                out.append(self._forwards[subnet])
                if is_last:
                    heappush(ready_b, subnet)
                    heard[len(out)] = 1
                else:
                    pending.append(subnet)
                continue
            arrival = next_arrival is not None and (not is_first or admitted - finished < cap)
            if arrival and not is_first and len(pending) + horizon - len(out) <= depth:
                # Only arrivals can come (no backward is released before the horizon): read them.
                assert next_arrival is not None
                need = horizon - len(out)
                tail = self._ready_arrivals(need, next_arrival, written, unwritten, registered, ahead)
                at = len(out)
                out += map(self._forwards.__getitem__, tail)
                if len(tail) == need and not ahead:  # its entries are read on demand (_heard_at): most never are
                    heard[_TAIL], heard[_FIRST] = at, next_arrival
                    break
                for subnet in tail:  # each after one arrival, or more when blocked ones came between
                    heard[at] = 1 if subnet == next_arrival else 2
                    at += 1
                    # the next arrival; with none overtaken, ``y + 1`` without a call (past the end only
                    # after a full tail's last, which nothing is compared with)
                    next_arrival = _arrival_from(subnet + 1, end, ahead) if ahead else subnet + 1
                if len(tail) == need:
                    break
                # Fewer: every arrival left to the stream's end is blocked. The step-by-step rules take the
                # ready ones above one at a time, then find none (blocked arrivals assumed, no task), and
                # go on with no arrival to come: releases, or the end.
                pending += tail  # their backwards come from downstream
                if tail:
                    next_arrival = _arrival_from(tail[-1] + 1, end, ahead)
                if next_arrival is not None:
                    heard[at] = heard.get(at, 0) + 2
                next_arrival, hi = None, end
                continue
            elif pending and (len(pending) >= depth or not arrival):
                lowest = min(pending)
                pending.remove(lowest)
                heappush(ready_b, lowest)
                heard[len(out)] = heard.get(len(out), 0) + 1
                continue
            if not arrival:
                break
            assert next_arrival is not None
            if is_first:  # admission counts every arrival: one at a time
                subnet = next_arrival
                next_arrival = _arrival_from(subnet + 1, end, ahead)
                admitted += 1
                heard[len(out)] = heard.get(len(out), 0) + 1
                if self._next <= subnet:
                    self.register_through(subnet)
                if ready(subnet):
                    heappush(ready_f, subnet)
                else:
                    waiting.add(subnet)
                continue
            # A blocked arrival changes nothing but the waiting set: skip to the next ready one.
            found = self._next_ready(next_arrival, end, ahead, written, ready, registered)
            heard[len(out)] = heard.get(len(out), 0) + (1 if found == next_arrival else 2)
            if found is None:  # every arrival left waits
                next_arrival, hi = None, end
                continue
            heappush(ready_f, found)
            next_arrival = _arrival_from(found + 1, end, ahead)
            hi = end if next_arrival is None else next_arrival
        return out

    def _next_ready(self, first: int, end: int, ahead: set[int], written: set[int],
                    ready: Callable[[int], bool], registered: int) -> int | None:
        """The first arrival from ``first`` on (below ``end``, not in ``ahead``) whose predecessors have
        all written, live (the registered subnets none blocks: ``_zeros``) or in the run-ahead (a
        follower of a subnet in ``written``); None when there is none before the stream's end."""
        zeros = self._zeros
        while True:  # the first live-ready one, registering ahead until there is one (or the end)
            i = bisect_left(zeros, first)
            while i < len(zeros) and zeros[i] in ahead:
                i += 1
            if i < len(zeros):
                best: int | None = zeros[i] if zeros[i] < end else None
                break
            if self._next >= end or self._covered(written, registered):
                best = None
                break
            self.register_through(min(self._next + self._AHEAD, end - 1))
        followers = self._followers
        for writer in written:
            for y in followers.get(writer, ()):
                if first <= y < end and (best is None or y < best) and y not in ahead and ready(y):
                    best = y
        return best

    def _covered(self, written: set[int], registered: int) -> bool:
        """No subnet past the registered ones can be ready in this prediction, so registering further
        (to the stream's end, 64 x 100,000 registrations at scale) is not needed: every layer of the stage
        has a registered user that has not written live (``>= registered``) nor in the run-ahead (above
        every subnet in ``written``). A later subnet's predecessors are those users or later ones. A
        later write in the run-ahead registers its own followers (:meth:`_register_followers`)."""
        last_user = self._last_user
        if not last_user or len(last_user) < self._layer_count:
            return False
        low = self._low_user
        if low is None:  # registering moved a last user since the last look
            low = self._low_user = min(last_user.values())
        return low >= registered and (not written or low > max(written))

    def _register_followers(self, subnet: int, limit: int) -> None:
        """Register until every layer of ``subnet`` here has a later registered user (so its followers
        below ``limit`` are all in ``_followers``), or through ``limit - 1``."""
        if self._next <= subnet:
            self.register_through(subnet)
        last_user, layers = self._last_user, self._slices(subnet)[self.stage]
        while self._next < limit and any(last_user[layer] == subnet for layer in layers):
            self.register_through(min(self._next + self._AHEAD, limit - 1))

    def _ready_arrivals(self, need: int, first: int, written: set[int], unwritten: dict[int, int],
                        registered: int, ahead: set[int]) -> list[int]:
        """What :meth:`_run_ahead` takes when only arrivals can come, from the registrations kept between
        predictions: the first ``need`` arrivals from ``first`` on whose predecessors have all written,
        live or in the run-ahead (``written``), or all of them when fewer come before the stream's end.

        Why all of them then. Once only arrivals can come, the run-ahead writes nothing more until a
        backward is released, and none is while an arrival can come (``pending`` stays below the depth:
        the caller's condition): the step-by-step rules take the lowest ready arrival each time, so
        with ``written`` fixed, the ready ones in id order, until none is left to the stream's end. When
        every layer here has a registered user that has written neither live nor in the run-ahead
        (:meth:`_covered`), no subnet past the registered ones can be ready, so the registered ones,
        read here, are all of them."""
        zeros, end = self._zeros, self._end  # ``ahead``: arrived already, not an arrival
        if self._next <= first:
            self.register_through(min(first + self._AHEAD, end - 1))
        start = bisect_left(zeros, first)  # registering appends: later subnets only
        while True:  # enough subnets registered that the live writes alone leave `need` of them ready
            tail = _first_not_in(zeros, start, need, ahead) if ahead else zeros[start:start + need]
            if len(tail) >= need and tail[need - 1] < end:
                break
            if self._next >= end or self._covered(written, registered):
                tail = [y for y in tail if y < end]  # fewer than need: every live-ready one
                break
            self.register_through(min(self._next + self._AHEAD, end - 1))
        if written:  # followers whose every blocker the run-ahead writes
            blocking = self._blocking
            if len(written) == 1:  # most often: the update after the running backward
                (writer,) = written
                more = [y for y in self._followers.get(writer, ())
                        if blocking.get(y) == 1 and first <= y < end and y not in ahead]
            else:
                extra: dict[int, int] = {}
                for writer in written:
                    for follower in self._followers.get(writer, ()):
                        extra[follower] = extra.get(follower, 0) + 1
                more = [y for y, n in extra.items() if blocking.get(y) == n and first <= y < end and y not in ahead]
            if more:
                tail = sorted(tail + more)
        return tail[:need]


# Keys of a run-ahead's ``heard`` beside the positions: where its full arrivals-only tail starts, and the
# arrival it expected first there (:func:`_heard_at`).
_TAIL, _FIRST = -1, -2


def _heard_at(answer: list[Task], heard: dict[int, int], i: int) -> int:
    """The messages the run-ahead that made ``answer`` assumed before its task ``i`` (2: two or more).

    Its ``heard`` holds them by position, except in a full arrivals-only tail taken with no forward
    overtaken (from ``heard[_TAIL]`` to the end; the tail's entries replace any stored there, as the
    stored ones would have been overwritten): there each forward came after one arrival when it is
    the arrival expected (``heard[_FIRST]`` first, then the previous forward's subnet + 1: with none
    overtaken every subnet is an arrival), after two or more when blocked ones came between. Exactly
    what :meth:`CSPLookahead._run_ahead` would have stored, computed only when a shift asks (a kept
    answer is mostly replaced before its tail is reached)."""
    start = heard.get(_TAIL)
    if start is None or i < start:
        return heard.get(i, 0)
    expected = heard[_FIRST] if i == start else answer[i - 1][1] + 1
    return 1 if answer[i][1] == expected else 2


@lru_cache(maxsize=8)
def _versioned_per_position(structure: SpaceStructure) -> tuple[int, ...]:
    """How many trainable layers can run at each position: one pass over the layers for all the stages
    (each stage's lookahead sums its positions; a pass per stage cost 64 x 3,000 lookups at scale)."""
    counts = [0] * structure.num_positions
    for lid in range(structure.num_layers):
        if structure.is_trainable(lid):
            counts[structure.position_of(lid)] += 1
    return tuple(counts)


def _arrival_from(subnet: int, end: int, ahead: set[int]) -> int | None:
    """The first arrival from ``subnet`` on: below ``end`` and not arrived already (``ahead``), or None
    (:meth:`StagePolicy.pending_arrivals` without the generator)."""
    while subnet in ahead:
        subnet += 1
    return subnet if subnet < end else None


def _first_not_in(sorted_ids: list[int], start: int, count: int, skip: set[int]) -> list[int]:
    """The first ``count`` of ``sorted_ids[start:]`` not in ``skip``: the lowest ones, all a prediction's tail
    can take (the rest of the list, up to the stream's registered end, is not walked)."""
    found: list[int] = []
    for i in range(start, len(sorted_ids)):
        y = sorted_ids[i]
        if y not in skip:
            found.append(y)
            if len(found) == count:
                break
    return found
