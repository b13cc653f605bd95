"""csp with micro-batched subnets and a split backward against the paper's schedule, side by side.

Each repeat runs the whole ``naspipe train`` command (a fresh process, one process per stage, gloo)
once per setting, in an order rotated per repeat so that a slow phase of a shared machine does not
always hit the same setting. Per run: the command's wall time, and from its ``metrics.json`` the
makespan (the stages' training span), ``throughput_samples_s`` and ``bubble_ratio``. Ratios against
m = 1 are taken within a repeat (side by side), then the median over repeats is printed, with the
medians of the raw figures (DESIGN.md section 5).

    .venv/bin/python benchmarks/bench_micro.py [--space nlp.tiny] [--stages 2] [--steps 32] [--repeats 5]
        [--setting NAME=KEY=VALUE,KEY=VALUE ...] [--set KEY=VALUE ...] [--json FILE]

Settings by default: ``m1`` (the paper's schedule), ``m2`` (micro_batches=2), ``m2-split``
(micro_batches=2, split_backward=true), ``m4-split``; each with the default priority (critical).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"m1": [], "m2": ["micro_batches=2"], "m2-split": ["micro_batches=2", "split_backward=true"],
            "m4-split": ["micro_batches=4", "split_backward=true"]}
FIGURES = ("wall_s", "makespan_s", "throughput_samples_s", "bubble_ratio")


def one_run(settings: list[str], args: argparse.Namespace, out: Path) -> dict[str, float]:
    """The whole command, timed from outside; its metrics."""
    sets = [word for item in [*args.overrides, *settings] for word in ("--set", item)]
    command = [sys.executable, "-m", "naspipe", "train", "--space", args.space, "--system", "csp", "--stages",
               str(args.stages), "--steps", str(args.steps), "--seed", "0", "--out", str(out), "--set", "progress=off",
               *sets]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    metrics = json.loads((out / "metrics.json").read_text())
    return {"wall_s": wall, **{key: float(metrics[key]) for key in FIGURES[1:]}}


def measure(args: argparse.Namespace, settings: dict[str, list[str]]) -> dict[str, Any]:
    names = list(settings)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="bench-micro-") as tmp:
        for repeat in range(args.repeats):
            order = names[repeat % len(names):] + names[:repeat % len(names)]
            for name in order:
                runs[name].append(one_run(settings[name], args, Path(tmp) / f"{name}-{repeat}"))
    base = names[0]
    summary: dict[str, Any] = {}
    for name in names:
        row: dict[str, Any] = {key: statistics.median(r[key] for r in runs[name]) for key in FIGURES}
        for key in ("wall_s", "makespan_s", "throughput_samples_s"):
            pairs = [r[key] / b[key] for r, b in zip(runs[name], runs[base], strict=True)]
            row[f"{key} / {base}"] = statistics.median(pairs)
        summary[name] = row
    return {"space": args.space, "stages": args.stages, "steps": args.steps, "repeats": args.repeats,
            "settings": settings, "median": summary, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="nlp.tiny")
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=KEY=VALUE,...",
                        help="a setting to measure instead of the defaults (the first is the base of the ratios)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.steps < 1 or args.stages < 1:
        parser.error("--repeats, --steps and --stages must be >= 1")
    settings = SETTINGS
    if args.setting:
        settings = {}
        for item in args.setting:
            name, _, rest = item.partition("=")
            if not name:
                parser.error(f"--setting {item!r}: expected NAME=KEY=VALUE,...")
            settings[name] = [kv for kv in rest.split(",") if kv]
    result = measure(args, settings)
    print(f"csp, {args.space}, D={args.stages}, {args.steps} steps, medians of {args.repeats} repeats")
    for name, row in result["median"].items():
        ratios = ", ".join(f"{k} {v:.3f}" for k, v in row.items() if "/" in k)
        print(f"  {name:10s} wall {row['wall_s']:.2f} s, makespan {row['makespan_s']:.2f} s, "
              f"{row['throughput_samples_s']:.1f} samples/s, bubble {row['bubble_ratio']:.3f}; {ratios}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
