"""The cross-replica gradient sum (issue 42): the ordered chain against all-reduce and all-gather, on gloo.

For R = 2, 3, 4 replica processes on this machine and buckets of 1, 16 and 64 MB of float32, each
replica holding the gradients of its m/R parts (m = R x ``--parts``), times one exchange from those
gradients to the total on every replica, local additions included:

- ``all_reduce``: each replica's parts summed locally, then gloo's all-reduce (not sequential's bits);
- ``chain``: :func:`~naspipe.runtime.reduce.chain_sum` whole (R - 1 hops, then a broadcast);
- ``chain/C``: the same, pipelined in C slices (the total goes back round the ring);
- ``gather``: :func:`~naspipe.runtime.reduce.gather_sum` (every part to every replica, m sums each).

A repeat's time is the slowest replica's (all start after a barrier); the table gives the median
over repeats and each method's ratio to all_reduce, and whether all_reduce happened to give the
sequential bits (the ordered methods are checked to agree with each other bit for bit). Loopback
gloo on a shared CPU machine: the ratios, not the absolute times, are what carries to a cluster.

    .venv/bin/python benchmarks/bench_reduce.py [--replicas 2 3 4] [--mb 1 16 64] [--parts 2]
        [--chunks 16] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from naspipe.runtime.reduce import Bucket, Grads, all_reduce_sum, chain_sum, gather_sum  # noqa: E402
from naspipe.scheduling.replicas import ReplicaLayout  # noqa: E402

Method = Callable[[Bucket, Sequence[Grads], ReplicaLayout], list[torch.Tensor | None]]


def methods(chunks: int) -> dict[str, Method]:
    return {"all_reduce": all_reduce_sum, "chain": chain_sum,
            f"chain/{chunks}": lambda b, p, layout: chain_sum(b, p, layout, chunks=chunks), "gather": gather_sum}


def part(mb: int, index: int) -> list[torch.Tensor | None]:
    """Part ``index``'s gradient bucket: one float32 tensor of ``mb`` MB, magnitudes 1e-3 to 1e3."""
    gen = torch.Generator().manual_seed(index)
    n = mb * 2**20 // 4
    return [torch.randn(n, generator=gen) * 10.0 ** torch.randint(-3, 4, (n,), generator=gen).float()]


def replica(rank: int, world: int, args: argparse.Namespace, out: str) -> None:
    """One replica process: every bucket size and method, ``args.repeats`` timed exchanges each."""
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    layout = ReplicaLayout(world * args.parts, world)
    rows = []
    for mb in args.mb:
        parts = [part(mb, j) for j in layout.parts(rank)]
        bucket = Bucket.like([t for t in parts[0] if t is not None])
        row: dict[str, Any] = {"R": world, "mb": mb, "m": layout.micro_batches}
        bits = {}
        for name, method in methods(args.chunks).items():
            row[name], result = _time(method, bucket, parts, layout, args.repeats)
            bits[name] = result
        row["ordered_agree"] = _all_agree([bits[n] for n in bits if n != "all_reduce"])
        row["all_reduce_same_bits"] = _all_agree([bits["all_reduce"], bits["chain"]])
        rows.append(row)
        del parts, bits
    if rank == 0:
        Path(out, "rows.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def _time(method: Method, bucket: Bucket, parts: Sequence[Grads], layout: ReplicaLayout,
          repeats: int) -> tuple[float, list[torch.Tensor | None]]:
    """Median over ``repeats`` (after one warm-up) of the slowest replica's seconds, and the last result."""
    result = method(bucket, parts, layout)
    spans = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        result = method(bucket, parts, layout)
        took = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        spans.append(float(took.item()))
    return statistics.median(spans), result


def _all_agree(results: list[list[torch.Tensor | None]]) -> bool:
    """Whether the results hold the same bytes (every replica must agree: a MIN over the group)."""
    first = results[0]
    same = all(len(r) == len(first) and all(_same_bytes(a, b) for a, b in zip(r, first, strict=True))
               for r in results[1:])
    flag = torch.tensor([int(same)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _same_bytes(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is b
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def run(world: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Spawn ``world`` replicas; rank 0's rows."""
    with tempfile.TemporaryDirectory(prefix="bench-reduce-") as out:
        context = mp.get_context("spawn")
        procs = [context.Process(target=replica, args=(r, world, args, out)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        failed = [p.exitcode for p in procs if p.exitcode != 0]
        if failed:
            raise SystemExit(f"bench_reduce: R = {world}: replicas exited with {failed}")
        rows: list[dict[str, Any]] = json.loads(Path(out, "rows.json").read_text())
        return rows


def table(rows: list[dict[str, Any]], chunks: int) -> str:
    names = list(methods(chunks))
    head = ["R", "bucket", "m", *(f"{n} ms" for n in names), "ordered agree", "all_reduce = sequential"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        base = row["all_reduce"]
        times = [f"{row[n] * 1e3:.1f}" + ("" if n == "all_reduce" else f" ({row[n] / base:.2f}x)") for n in names]
        verdicts = ["yes" if row["ordered_agree"] else "NO", "yes" if row["all_reduce_same_bits"] else "no"]
        lines.append(f"| {row['R']} | {row['mb']} MB | {row['m']} | " + " | ".join([*times, *verdicts]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--mb", type=int, nargs="+", default=[1, 16, 64], help="bucket sizes, MB of float32")
    parser.add_argument("--parts", type=int, default=2, help="parts per replica (m = R x parts)")
    parser.add_argument("--chunks", type=int, default=16, help="slices of the pipelined chain")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per replica")
    args = parser.parse_args()
    rows = [row for world in args.replicas for row in run(world, args)]
    print(table(rows, args.chunks))


if __name__ == "__main__":
    main()
