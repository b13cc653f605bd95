"""Which pipeline model gives the paper's bubble column: unit-time models next to the simulator.

Table 2's NASPipe bubble (NLP 0.39/0.57/0.68, CV 0.43/0.58/0.68 on spaces c1/c2/c3) is far
below what the simulator measures at 8 stages. The authors' artifact computes bubbles
offline (``bubble.py`` of its throughput build) with a unit-time model: every forward and
every backward takes one step, a stage runs at most one task per step, choice blocks are
split evenly over the stages (4 in the script), all subnets are queued at once (a window of
the first 200 unfinished), and each step a stage runs the first task in id order that
depends on no earlier unfinished subnet through its blocks on that stage and has its input.
:func:`artifact_unit_bubble` is that model, written from its description (not its code):
its dependency bookkeeping is a per-(block, choice) queue, the same rule as CSP's version
table with the write at the backward. The other models are this package's CSP policy in
the torch-free driver with unit durations (:mod:`naspipe.scheduling.driver`) and the full
simulator on the calibrated testbed (computed by the command, which owns the setups).
"""

from __future__ import annotations

from collections.abc import Sequence

INF = float("inf")


def even_bounds(blocks: int, stages: int) -> list[int]:
    """Block bounds of an even split (the artifact's script: 32 blocks -> 0, 8, 16, 24, 32)."""
    return [round(k * blocks / stages) for k in range(stages + 1)]


def artifact_unit_bubble(subnets: Sequence[Sequence[int]], stages: int, window: int = 200) -> float:
    """1 - (tasks run) / (stages x steps) of the artifact's unit-time model over ``subnets`` (choices per block)."""
    n = len(subnets)
    bounds = even_bounds(len(subnets[0]), stages)
    pending: list[list[int]] = [list(range(n)) for _ in range(stages)]  # unfinished subnets per stage, id order
    queues: list[dict[tuple[int, int], list[int]]] = [{} for _ in range(stages)]
    blocked = [[0] * n for _ in range(stages)]  # layers on which an earlier unfinished subnet comes first
    for k in range(stages):
        for y, choices in enumerate(subnets):
            for b in range(bounds[k], bounds[k + 1]):  # one choice per block: each layer once per subnet
                queue = queues[k].setdefault((b, choices[b]), [])
                blocked[k][y] += bool(queue)
                queue.append(y)
    fwd_in = [[0.0] * n] + [[INF] * n for _ in range(stages)]  # fwd_in[k][y]: y's input reaches stage k
    bwd_in = [[INF] * n for _ in range(stages)]  # bwd_in[k][y]: y's gradient reaches stage k
    done_f = [[False] * n for _ in range(stages)]
    step = run = 0
    while any(pending):
        for k in range(stages):
            run += _step(k, step, subnets, bounds, pending[k], queues[k], blocked[k], fwd_in, bwd_in, done_f[k],
                         stages, window)
        step += 1
    return 1.0 - run / (stages * step)


def _step(k: int, now: int, subnets: Sequence[Sequence[int]], bounds: list[int], pending: list[int],
          queues: dict[tuple[int, int], list[int]], blocked: list[int], fwd_in: list[list[float]],
          bwd_in: list[list[float]], done_f: list[bool], stages: int, window: int) -> int:
    """Stage ``k`` at step ``now``: run the first eligible task (1) or idle (0)."""
    for i, y in enumerate(pending[:window]):
        if blocked[y]:
            continue
        if not done_f[y] and fwd_in[k][y] <= now:
            done_f[y] = True
            if k + 1 < stages:
                fwd_in[k + 1][y] = now + 1
            else:  # the loss: the last stage's backward may follow
                bwd_in[k][y] = now + 1
            return 1
        if done_f[y] and bwd_in[k][y] <= now:
            if k > 0:
                bwd_in[k - 1][y] = now + 1
            del pending[i]
            _finish(y, subnets[y], bounds[k], bounds[k + 1], queues, blocked)
            return 1
    return 0


def _finish(y: int, choices: Sequence[int], lo: int, hi: int, queues: dict[tuple[int, int], list[int]],
            blocked: list[int]) -> None:
    """``y`` leaves the stage: the next user of each of its layers there may no longer wait for it."""
    for b in range(lo, hi):
        queue = queues[(b, choices[b])]
        if queue and queue[0] == y:
            queue.pop(0)
            if queue:
                blocked[queue[0]] -= 1
