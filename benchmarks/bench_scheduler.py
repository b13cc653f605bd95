"""Cost of one CSP scheduling decision at paper scale, side by side with literal Algorithm 2.

Paper scale: 48 choice blocks with 24/48/96 candidates over 8 stages (6 blocks per stage),
about 30 subnets queued for their forward and 8 in flight (forward done, update pending).
One stage is driven in steady state: each round, the oldest in-flight subnet runs its
backward and update (when 8 are in flight, or when no forward could start), arrivals top
the queue back up to 30, and the stage picks a forward. A round's time (its ``next_task()``
calls plus the event handling around them, since the incremental CSP moves its work into
the events) is divided by the round's decisions. Both policies see the same event sequence
(their decisions are equal: tests/test_scheduling.py). The last column is the forward
pick alone (the ``next_task()`` call that has to find a ready forward), without events.

    .venv/bin/python benchmarks/bench_scheduler.py [--rounds 2000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naspipe.partition import balanced_partition  # noqa: E402
from naspipe.scheduling import Kind, PipelinePlan, PolicyOptions  # noqa: E402
from naspipe.scheduling.policies import make_policy  # noqa: E402
from naspipe.space.structure import SpaceStructure  # noqa: E402
from naspipe.subnet import SubnetStream  # noqa: E402
from tests.test_scheduling import LiteralAlgorithm2  # noqa: E402  (the literal version lives with its tests)

STAGE = 3


def steady_state(policy, rounds: int, queued: int, inflight: int, queue_depth: list[int],
                 forward_picks: list[float]) -> list[float]:
    """Per-decision cost (us): each round's decisions and events, divided by its decisions."""
    clock = time.perf_counter_ns
    next_id, started, running = 0, 0, deque()
    costs, stalled = [], False
    for _ in range(rounds):
        t, decisions = clock(), 1
        if running and (stalled or len(running) >= inflight):  # the oldest in-flight subnet: B then U
            policy.backward_arrived(running.popleft())
            for _ in range(2):
                policy.completed(policy.next_task())
            decisions += 2
        while next_id - started < queued:  # keep ~30 subnets queued for their forward
            policy.forward_arrived(next_id)
            next_id += 1
        pick = clock()
        task = policy.next_task()
        forward_picks.append((clock() - pick) / 1000.0)
        stalled = task is None
        if task is not None:
            assert task.kind is Kind.FORWARD
            policy.completed(task)
            running.append(task.subnet)
            started += 1
        costs.append((clock() - t) / 1000.0 / decisions)
        queue_depth.append(next_id - started)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--queued", type=int, default=30)
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    options = PolicyOptions(max_inflight=64)
    rows = []
    print(f"{'candidates':>10} {'csp median us':>14} {'csp p90':>8} {'literal median us':>18} {'literal p90':>12} "
          f"{'speedup':>8} {'fwd pick csp/literal us':>24}")
    for candidates in (24, 48, 96):
        structure = SpaceStructure("paper", ("embed",), (("op",) * candidates,) * 48, ("head",))
        plan = PipelinePlan(structure, balanced_partition([1.0] * structure.num_positions, 8),
                            SubnetStream(structure.choices_per_block, seed=0))
        total = args.rounds + args.queued + 1
        for y in range(total):  # warm the plan's caches: both sides then time scheduling only
            plan.trainable_layers(y, STAGE)
        results = {}
        for name, policy in (("csp", make_policy("csp", STAGE, plan, options)),
                             ("literal", LiteralAlgorithm2(STAGE, plan, options))):
            depth: list[int] = []
            picks: list[float] = []
            costs = steady_state(policy, args.rounds, args.queued, args.inflight, depth, picks)
            results[name] = (statistics.median(costs), statistics.quantiles(costs, n=10)[-1], statistics.median(picks))
        row_depth = statistics.median(depth)
        row = {"candidates": candidates, "blocks": 48, "stages": 8, "median_queued": row_depth,
               "inflight": args.inflight,
               "csp_median_us": results["csp"][0], "csp_p90_us": results["csp"][1],
               "literal_median_us": results["literal"][0], "literal_p90_us": results["literal"][1],
               "csp_forward_pick_us": results["csp"][2], "literal_forward_pick_us": results["literal"][2]}
        row["speedup"] = row["literal_median_us"] / row["csp_median_us"]
        rows.append(row)
        print(f"{candidates:>10} {row['csp_median_us']:>14.2f} {row['csp_p90_us']:>8.2f} "
              f"{row['literal_median_us']:>18.2f} {row['literal_p90_us']:>12.2f} {row['speedup']:>7.1f}x "
              f"{row['csp_forward_pick_us']:>11.2f} / {row['literal_forward_pick_us']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
