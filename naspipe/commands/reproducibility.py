"""``naspipe reproducibility``: write per-run verdicts against the sequential reference as JSON.

    naspipe reproducibility REFERENCE_RUN RUN [RUN ...] --out F.json

The verdicts are built by :func:`naspipe.report.reproducibility.build` (why the command exits 0
whatever the verdict is explained there); this module parses, writes the file atomically and
prints one line per run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from naspipe.fsutil import atomic_write_json, check_out_file
from naspipe.report.reproducibility import build
from naspipe.rundigest import add_undigested_argument

DESCRIPTION = "``naspipe reproducibility``: is each run bitwise identical to the sequential reference?"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "reproducibility",
        help="compare runs with the sequential reference and write the verdict as JSON",
        description=DESCRIPTION,
    )
    p.add_argument("reference", type=Path, help="the sequential D=1 run of the same space and seed")
    p.add_argument("runs", nargs="+", type=Path, help="run directories to compare with it")
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    add_undigested_argument(p)
    return p


def run(args: argparse.Namespace) -> int:
    check_out_file(args.out)
    data = build(args.reference, args.runs, args.undigested)
    atomic_write_json(args.out, data)
    for e in data["runs"]:
        verdict = "IDENTICAL" if e["identical"] else f"DIFFERENT (first divergence {e['first_divergence']})"
        print(f"{e['system']} D={e['stages']} seed={e['seed']}: {verdict}")
    return 0
