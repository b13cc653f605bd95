"""``naspipe compare``: exit 0 when runs are bitwise identical, 1 with the first divergence otherwise.

Imports no torch: comparing is reading CSV files and digests.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from naspipe.rundigest import add_undigested_argument


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "compare", description="Check runs are bitwise identical (exit 0) or report where they diverge (exit 1)."
    )
    p.add_argument("runs", nargs="+", type=Path, help="run directories (the first is the reference)")
    add_undigested_argument(p)
    return p


def run(args: argparse.Namespace) -> int:
    from naspipe.compare import compare_runs

    same, text = compare_runs(args.runs, args.undigested)
    print(text)
    return 0 if same else 1
