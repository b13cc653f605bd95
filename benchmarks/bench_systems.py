"""Every system on the same runtime, data and space, side by side: throughput, bubble, exec time.

Each repeat runs every system once (sequential, csp, gpipe, pipedream, vpipe,
csp-no-scheduler) with the real multi-process runtime (one process per stage, gloo), in an
order rotated per repeat so that slow phases of a shared machine do not always hit the same
system. Ratios against gpipe are taken within a repeat (side by side) and then the median
over repeats is reported, as are the medians of the raw metrics (DESIGN.md section 5).

Metrics (from each run's metrics.json): ``throughput_samples_s``; ``bubble_ratio`` = 1 -
sum of busy time (forward + recompute + backward + optimizer) / (D x makespan);
``exec_s`` = busy time per subnet (Table 2 "Exec."); ``swap_bytes``/``swap_wait_s`` summed
over stages (vpipe only).

    .venv/bin/python benchmarks/bench_systems.py [--stages 2] [--steps 32] [--repeats 3]
        [--set space.dim=64 ...] [--json FILE] [--keep DIR]

``--gpipe-bubble`` instead measures the wall-clock bubble of GPipe at D = B = 2 on a
compute-heavy space (all candidates the same op, uniform partition, 16 blocks per stage so
that compute dwarfs the per-message cost) and prints it beside the theory (D-1)/(B+D-1) =
1/3. The exact value of that schedule is a test in virtual time
(tests/test_baselines_runtime.py); on a real machine it is a measurement, so it is printed
here and never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from naspipe.config import load_config  # noqa: E402
from naspipe.runtime.launch import train  # noqa: E402

SYSTEMS = ("sequential", "csp", "gpipe", "pipedream", "vpipe", "csp-no-scheduler")
BASELINE = "gpipe"
# A tiny space where subnets collide (4 candidates per block) and layers are big enough that
# compute is not all Python overhead.
TINY = ("space.blocks=8", "space.candidates=4", "space.dim=64", "space.seq_len=16", "space.batch_size=8")


def one_run(system: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    config = load_config(None, [*TINY, *args.overrides],
                         {"system": system, "stages": args.stages, "steps": args.steps, "seed": args.seed,
                          "progress": "off"})
    metrics = train(config, out)
    assert metrics is not None
    extra = metrics.get("stage_extra", [])
    return {
        "throughput_samples_s": metrics["throughput_samples_s"],
        "bubble_ratio": metrics["bubble_ratio"],
        "exec_s": metrics["exec_s"],
        "makespan_s": metrics["makespan_s"],
        "swap_bytes": sum(e.get("swap_bytes", 0.0) for e in extra),
        "swap_wait_s": sum(e.get("swap_wait_s", 0.0) for e in extra),
    }


BUBBLE_SPACE = ("space.candidates=1", "space.blocks=32", "space.dim=256", "space.dropout=0.0",
                "partition_costs=uniform")


def gpipe_bubble(repeats: int, seed: int) -> None:
    """Print the wall-clock bubble of GPipe at D = B = 2 (median of ``repeats`` runs) and the theory."""
    ratios = []
    with tempfile.TemporaryDirectory(prefix="naspipe-bubble-") as root:
        for r in range(repeats):
            config = load_config(None, BUBBLE_SPACE, {"system": "gpipe", "stages": 2, "steps": 16, "seed": seed,
                                                      "progress": "off"})
            metrics = train(config, Path(root) / str(r))
            assert metrics is not None
            ratios.append(float(metrics["bubble_ratio"]))
            print(f"repeat {r} gpipe D=2 B=2 bubble {ratios[-1]:.4f}", file=sys.stderr, flush=True)
    print(f"gpipe D=2 B=2 wall-clock bubble: median {statistics.median(ratios):.4f} over {repeats} runs "
          f"(min {min(ratios):.4f}, max {max(ratios):.4f}); theory (D-1)/(B+D-1) = {1 / 3:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated; must include gpipe")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override on top of the tiny space (repeatable)")
    parser.add_argument("--json", type=Path, help="write raw runs and medians here")
    parser.add_argument("--keep", type=Path, help="keep the run directories under DIR")
    parser.add_argument("--gpipe-bubble", action="store_true",
                        help="only measure GPipe's wall-clock bubble at D = B = 2 against the theory")
    args = parser.parse_args()
    if args.gpipe_bubble:
        gpipe_bubble(args.repeats, args.seed)
        return
    systems = args.systems.split(",")
    if BASELINE not in systems:
        parser.error(f"--systems must include {BASELINE} (ratios are against it)")

    root = args.keep or Path(tempfile.mkdtemp(prefix="naspipe-bench-"))
    raw: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    started = time.perf_counter()
    for r in range(args.repeats):
        order = systems[r % len(systems):] + systems[: r % len(systems)]
        for system in order:
            raw[system].append(one_run(system, args, root / f"r{r}" / system))
            m = raw[system][-1]
            print(f"repeat {r} {system:<17} {m['throughput_samples_s']:8.1f} samples/s  bubble {m['bubble_ratio']:.3f}"
                  f"  exec {m['exec_s'] * 1e3:7.2f} ms", file=sys.stderr, flush=True)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)

    def median(system: str, key: str) -> float:
        return statistics.median(m[key] for m in raw[system])

    def ratio(system: str, key: str) -> float:  # within each repeat, then the median
        return statistics.median(a[key] / b[key] for a, b in zip(raw[system], raw[BASELINE], strict=True))

    rows = []
    for system in systems:
        rows.append({
            "system": system,
            **{k: median(system, k) for k in ("throughput_samples_s", "bubble_ratio", "exec_s", "makespan_s",
                                              "swap_bytes", "swap_wait_s")},
            "throughput_vs_gpipe": ratio(system, "throughput_samples_s"),
            "exec_vs_gpipe": ratio(system, "exec_s"),
        })
    settings = dict(item.split("=", 1) for item in [*TINY, *args.overrides])  # later overrides win
    space = ", ".join(f"{k}={v}" for k, v in settings.items())
    print(f"\nD={args.stages}, {args.steps} subnets, toy space ({space}), medians of {args.repeats} repeats, "
          f"{time.perf_counter() - started:.0f} s total\n")
    print("| system | throughput (samples/s) | vs gpipe | bubble | exec (ms/subnet) | exec vs gpipe "
          "| swap MB | swap wait (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['system']} | {row['throughput_samples_s']:.1f} | {row['throughput_vs_gpipe']:.2f}x | "
              f"{row['bubble_ratio']:.3f} | {row['exec_s'] * 1e3:.2f} | {row['exec_vs_gpipe']:.2f}x | "
              f"{row['swap_bytes'] / 1e6:.1f} | {row['swap_wait_s']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows, "raw": raw},
                                        indent=2))


if __name__ == "__main__":
    main()
