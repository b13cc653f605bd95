"""``naspipe attribute``: the paper's speedup over GPipe, one artifact factor at a time, plus the accounting table.

Writes ``attribution.csv`` (:mod:`naspipe.sim.attribution`) and, with ``--accounting-out``,
``accounting.csv``: every Table 2 system at its batch on the calibrated testbed (8 stages)
in samples/s and tokens/s side by side, under the paper's and the artifact's accounting.
Small step counts keep it a workflow job of about a minute; both files are written
atomically after every run has finished.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from naspipe.sim.hardware import Hardware

SPACES = ("nlp.c1", "nlp.c2", "nlp.c3", "cv.c1", "cv.c2", "cv.c3")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "attribute",
        description="Attribute the paper's NASPipe/GPipe ratio to the artifact's factors (calibrated testbed, "
        "tokens/s accounting, relaxed dependency check, 4 stages), one row per factor; and tabulate samples/s "
        "and tokens/s side by side.",
    )
    p.add_argument("--base", default="rtx2080ti-pcie3-40gbe", help="the uncalibrated spec (order -1)")
    p.add_argument("--fitted", default="rtx2080ti-paper-fit", help="the calibrated spec (naspipe calibrate)")
    p.add_argument("--spaces", default=",".join(SPACES), help=f"comma-separated (default {','.join(SPACES)})")
    p.add_argument("--steps", type=int, default=64, help="subnets per simulated run (default 64)")
    p.add_argument("--out", type=Path, required=True, help="attribution.csv to write")
    p.add_argument("--accounting-out", type=Path, default=None, help="accounting.csv to write (default: none)")
    return p


def parse_spaces(text: str) -> list[str]:
    from naspipe.errors import UsageError

    spaces = [s for s in text.split(",") if s]
    bad = [s for s in spaces if s not in SPACES]
    if bad or not spaces:
        raise UsageError(f"--spaces {text!r}: each must be one of {', '.join(SPACES)} (Table 2's spaces)")
    return spaces


def run(args: argparse.Namespace) -> int:
    from naspipe.commands.calibrate import write_csv
    from naspipe.errors import UsageError
    from naspipe.fsutil import check_creatable
    from naspipe.sim.attribution import attribution_rows
    from naspipe.sim.hardware import load_hardware

    spaces = parse_spaces(args.spaces)
    if args.steps < 1:
        raise UsageError(f"--steps {args.steps}: must be >= 1")
    base, fitted = load_hardware(args.base), load_hardware(args.fitted)
    for path, flag in ((args.out, "--out"), (args.accounting_out, "--accounting-out")):
        if path is not None:
            check_creatable(path, flag)
    rows = [r for space in spaces for r in attribution_rows(space, base, fitted, args.steps)]
    accounting = accounting_rows(spaces, fitted, args.steps) if args.accounting_out is not None else None
    write_csv(args.out, rows)
    if accounting is not None:
        write_csv(args.accounting_out, accounting)
    for r in rows:
        print(f"{r['space']} {r['order']:>2} {r['factor']:<14} ratio {r['ratio']:.2f} ({r['unit']})")
    return 0


def accounting_rows(spaces: list[str], hardware: Hardware, steps: int) -> list[dict[str, object]]:
    """Each Table 2 system at its batch, 8 stages: samples/s and tokens/s under both presets."""
    from naspipe.sim.accounting import PRESETS, throughputs
    from naspipe.sim.paper import SYSTEMS, TABLE2_STAGES
    from naspipe.sim.scenario import Scenario, simulate_scenario

    rows: list[dict[str, object]] = []
    for space in spaces:
        for acc in PRESETS.values():
            for system in SYSTEMS:
                s = Scenario(space, system, TABLE2_STAGES, acc.batch(space, system), steps=steps,
                             space_options=acc.space_options(space, system))
                t = throughputs(simulate_scenario(s, hardware), acc)
                rows.append({"space": space, "system": system, "accounting": acc.name, "batch": s.batch,
                             "tokens_per_sample": acc.tokens_per_sample(space, system),
                             "samples_s": t["samples_s"], "tokens_s": t["tokens_s"]})
    return rows
