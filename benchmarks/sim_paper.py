"""The paper's evaluation in simulated time on its testbed: Table 2's shape and Figure 7, beside the paper.

Runs ``naspipe simulate`` (in-process, one run at a time) for the seven spaces x four systems at
8 stages (each at the largest batch it fits), and the four systems on nlp.c1 at 4/8/12/16
stages, then prints one markdown table per figure with NASPipe's ratios to each baseline.
Every run is a separate run directory under ``--out`` (metrics.json as the report reads it).

    python benchmarks/sim_paper.py --out /tmp/sim-paper [--steps 256] [--partition-mode per-subnet]
        [--partition-by costs] [--only table2|fig7] [--hardware rtx2080ti-paper-fit]

Settings the comparison rests on (each a flag, defaults as the workflow's ``simulate`` key):
SGD without momentum (no per-parameter optimizer state: what the paper's Table 2 implies),
csp with the context manager (``cache.budget`` 3x), analytic costs on rtx2080ti-pcie3-40gbe.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from naspipe.cli import main
from naspipe.sim.accounting import preset, throughputs

PAPER = preset("paper")  # tokens/s beside samples/s: 64-token sentences (NLP), one token an image (CV)

SPACES = ["nlp.c0", "nlp.c1", "nlp.c2", "nlp.c3", "cv.c1", "cv.c2", "cv.c3"]
SYSTEMS = ["csp", "gpipe", "pipedream", "vpipe"]
FIG7_STAGES = [4, 8, 12, 16]


def simulate(out: Path, space: str, system: str, stages: int, args: argparse.Namespace) -> dict[str, Any]:
    run = out / space / system / f"D{stages}"
    sets = [f"optimizer.name={args.optimizer}", f"optimizer.momentum={args.momentum}"]
    if system == "csp":
        sets += ["cache.enabled=true", f"cache.budget={args.cache_budget}", f"partition_mode={args.partition_mode}"]
    argv = ["simulate", "--space", space, "--system", system, "--stages", str(stages), "--steps", str(args.steps),
            "--hardware", args.hardware, "--costs", "analytic", "--batch", "max", "--partition-by", args.partition_by,
            "--out", str(run), "--overwrite",
            *(x for s in sets for x in ("--set", s))]
    start = time.process_time()
    if main(argv) != 0:
        raise SystemExit(f"failed: naspipe {' '.join(argv)}")
    metrics: dict[str, Any] = json.loads((run / "metrics.json").read_text())
    metrics["cpu_s"] = time.process_time() - start
    return metrics


def table2(rows: dict[tuple[str, str], dict[str, Any]]) -> str:
    head = ("| space | system | batch | GPU GB | CPU GB/host | fits | exec s | bubble | cache hit | samples/s | "
            "tokens/s | NASPipe x |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for space in SPACES:
        csp = rows[(space, "csp")]
        for system in SYSTEMS:
            m = rows[(space, system)]
            ratio = csp["throughput_samples_s"] / m["throughput_samples_s"] if m["fits"] and csp["fits"] else None
            lines.append(
                f"| {space} | {system} | {m['batch_size'] if m['max_batch'] else 'OOM'} | "
                f"{m['device_bytes'] / 1e9:.1f} | {m['host_bytes'] / 1e9:.1f} | {'yes' if m['fits'] else 'no'} | "
                f"{m['exec_s']:.3f} | {m['bubble_ratio']:.2f} | {m['cache_hit_rate']:.2f} | "
                f"{m['throughput_samples_s']:.1f} | {throughputs(m, PAPER)['tokens_s']:.0f} | "
                f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    return "\n".join(lines)


def figure7(rows: dict[tuple[str, int], dict[str, Any]]) -> str:
    lines = ["| stages | " + " | ".join(SYSTEMS) + " | NASPipe / GPipe |", "|---" * (len(SYSTEMS) + 2) + "|"]
    for d in FIG7_STAGES:
        cells = [f"{rows[(s, d)]['throughput_samples_s']:.1f} (b{rows[(s, d)]['batch_size']}"
                 f"{'' if rows[(s, d)]['fits'] else ', OOM'})" for s in SYSTEMS]
        csp, gpipe = rows[("csp", d)], rows[("gpipe", d)]
        ratio = f"{csp['throughput_samples_s'] / gpipe['throughput_samples_s']:.2f}" if gpipe["fits"] else "-"
        lines.append(f"| {d} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--hardware", default="rtx2080ti-pcie3-40gbe")
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--cache-budget", default="3x")
    p.add_argument("--partition-mode", default="static", choices=["static", "per-subnet"])
    p.add_argument("--partition-by", default="config", choices=["config", "costs"])
    p.add_argument("--only", choices=["table2", "fig7"], default=None)
    return p.parse_args(argv)


def run(argv: list[str]) -> int:
    args = parse(argv)
    if args.only != "fig7":
        t2 = {(space, system): simulate(args.out / "t2", space, system, 8, args)
              for space in SPACES for system in SYSTEMS}
        print(table2(t2), flush=True)
    if args.only != "table2":
        f7 = {(system, d): simulate(args.out / "f7", "nlp.c1", system, d, args)
              for d in FIG7_STAGES for system in SYSTEMS}
        print("\n" + figure7(f7))
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
