"""The fast NASPipe on a GPU count, in the best layout (issue 42): samples/s at G = 4 ... 64 GPUs, each with the
D stages x R replicas that ``naspipe simulate --gpus G`` chooses, beside the pipeline-only layout (G stages, R = 1,
where a subnet has that many positions) and PipeDream at 16 stages (asynchronous, the paper's form).

Runs ``naspipe simulate`` in-process with the paper plan's simulate settings on h100-nvlink-ib (analytic costs, the
batch with the highest simulated throughput that fits, stages balanced by costs, SGD without momentum, the context
manager, static partitions, m = 32, split backward, critical priorities), one run directory per cell under
``--out`` (reused when there); prints a markdown table. Backs docs/performance.md's "Any number of GPUs" table.

    python benchmarks/gpu_layouts.py --out /tmp/gpu-layouts [--steps 256] [--gpus 4,8,16,32,64]
        [--spaces nlp.c0,nlp.c1,nlp.c2,nlp.c3,cv.c1,cv.c2,cv.c3] [--hardware h100-nvlink-ib]
        [--micro-batches 32] [--batch best]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path
from typing import Any

from naspipe.cli import main

PLAN = ["--costs", "analytic", "--partition-by", "costs", "--set", "optimizer.name=sgd", "--set",
        "optimizer.momentum=0.0"]
FAST = ["--system", "csp", "--set", "cache.enabled=true", "--set", "partition_mode=static", "--set",
        "split_backward=true", "--set", "priority=critical"]


def simulated(run: Path, args: list[str]) -> dict[str, Any]:
    """One simulated run's metrics (reused when its directory exists)."""
    if not (run / "metrics.json").exists():
        with contextlib.redirect_stdout(io.StringIO()):  # its one-line summary: the table is this script's output
            code = main(["simulate", *args, *PLAN, "--out", str(run), "--overwrite"])
        if code != 0:
            raise SystemExit(f"simulate failed for {run}")
    return json.loads((run / "metrics.json").read_text())


def main_(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--gpus", default="4,8,16,32,64")
    parser.add_argument("--spaces", default="nlp.c0,nlp.c1,nlp.c2,nlp.c3,cv.c1,cv.c2,cv.c3")
    parser.add_argument("--hardware", default="h100-nvlink-ib")
    parser.add_argument("--micro-batches", type=int, default=32, help="m (the paper plan's: 32)")
    parser.add_argument("--batch", default="best", help="--batch of every run (the paper plan's on h100: best)")
    args = parser.parse_args(argv)
    counts = [int(g) for g in args.gpus.split(",")]
    common = ["--steps", str(args.steps), "--seed", "0", "--hardware", args.hardware, "--batch", args.batch]
    fast = [*FAST, "--set", f"micro_batches={args.micro_batches}"]
    print(f"| space | {' | '.join(f'{g} GPUs' for g in counts)} | pipedream D=16 | best 16 / pipedream |")
    print(f"|---|{'---|' * len(counts)}---|---|")
    for space in args.spaces.split(","):
        cells, at16 = [], 0.0
        for g in counts:
            m = simulated(args.out / space / f"G{g}", ["--space", space, "--gpus", str(g), *common, *fast])
            search = m["layout_search"]
            flat = next((t for t in search["tried"] if t["replicas"] == 1), None)
            alone = f" (R=1: {flat['throughput_samples_s']:.0f})" if flat is not None else ""
            cells.append(f"{m['throughput_samples_s']:.0f} at {search['stages']}x{search['replicas']}{alone}"
                         + ("" if search["fits"] else " (does not fit)"))
            if g == 16:
                at16 = m["throughput_samples_s"]
        pd = simulated(args.out / space / "pipedream16", ["--space", space, "--stages", "16", *common,
                                                          "--system", "pipedream"])["throughput_samples_s"]
        ratio = f"{at16 / pd:.2f}x" if at16 else "-"
        print(f"| {space} | {' | '.join(cells)} | {pd:.0f} | {ratio} |")


if __name__ == "__main__":
    main_()
