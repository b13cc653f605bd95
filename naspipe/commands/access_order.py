"""``naspipe access-order``: print one layer's access order per run, as paper Table 4 prints it.

    naspipe access-order RUN_DIR [RUN_DIR ...] [--layer L] [--limit N]

Reading the runs and rendering the rows is :mod:`naspipe.report.access_order`'s (the report's
Table 4 uses the same code); this module only parses the flags and prints.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from naspipe.report.access_order import read_access, render_table

DESCRIPTION = "Table 4: the access order of one layer, as the paper prints it (``2F-2B-5F-5B-7F-7B``)."


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "access-order", help="print one layer's access order per run (paper Table 4)", description=DESCRIPTION
    )
    p.add_argument("runs", nargs="+", type=Path, help="run directories")
    p.add_argument("--layer", type=int, help="layer id (default: the first run's most used layer)")
    p.add_argument("--limit", type=int, help="show at most N accesses per run")
    return p


def run(args: argparse.Namespace) -> int:
    print(render_table([read_access(p) for p in args.runs], args.layer, args.limit))
    return 0
