"""``naspipe claims``: check the paper's claims against a results tree's tables.

    naspipe claims --results RESULTS [--claims FILE.yaml] [--out RESULTS/tables/claims.csv]

Reads every ``RESULTS/tables/*.csv`` (the report's tables and, when the workflow wrote them,
the simulator's ``calibration``, ``attribution`` and ``bubble_models`` tables), judges each
claim of the ledger and writes the claims table as CSV and markdown beside it. Prints the
tally. Bad input (no tables directory, a damaged table, a ledger that breaks the schema) is
one line and exit 2, nothing written.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    doc = __doc__ or "naspipe claims"
    p: argparse.ArgumentParser = sub.add_parser("claims", description=doc.splitlines()[0])
    p.add_argument("--results", type=Path, required=True, help="results directory (reads RESULTS/tables)")
    p.add_argument("--claims", type=Path, default=None, help="a claims ledger (default: the package's)")
    p.add_argument("--out", type=Path, default=None, help="CSV to write (default RESULTS/tables/claims.csv); "
                   "the markdown goes beside it")
    return p


def run(args: argparse.Namespace) -> int:
    from naspipe.claims.evaluate import tally
    from naspipe.claims.ledger import load_claims
    from naspipe.claims.sources import read_tables
    from naspipe.fsutil import atomic_write_text
    from naspipe.report.claims import build

    claims = load_claims(args.claims)
    table = build(claims, read_tables(args.results / "tables"))
    out: Path = args.out or args.results / "tables" / "claims.csv"
    atomic_write_text(out, table.csv())
    atomic_write_text(out.with_suffix(".md"), f"# {table.title}\n\n{table.markdown()}")
    counts = ", ".join(f"{n} {v}" for v, n in tally(table.frame).items())
    print(f"claims: {len(claims)} checked ({counts}) -> {out}")
    return 0
