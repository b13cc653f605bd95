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
"""

from __future__ import annotations

from naspipe.scheduling.policies.micro import MicroCSP, as_plain
from naspipe.scheduling.task import FORWARD, MicroTask, Task


def predict_parts(policy: MicroCSP, horizon: int, end: int, running: MicroTask | None = None) -> list[Task]:
    """The next ``horizon`` subnet-level tasks of ``policy``'s stage (module docstring); the policy is untouched
    (but for the memo of its last answer)."""
    current = as_plain(running) if running is not None else None
    memo = policy.last_prediction
    if current is not None and memo is not None and memo[0] == horizon and current in memo[1]:
        rest = memo[1][memo[1].index(current):]
        if 2 * len(rest) > horizon:
            return rest
    answer = _run_ahead(policy, horizon, end, running)
    policy.last_prediction = (horizon, [current, *answer]) if current is not None else None
    return answer


def _run_ahead(policy: MicroCSP, horizon: int, end: int, running: MicroTask | None) -> list[Task]:
    sim = policy.clone()
    arrivals = policy.pending_parts(end)
    pending = policy.awaiting_parts()
    depth = (policy.plan.num_stages - 1 - policy.stage) * policy.micro_batches
    out: list[Task] = []

    def complete(task: MicroTask) -> None:
        sim.completed(task)
        if task.kind is FORWARD:
            if sim.is_last:
                sim.backward_arrived(task.subnet, task.micro)
            else:
                pending.append((task.subnet, task.micro))

    if running is not None:
        complete(running)
    arrival = next(arrivals, None)
    while len(out) < horizon:
        task = sim.next_task()
        if task is not None:
            plain = as_plain(task)
            if not out or out[-1] != plain:
                out.append(plain)
            complete(task)
            continue
        can_arrive = arrival is not None and (not sim.is_first or sim.may_admit(arrival[0]))
        if pending and (len(pending) >= depth or not can_arrive):
            lowest = min(pending)
            pending.remove(lowest)
            sim.backward_arrived(*lowest)
            continue
        if not can_arrive:
            break
        assert arrival is not None
        subnet, micro = arrival
        if sim.is_first:  # an admission brings every part of the subnet
            sim.admit(subnet)
            while arrival is not None and arrival[0] == subnet:
                arrival = next(arrivals, None)
        else:
            sim.forward_arrived(subnet, micro)
            arrival = next(arrivals, None)
    return out
