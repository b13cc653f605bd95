"""Per-subnet partitions: the exact bottleneck split against torchgpipe's block-partition heuristic.

For each subnet of a seeded stream, its own cost vector (one cost per position: the chosen
candidate's) is split over D stages three ways: the exact DP (:func:`balanced_partition`,
the reference optimum), the fast exact probe (:func:`bottleneck_partition`, what per-subnet
partitions use), and the block-partition heuristic of Barany and Grinberg ("Block partitions
of sequences", 2015) that torchgpipe's ``balance`` uses, implemented here from the paper's
description. Reported: the slowest stage relative to the optimum (1.0 is optimal) and the
time per subnet. Cost vectors: ``profiled`` (a paper-scale space's per-layer cost model,
``space.layer_cost``) and ``random`` (log-uniform over two decades).

    .venv/bin/python benchmarks/bench_partition.py [--space nlp.c1] [--stages 16] [--subnets 200] [--json F]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naspipe.partition import Partition, balanced_partition, bottleneck_partition  # noqa: E402
from naspipe.space import make_space  # noqa: E402
from naspipe.subnet import SubnetStream  # noqa: E402

Splitter = Callable[[Sequence[float], int], Partition]


def block_partition(costs: Sequence[float], stages: int) -> Partition:
    """Barany-Grinberg block partition, from the paper's steps (normalised costs in [0, 1]).

    Start from equal-length blocks. (1) Take a maximal block p. (2) Stop when the largest
    block exceeds the smallest by at most 1 (one normalised element). (3) Otherwise take the
    minimal block q closest to p; move into q the adjacent element of its neighbour h on
    p's side. If h was p, go to (1), else to (2). Not optimal in general (it balances to
    within one element's cost), and it may loop, so the steps are bounded.
    """
    n = len(costs)
    low, high = min(costs), max(costs) - min(costs)
    norm = [0.0 if high == 0 else (c - low) / high for c in costs]
    ends = [n // stages * (k + 1) for k in range(stages - 1)] + [n]

    def size(k: int) -> float:
        return sum(norm[(ends[k - 1] if k else 0):ends[k]])

    for _ in range(4 * n * stages):
        largest, p = max((size(k), k) for k in range(stages))
        while True:
            smallest = min(size(k) for k in range(stages))
            if largest <= smallest + 1:
                return Partition((0, *ends))
            q = min((k for k in range(stages) if size(k) == smallest), key=lambda k: (abs(k - p), k))
            if p < q:
                h = q - 1
                ends[h] -= 1
            else:
                h = q + 1
                ends[q] += 1
            if h == p:
                break
    return Partition((0, *ends))


def slowest(costs: Sequence[float], part: Partition) -> float:
    return max(sum(costs[part.bounds[k]:part.bounds[k + 1]]) for k in range(part.num_stages))


def profiled_vectors(space_name: str, count: int, seed: int) -> list[list[float]]:
    space = make_space(space_name, {}, "frozen")
    structure = space.structure
    layer_costs = [space.layer_cost(lid) for lid in range(structure.num_layers)]
    stream = SubnetStream(structure.choices_per_block, seed)
    return [[layer_costs[lid] for lid in structure.position_layers(stream[i])] for i in range(count)]


def random_vectors(length: int, count: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    return [[10 ** rng.uniform(0, 2) for _ in range(length)] for _ in range(count)]


def measure(vectors: list[list[float]], stages: int, splitter: Splitter) -> tuple[list[float], float]:
    start = time.perf_counter()
    parts = [splitter(v, stages) for v in vectors]
    per_subnet = (time.perf_counter() - start) / len(vectors)
    return [slowest(v, p) for v, p in zip(vectors, parts, strict=True)], per_subnet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", default="nlp.c1")
    parser.add_argument("--stages", type=int, default=16)
    parser.add_argument("--subnets", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    profiled = profiled_vectors(args.space, args.subnets, args.seed)
    sets = {"profiled": profiled, "random": random_vectors(len(profiled[0]), args.subnets, args.seed)}
    splitters: dict[str, Splitter] = {"dp (exact)": balanced_partition, "bottleneck (exact)": bottleneck_partition,
                                      "block-partition": block_partition}
    rows = []
    print(f"{args.stages} stages, {len(profiled[0])} positions, {args.subnets} subnets")
    print(f"{'costs':9} {'method':20} {'slowest/opt mean':>16} {'max':>7} {'us/subnet':>10}")
    for name, vectors in sets.items():
        optimum, _ = measure(vectors, args.stages, balanced_partition)
        for method, splitter in splitters.items():
            worst, per = measure(vectors, args.stages, splitter)
            ratios = [w / o for w, o in zip(worst, optimum, strict=True)]
            row = {"costs": name, "method": method, "ratio_mean": statistics.fmean(ratios),
                   "ratio_max": max(ratios), "us_per_subnet": per * 1e6}
            rows.append(row)
            print(f"{name:9} {method:20} {row['ratio_mean']:16.4f} {row['ratio_max']:7.3f} "
                  f"{row['us_per_subnet']:10.1f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
