"""The predictor for micro-batched schedules: which subnet-level tasks a stage runs next.

The context cache asks which layers a stage needs next (:func:`naspipe.scheduling.predictor.predict`).
A micro-batched stage runs its policy's :class:`~naspipe.scheduling.task.MicroTask`\\ s, whose layers are
those of the subnet-level task they belong to (a part's forward: the subnet's forward; a backward or
weight task: its backward; the update: its trainable layers). So the answer is the sequence of those
subnet-level tasks, consecutive repeats folded (the parts of one forward use the same layers), found
as :func:`~naspipe.scheduling.predictor.predict_by_copy` finds it: the stage's own policy, cloned and
run ahead, with the same assumptions about messages, part by part:

- the running task completes first; a part's forward on the last stage produces its own backward;
  elsewhere it leaves a pending backward, after those the live stage awaits;
- with nothing to run, the lowest pending backward comes back once as many are pending as parts fit
  in the pipeline below (``m`` per stage downstream), or when no new forward can come; otherwise the
  next part that has not arrived arrives (on stage 0: its subnet is admitted, if the policy admits it).

The stage re-plans only when its plan runs short: a run ahead is m times longer than the subnet-level
schedule's (each subnet-level task is m part tasks), so an answer serves the tasks it foresaw. While
the stage runs a subnet-level task of its last answer (the parts of ``F5``, say, or the next one in
it), the rest of that answer from there is the answer, until less than half the horizon is left or
the stage runs a task the answer did not foresee. The cache fetches on demand what a plan missed.

Most of a run ahead is a stage taking arrivals with nothing else to run (the stages below fill the
pipeline first, and a subnet blocked by the version rule only waits), so those stretches go a subnet
at a time (:meth:`MicroCSP.arrivals_ahead`, :meth:`MicroCSP.forwards_ahead`): the same state and answer
as part by part (``tests/test_predictor_micro.py`` compares them before every task).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

from naspipe.scheduling.policies.micro import MicroCSP, as_plain
from naspipe.scheduling.task import FORWARD, MicroTask, Task


def predict_parts(policy: MicroCSP, horizon: int, end: int, running: MicroTask | None = None) -> list[Task]:
    """The next ``horizon`` subnet-level tasks of ``policy``'s stage (module docstring); the policy is untouched
    (but for the memo of its last answer)."""
    current = None
    if running is not None:
        current = as_plain(running)
        memo = policy.last_prediction
        if memo is not None and memo[0] == horizon:
            tasks = memo[1]
            try:
                start = tasks.index(current)
            except ValueError:
                pass
            else:
                if 2 * (len(tasks) - start) > horizon:
                    return tasks[start:]
    answer = _run_ahead(policy, horizon, end, running)
    policy.last_prediction = (horizon, [current, *answer]) if current is not None else None
    return answer


def _run_ahead(policy: MicroCSP, horizon: int, end: int, running: MicroTask | None) -> list[Task]:
    """The run ahead of the module docstring. Its long stretches, a stage taking arrivals with nothing else to
    run (most of a run ahead: the stages below fill the pipeline first), go a subnet at a time: on the first
    stage an admitted subnet's forwards (:meth:`MicroCSP.forwards_ahead`), on a middle stage its parts'
    arrivals and forwards up to the next release of a gradient (:meth:`MicroCSP.arrive_ahead`); the same
    calls' effects, and the same answer, as part by part."""
    sim = policy.clone()
    runs = policy.pending_part_runs(end)
    pending = policy.awaiting_parts()  # a heap: only its lowest is taken (min and remove, in one step)
    heapify(pending)
    m = policy.micro_batches
    depth = (policy.plan.num_stages - 1 - policy.stage) * m
    is_first, is_last = sim.is_first, sim.is_last
    middle = not is_first and not is_last
    out: list[Task] = []

    def complete(task: MicroTask) -> None:
        sim.completed(task)
        if task.kind is FORWARD:
            if is_last:
                sim.backward_arrived(task.subnet, task.micro)
            else:
                heappush(pending, (task.subnet, task.micro))

    def forwards(subnet: int, first: int, count: int) -> None:
        """``count`` forwards of ``subnet`` from part ``first`` ran (and completed) on a stage before the last."""
        plain = Task(FORWARD, subnet, sim.stage)
        if not out or out[-1] != plain:
            out.append(plain)
        for j in range(first, first + count):
            heappush(pending, (subnet, j))

    if running is not None:
        complete(running)
    arrival = next(runs, None)  # (subnet, first part not arrived)
    idle = False  # nothing to run: a stretch of arrivals ended as it began (next_task would answer None)
    while len(out) < horizon:
        if idle:
            idle = False
        else:
            task = sim.next_task()
            if task is not None:
                plain = as_plain(task)
                if not out or out[-1] != plain:
                    out.append(plain)
                complete(task)
                continue
        can_arrive = arrival is not None and (not is_first or sim.may_admit(arrival[0]))
        if pending and (len(pending) >= depth or not can_arrive):
            sim.backward_arrived(*heappop(pending))
            continue
        if not can_arrive:
            break
        assert arrival is not None
        subnet, first = arrival
        if is_first:  # an admission brings every part of the subnet
            sim.admit(subnet)
            ran = sim.forwards_ahead(subnet) if not is_last else 0
            if ran:
                forwards(subnet, 0, ran)
                idle = True
            arrival = next(runs, None)
            continue
        if middle:  # arrivals up to the next subnet not blocked, and its forwards up to a gradient's release
            subnet, first, ran, arrival = sim.arrivals_ahead(arrival, runs, depth - len(pending), end)
            if ran:
                forwards(subnet, first, ran)
            idle = True
            continue
        sim.forward_arrived(subnet, first)
        first += 1
        arrival = (subnet, first) if first < m else next(runs, None)
    return out
