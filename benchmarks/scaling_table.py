"""Samples/s against stages from the paper plan's simulate jobs, with issue 33's acceptance checks.

Reads ``results/sim/HARDWARE/SPACE/SYSTEM/D{stages}/metrics.json`` (what
``snakemake --configfile config/paper.yaml --until simulate`` writes) and prints one markdown table
per hardware spec: throughput of the paper's csp, csp-mb (this NASPipe: micro-batched subnets, a
split backward, critical-path priorities), gpipe and vpipe in the paper's form and micro-batched (gpipe-mb,
vpipe-mb: each subnet's batch in the same parts), and pipedream at each stage count. Then the checks:
every csp-mb run fits; at 8 and 16 stages csp-mb beats the best of the bulk-synchronous runs (of those that
fit: ``*`` marks a run that does not) in every (hardware, space) cell, with the margin; csp-mb's
throughput at the largest stage count over the
smallest, per space (target on nlp.c1, h100-nvlink-ib: 2.5x); csp-mb over asynchronous PipeDream at 8 and 16
stages (target on every NLP space on h100-nvlink-ib: 0.9x). Exit status 1 when a check fails.

    python benchmarks/scaling_table.py [--results results] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SYSTEMS = ("csp", "csp-mb", "gpipe", "gpipe-mb", "vpipe", "vpipe-mb", "pipedream")
BULK = ("gpipe", "gpipe-mb", "vpipe", "vpipe-mb")
TARGET = ("h100-nvlink-ib", "nlp.c1", 2.5)
ASYNC = ("h100-nvlink-ib", "nlp.", 0.9)  # csp-mb against asynchronous PipeDream at 8 and 16 stages (issue 40)


def load(results: Path) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    runs = {}
    for path in sorted(results.glob("sim/*/*/*/D*/metrics.json")):
        if not path.parent.name[1:].isdigit():  # a run being written (D16.partial)
            continue
        hw, space, system, d = path.parts[-5:-1]
        runs[(hw, space, system, int(d[1:]))] = json.loads(path.read_text())
    return runs


def tables(runs: dict[tuple[str, str, str, int], dict[str, Any]]) -> list[str]:
    lines = []
    for hw in sorted({k[0] for k in runs}):
        stages = sorted({k[3] for k in runs if k[0] == hw})
        header = " | ".join(f"{s} D={'/'.join(map(str, stages))}" for s in SYSTEMS)
        lines += [f"\n{hw} (samples/s)\n", f"| space | {header} |", "|---|" + "---|" * len(SYSTEMS)]
        for space in sorted({k[1] for k in runs if k[0] == hw}):
            cells = []
            for system in SYSTEMS:
                values = [runs.get((hw, space, system, d)) for d in stages]
                cells.append(" / ".join(f"{m['throughput_samples_s']:.0f}" + ("" if m.get("fits", True) else "*")
                                        if m else "-" for m in values))
            lines.append(f"| {space} | {' | '.join(cells)} |")
    return lines


def checks(runs: dict[tuple[str, str, str, int], dict[str, Any]]) -> tuple[list[str], bool]:
    lines, ok = [], True
    cells = sorted({(hw, space, d) for hw, space, system, d in runs if system == "csp-mb"})
    for hw, space, d in cells:
        mb = runs[(hw, space, "csp-mb", d)]
        if not mb.get("fits", True):
            ok = False
            lines.append(f"FAIL {hw} {space} D={d}: csp-mb does not fit")
        if d < 8:
            continue
        baselines = {s: runs[(hw, space, s, d)] for s in BULK if (hw, space, s, d) in runs}
        fitting = {s: m["throughput_samples_s"] for s, m in baselines.items() if m.get("fits", True)}
        if len(baselines) < len(BULK):
            ok = False
            lines.append(f"MISS {hw} {space} D={d}: {', '.join(s for s in BULK if s not in baselines)} not simulated")
            continue
        if not fitting:
            lines.append(f"ok   {hw} {space} D={d}: no bulk-synchronous run fits")
            continue
        best = max(fitting, key=lambda s: fitting[s])
        margin = mb["throughput_samples_s"] / fitting[best]
        ok &= margin > 1.0
        lines.append(f"{'ok  ' if margin > 1.0 else 'FAIL'} {hw} {space} D={d}: csp-mb / best bulk-synchronous "
                     f"({best}) = {margin:.2f}")
        line, fine = _against_pipedream(runs, hw, space, d, mb)
        ok &= fine
        lines += line
    for hw, space in sorted({(hw, space) for hw, space, _ in cells}):
        ds = sorted(d for h, s, d in cells if (h, s) == (hw, space))
        ratio = runs[(hw, space, "csp-mb", ds[-1])]["throughput_samples_s"] / runs[(hw, space, "csp-mb", ds[0])][
            "throughput_samples_s"]
        paper = [runs.get((hw, space, "csp", d)) for d in (ds[0], ds[-1])]
        flat = f", paper csp {paper[1]['throughput_samples_s'] / paper[0]['throughput_samples_s']:.2f}x" \
            if all(paper) else ""
        target = (hw, space) == TARGET[:2]
        if target:
            ok &= ratio >= TARGET[2]
        lines.append(f"{'scaling' if not target else ('ok  ' if ratio >= TARGET[2] else 'FAIL')} {hw} {space}: "
                     f"csp-mb D={ds[-1]} / D={ds[0]} = {ratio:.2f}x{flat}")
    return lines, ok


def _against_pipedream(runs: dict[tuple[str, str, str, int], dict[str, Any]], hw: str, space: str, d: int,
                       mb: dict[str, Any]) -> tuple[list[str], bool]:
    """csp-mb over asynchronous PipeDream; a check (>= ASYNC's ratio) on ASYNC's hardware and spaces."""
    pd = runs.get((hw, space, "pipedream", d))
    if pd is None or not pd.get("fits", True) or not pd["throughput_samples_s"]:
        return [], True
    ratio = mb["throughput_samples_s"] / pd["throughput_samples_s"]
    checked = hw == ASYNC[0] and space.startswith(ASYNC[1])
    fine = not checked or ratio >= ASYNC[2]
    word = ("ok  " if fine else "FAIL") if checked else "info"
    return [f"{word} {hw} {space} D={d}: csp-mb / pipedream = {ratio:.2f}"], fine


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--json", type=Path, help="write the throughputs here")
    args = parser.parse_args()
    runs = load(args.results)
    if not runs:
        print(f"no simulated runs under {args.results}/sim", file=sys.stderr)
        return 2
    print("\n".join(tables(runs)))
    lines, ok = checks(runs)
    print("\n" + "\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"/".join(map(str, k)): v["throughput_samples_s"] for k, v in runs.items()},
                                        indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
