"""``naspipe report``: every table, figure and ``report.md`` from run directories, in one go.

    naspipe report --runs DIR [DIR ...] --reproducibility F.json [...] [--profile SPACE=F.csv ...]
        [--ablations DIR ...] [--search SEARCH_DIR=ACC.csv ...] [--curve F.csv ...] [--simulated DIR ...]
        --out RESULTS

Writes ``RESULTS/tables/*.{csv,md}``, ``RESULTS/figures/*.png`` and ``RESULTS/report.md``.
Every file is always written (an empty table says so), so a workflow's output list is
static. All inputs are read and every section built in memory first: bad input is one line
and exit 2 with nothing written; each file is then written atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from naspipe.fsutil import atomic_write_bytes, atomic_write_text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write the paper's tables, figures and report.md from run directories",
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
    p.add_argument("--out", type=Path, required=True, help="results directory")


def run(args: argparse.Namespace) -> int:
    from naspipe.report.document import render_report
    from naspipe.report.inputs import load_inputs
    from naspipe.report.section import Figure
    from naspipe.report.sections import build_sections

    inputs = load_inputs(args.runs, args.reproducibility, args.profile, args.ablations, args.search, args.curve,
                         args.simulated)
    sections = build_sections(inputs)
    document = render_report(inputs, sections)
    for section in sections:
        if isinstance(section, Figure):
            atomic_write_bytes(args.out / "figures" / f"{section.name}.png", section.png)
        else:
            atomic_write_text(args.out / "tables" / f"{section.name}.csv", section.csv())
            atomic_write_text(args.out / "tables" / f"{section.name}.md", f"# {section.title}\n\n{section.markdown()}")
    atomic_write_text(args.out / "report.md", document)
    print(f"report: {len(sections)} sections, {len(inputs.runs)} runs -> {args.out / 'report.md'}")
    return 0
