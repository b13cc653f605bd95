"""``naspipe report``: every table, figure and ``report.md`` from run directories, in one go.

    naspipe report --runs DIR [DIR ...] --reproducibility F.json [...] [--profile SPACE=F.csv ...]
        [--ablations DIR ...] [--search SEARCH_DIR=ACC.csv ...] [--curve F.csv ...] [--simulated DIR ...]
        [--tables F.csv ...] [--claims LEDGER.yaml] --out RESULTS

Writes ``RESULTS/tables/*.{csv,md}``, ``RESULTS/figures/*.png`` and ``RESULTS/report.md``, which
opens with the paper's claims checked against these tables (``tables/claims.csv``; the
``--tables`` files, e.g. the simulator's calibration and attribution, are read for it).
Every file is always written (an empty table says so), so a workflow's output list is
static. All inputs are read and every section built in memory first: bad input is one line
and exit 2 with nothing written; each file is then written atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from naspipe.fsutil import atomic_write_bytes, atomic_write_text
from naspipe.rundigest import add_undigested_argument


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "report", help="write the paper's tables, figures and report.md from run directories",
        description=__doc__.splitlines()[0])
    # action="extend": each flag takes one or more values and may also be repeated
    p.add_argument("--runs", nargs="+", action="extend", type=Path, required=True, metavar="DIR",
                   help="run directories")
    p.add_argument("--reproducibility", nargs="+", action="extend", type=Path, default=[], metavar="F.json",
                   help="files written by 'naspipe reproducibility' (Table 3)")
    p.add_argument("--profile", nargs="+", action="extend", default=[], metavar="SPACE=F.csv",
                   help="profile CSV of a space written by 'naspipe profile' (Table 5)")
    p.add_argument("--ablations", nargs="+", action="extend", type=Path, default=[], metavar="DIR",
                   help="ablation run directories (Figure 6; kept out of the other sections)")
    p.add_argument("--search", nargs="+", action="extend", default=[], metavar="DIR=ACC.csv",
                   help="a 'naspipe search' directory and the 'naspipe evaluate' CSV of its winner retrained "
                   "(Table 3's search accuracy, the search-convergence plot)")
    p.add_argument("--curve", nargs="+", action="extend", type=Path, default=[], metavar="F.csv",
                   help="'naspipe evaluate --every-checkpoint' CSV of a run (Figure 4: score against training time)")
    p.add_argument("--simulated", nargs="+", action="extend", type=Path, default=[], metavar="DIR",
                   help="run directories written by 'naspipe simulate' (the simulated Table 2, Figures 5 and 7)")
    p.add_argument("--tables", nargs="+", action="extend", type=Path, default=[], metavar="F.csv",
                   help="more tables the claims read, each by its file stem (calibration.csv, attribution.csv, "
                   "bubble_models.csv)")
    p.add_argument("--random-retrained", nargs="+", action="extend", type=Path, default=[], metavar="F.csv",
                   help="'naspipe evaluate --own-subnet' CSVs of random subnets retrained like the search winner "
                   "(the run summary's search line)")
    p.add_argument("--claims", type=Path, default=None, help="a claims ledger (default: the package's)")
    p.add_argument("--out", type=Path, required=True, help="results directory")
    add_undigested_argument(p)
    return p


def run(args: argparse.Namespace) -> int:
    from naspipe.claims.ledger import load_claims
    from naspipe.claims.sources import from_csv_texts, read_extra
    from naspipe.report import claims as claims_section
    from naspipe.report.document import render_report
    from naspipe.report.inputs import load_inputs
    from naspipe.report.section import Figure
    from naspipe.report.sections import build_sections

    ledger = load_claims(args.claims)
    extra = read_extra(args.tables)
    inputs = load_inputs(args.runs, args.reproducibility, args.profile, args.ablations, args.search, args.curve,
                         args.simulated, args.random_retrained, undigested=args.undigested)
    sections = build_sections(inputs)
    texts = {s.name: s.csv() for s in sections if not isinstance(s, Figure) or s.data is not None}
    sections = [claims_section.build(ledger, {**from_csv_texts(texts), **extra}), *sections]
    document = render_report(inputs, sections)
    for section in sections:
        if isinstance(section, Figure):
            atomic_write_bytes(args.out / "figures" / f"{section.name}.png", section.png)
            if section.data is not None:
                atomic_write_text(args.out / "tables" / f"{section.name}.csv", section.csv())
        else:
            atomic_write_text(args.out / "tables" / f"{section.name}.csv", section.csv())
            atomic_write_text(args.out / "tables" / f"{section.name}.md", f"# {section.title}\n\n{section.markdown()}")
    atomic_write_text(args.out / "report.md", document)
    print(f"report: {len(sections)} sections, {len(inputs.runs)} runs -> {args.out / 'report.md'}")
    return 0
