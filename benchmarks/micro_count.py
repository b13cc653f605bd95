"""The micro-batch count of the fast NASPipe (csp-mb): samples/s against m at every stage count, on both of the
paper plan's hardware specs, with PipeDream (asynchronous, m-free) beside it.

Why: the plan gives csp-mb one ``micro_batches`` value for every stage count (a count that follows the stage
count trains differently at each, which NASPipe promises never happens), so the value is chosen from this
table: the m that is fastest, or within 1% of it, at 8 and 16 stages where the pipeline needs the parts.
Runs ``naspipe simulate`` in-process with the paper plan's simulate settings (analytic costs, the largest
batch that fits, stages balanced by costs, SGD without momentum, the context manager, static partitions,
split backward, critical priorities), one run directory per cell under ``--out``; prints a markdown table.

    python benchmarks/micro_count.py --out /tmp/micro-count [--steps 256] [--counts 8,16,32]
        [--spaces nlp.c1,nlp.c3,cv.c3] [--stages 4,8,16] [--hardware rtx2080ti-pcie3-40gbe,h100-nvlink-ib]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from naspipe.cli import main

PLAN = ["--costs", "analytic", "--batch", "max", "--partition-by", "costs", "--set", "optimizer.name=sgd",
        "--set", "optimizer.momentum=0.0"]
MICRO = ["--set", "cache.enabled=true", "--set", "partition_mode=static", "--set", "split_backward=true",
         "--set", "priority=critical"]


def samples_s(out: Path, hardware: str, space: str, stages: int, steps: int, m: int | None) -> float:
    """One simulated run (``m`` None: pipedream), its samples/s; reused when its directory exists."""
    run = out / hardware / space / (f"m{m}" if m else "pipedream") / f"D{stages}"
    if not (run / "metrics.json").exists():
        system = ["--system", "csp", *MICRO, "--set", f"micro_batches={m}"] if m else ["--system", "pipedream"]
        code = main(["simulate", "--space", space, "--stages", str(stages), "--steps", str(steps), "--hardware",
                     hardware, *PLAN, *system, "--out", str(run), "--overwrite"])
        if code != 0:
            raise SystemExit(f"simulate failed for {run}")
    return float(json.loads((run / "metrics.json").read_text())["throughput_samples_s"])


def main_() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--counts", default="8,16,32")
    parser.add_argument("--spaces", default="nlp.c1,nlp.c3,cv.c3")
    parser.add_argument("--stages", default="4,8,16")
    parser.add_argument("--hardware", default="rtx2080ti-pcie3-40gbe,h100-nvlink-ib")
    args = parser.parse_args()
    counts = [int(m) for m in args.counts.split(",")]
    stages = [int(d) for d in args.stages.split(",")]
    header = " | ".join(f"m = {m}" for m in counts)
    print(f"| hardware | space | {header} | pipedream |\n|---|---|" + "---|" * (len(counts) + 1))
    for hardware in args.hardware.split(","):
        for space in args.spaces.split(","):
            cells = [" / ".join(f"{samples_s(args.out, hardware, space, d, args.steps, m):.0f}" for d in stages)
                     for m in [*counts, None]]
            print(f"| {hardware} | {space} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main_()
