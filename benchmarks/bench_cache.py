"""Device-cache hit rate and copy wait against cache size and predictor horizon (issue 9).

Two tables, same grid: cache of 1, 2, 3, 4 subnets' stage share x horizon on-demand (0),
2, 8 tasks, and (virtual only) the offline optimum.

- ``runtime``: real runs (``naspipe train``, CPU, the copy thread) with the cache on; hit
  rate, swap bytes and ``copy_wait_s`` from metrics.json, copy wait as a share of busy time
  (the sum of the stages' compute spans). The optimum needs the future, so it has no row.
- ``virtual``: the same scheduling core in virtual time (the driver, unit task durations);
  each stage's :class:`~naspipe.context.DeviceCache` is driven at every task start with the
  predictor's upcoming uses, or, for ``optimal``, the stage's true future from a first pass
  (Belady). No copy timing: a layer whose copy was issued before the task starts counts as
  resident, so this table isolates the decisions from the copy engine.

    .venv/bin/python benchmarks/bench_cache.py [--mode runtime|virtual|both] [--stages 4]
        [--candidates 24] [--blocks 8] [--steps 96] [--inflight D] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naspipe import cli  # noqa: E402
from naspipe.config import load_config  # noqa: E402
from naspipe.context import DeviceCache  # noqa: E402
from naspipe.runplan.job import build_job  # noqa: E402
from naspipe.runtime.context import layer_bytes  # noqa: E402
from naspipe.scheduling import StagePolicy, Task  # noqa: E402
from naspipe.scheduling.driver import drive  # noqa: E402
from naspipe.scheduling.predictor import layer_uses, predict, task_layers  # noqa: E402

SIZES = (1, 2, 3, 4)
HORIZONS: tuple[int | str, ...] = (0, 2, 8, "optimal")
FUTURE = 64  # tasks of the true future the optimum looks at (more changes nothing at these sizes)


def space_args(args: argparse.Namespace) -> list[str]:
    """The space, and the subnets in flight (the cache must hold what those subnets reuse)."""
    return ["--set", f"max_inflight={args.inflight or args.stages}", "--set", f"space.blocks={args.blocks}",
            "--set", f"space.candidates={args.candidates}",
            "--set", "space.dim=128", "--set", "space.seq_len=16"]


def runtime_row(args: argparse.Namespace, size: int, horizon: int, out: Path) -> dict[str, Any]:
    argv = ["train", "--system", "csp", "--stages", str(args.stages), "--steps", str(args.steps),
            "--out", str(out), *space_args(args), "--set", "cache.enabled=true",
            "--set", f"cache.budget={size}x", "--set", f"cache.horizon={horizon}"]
    with contextlib.redirect_stdout(io.StringIO()):
        if cli.main(argv) != 0:
            raise SystemExit(f"run failed: {' '.join(argv)}")
    m = json.loads((out / "metrics.json").read_text())
    busy = m["exec_s"] * m["subnets"]
    return {"mode": "runtime", "subnets_cached": size, "horizon": horizon, "hit_rate": m["cache_hit_rate"],
            "copy_wait_s": m["copy_wait_s"], "copy_wait_share": m["copy_wait_s"] / busy,
            "swap_in_bytes": m["swap_in_bytes"], "throughput_samples_s": m["throughput_samples_s"]}


def virtual_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    config = load_config(None, space_args(args)[1::2], {"system": "csp", "stages": args.stages, "steps": args.steps})
    job = build_job(config)
    plan = job.plan
    sizes: dict[int, int] = {}
    shares = []
    for stage in range(args.stages):
        stage_sizes = {lid: layer_bytes(job.space.build_layer(lid, 0), config.optimizer)
                       for lid in job.stage_layer_ids(stage)}
        sizes.update(stage_sizes)
        shares.append(max(1, plan.largest_share(stage, args.steps, stage_sizes)))  # as the worker sizes its cache
    options = job.policy_options
    schedule = drive(plan, "csp", args.steps, options)
    rows = []
    for size in SIZES:
        for horizon in HORIZONS:
            caches = [DeviceCache(size * shares[k], {lid: sizes[lid] for lid in job.stage_layer_ids(k)})
                      for k in range(args.stages)]
            position = [0] * args.stages
            future = [schedule.tasks(k) for k in range(args.stages)]

            def start(task: Task, policy: StagePolicy, horizon: int | str = horizon,
                      caches: list[DeviceCache] = caches, position: list[int] = position,
                      future: list[list[Task]] = future) -> None:
                k = policy.stage
                i = position[k]
                position[k] += 1
                if horizon == "optimal":
                    upcoming = layer_uses(plan, future[k][i + 1 : i + 1 + FUTURE])
                else:
                    upcoming = layer_uses(plan, predict(policy, int(horizon), args.steps, running=task))
                cache = caches[k]
                layers = task_layers(plan, task)
                for layer in cache.resident:  # everything issued before this task has arrived
                    cache.arrived(layer)
                cache.acquire(layers, upcoming)
                for layer in layers:
                    cache.arrived(layer)
                cache.prefetch(upcoming)
                cache.release(layers, dirty=task.kind.value == "U")

            drive(plan, "csp", args.steps, options, on_start=start)
            uses = sum(c.stats.uses for c in caches)
            hits = sum(c.stats.hits for c in caches)
            rows.append({"mode": "virtual", "subnets_cached": size, "horizon": horizon, "hit_rate": hits / uses,
                         "swap_in_bytes": sum(c.stats.swap_in_bytes for c in caches)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("runtime", "virtual", "both"), default="both")
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--candidates", type=int, default=24)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--inflight", type=int, default=0, help="max_inflight (0: the stage count)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    if args.mode in ("virtual", "both"):
        rows += virtual_rows(args)
    if args.mode in ("runtime", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            for size in SIZES:
                for horizon in (0, 2, 8):
                    rows.append(runtime_row(args, size, horizon, Path(tmp) / f"r{size}-{horizon}"))
    print(f"{'mode':8} {'cache':>6} {'horizon':>8} {'hit rate':>9} {'copy wait / busy':>17} {'swap-in MB':>11}")
    for r in rows:
        share = f"{100 * r['copy_wait_share']:.2f}%" if "copy_wait_share" in r else "-"
        print(f"{r['mode']:8} {r['subnets_cached']:>5}x {r['horizon']!s:>8} {100 * r['hit_rate']:8.1f}% "
              f"{share:>17} {r['swap_in_bytes'] / 1e6:11.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
