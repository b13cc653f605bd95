"""The report's first section, "The paper's claims, checked": every claim of the ledger against the tables.

Built after the other sections, from their tables as they read back from CSV (plus the
simulator's calibration, attribution and bubble-model tables when given), so ``report.md``,
``tables/claims.csv`` and ``naspipe claims`` on the written tables all say the same. The
numbers come from the ledger (``naspipe/claims/claims.yaml``) and the tables only.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from naspipe.claims.evaluate import evaluate, tally
from naspipe.claims.ledger import Claim
from naspipe.report.section import Table, format_cell

NAME = "claims"
TITLE = "The paper's claims, checked"
SHOWN = ["id", "source", "paper", "ours", "verdict", "tolerance", "reason"]


def build(claims: list[Claim], sources: Mapping[str, pd.DataFrame]) -> Table:
    frame = evaluate(claims, sources)
    return Table(NAME, TITLE, frame, LEGEND, body=f"{summary(frame)}\n\n{body(frame)}")


LEGEND = ("Verdicts: reproduced (ours meets the rule); reproduced only under the artifact's accounting (ours "
          "fails, the same quantity under the authors' artifact's accounting or model meets it); not reproduced; "
          "not checkable here (the output that holds ours is missing, named in the reason). The rule and its "
          "tolerance are in the tolerance column; rules and sources: docs/claims.md.")


def summary(frame: pd.DataFrame) -> str:
    counts = tally(frame)
    parts = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
    by_basis = frame.groupby("basis")["verdict"].agg(lambda v: int((v == "reproduced").sum())) if not frame.empty \
        else pd.Series(dtype=int)
    bases = "; ".join(f"{basis}: {n} of {int((frame['basis'] == basis).sum())} reproduced"
                      for basis, n in by_basis.items())
    return (f"{len(frame)} claims of the paper (ledger: `naspipe/claims/claims.yaml`): {parts}. By basis, {bases}. "
            "Measured claims ran on this machine; simulated ones on the paper's testbed spec; fitted ones on a "
            "testbed fitted to the paper's own numbers.")


def body(frame: pd.DataFrame) -> str:
    """The claims as a markdown table: the paper's value, ours, the verdict with its rule, and the reason."""
    if frame.empty:
        return "_No claims._\n"
    header = "| " + " | ".join(SHOWN) + " |"
    align = "|" + "|".join("---" for _ in SHOWN) + "|"
    rows = []
    for row in frame.itertuples(index=False):
        cells = [f"`{row.id}`", row.source, f"{row.paper} {row.unit}", row.ours or "-", f"**{row.verdict}**",
                 row.tolerance, row.reason]
        rows.append("| " + " | ".join(format_cell(c).replace("\n", " ") for c in cells) + " |")
    return "\n".join([header, align, *rows]) + "\n"
