"""``report.md``: every table and figure with its reading, and the machine the numbers come from.

The text is generated from the inputs alone (no dates, no host names), so the same results
give the same file byte for byte.
"""

from __future__ import annotations

import os
import platform

from naspipe.numerics import cpu_field
from naspipe.report.inputs import ReportInputs, system_rank
from naspipe.report.section import Figure, Table

CLAIMS = "claims"  # the section that opens the report (naspipe.report.claims)
OPENING = (CLAIMS, "run_summary")  # the claims, then what this run shows (naspipe.report.run_summary)


def cpu_model() -> str:
    return cpu_field("model name") or platform.processor() or platform.machine() or "unknown CPU"


def machine_text(inputs: ReportInputs) -> str:
    devices = sorted({r.device for r in inputs.runs}) or ["none"]
    return (f"Machine: {cpu_model()} ({os.cpu_count()} logical CPUs); run devices from metrics.json: "
            f"{', '.join(devices)}. Every timing below (Table 2, Figures 4, 5, 7) was measured on this machine, "
            "not on the paper's GPU cluster; only ratios between systems carry over.")


def summary_text(inputs: ReportInputs) -> str:
    systems = sorted({r.system for r in inputs.runs})
    stages = sorted({r.stages for r in inputs.runs})
    seeds = sorted({r.seed for r in inputs.runs})
    return (f"{len(inputs.runs)} runs: spaces {', '.join(f'`{s}`' for s in inputs.spaces) or 'none'}; systems "
            f"{', '.join(systems) or 'none'}; stage counts {', '.join(map(str, stages)) or 'none'}; "
            f"seeds {', '.join(map(str, seeds)) or 'none'}.")


def headline_text(inputs: ReportInputs) -> str:
    """Which systems were bitwise identical to sequential at every stage count they ran, which were not."""
    verdicts: dict[str, list[bool]] = {}
    stages: dict[str, set[int]] = {}
    for doc in inputs.reproducibility:
        for entry in doc["runs"]:
            verdicts.setdefault(entry["system"], []).append(bool(entry["identical"]))
            stages.setdefault(entry["system"], set()).add(int(entry["stages"]))
    if not verdicts:
        return "Reproducibility: no reproducibility file was given."
    order = sorted(verdicts, key=system_rank)
    same = [f"{s} (D={', '.join(map(str, sorted(stages[s])))})" for s in order if all(verdicts[s])]
    differ = [s for s in order if not all(verdicts[s])]
    return ("Reproducibility against sequential (Table 3): bitwise identical at every stage count: "
            f"{', '.join(same) or 'no system'}; differing in at least one run: {', '.join(differ) or 'no system'}.")


def render_report(inputs: ReportInputs, sections: list[Table | Figure]) -> str:
    """The claims section (when present) first, right under the title; then the machine and every section."""
    first = sorted((s for s in sections if s.name in OPENING), key=lambda s: OPENING.index(s.name))
    parts = ["# NASPipe results\n", *(_section_text(s) for s in first), *(["## What ran\n"] if first else []),
             machine_text(inputs) + "\n",
             summary_text(inputs) + "\n", headline_text(inputs) + "\n"]
    parts += [_section_text(s) for s in sections if s.name not in OPENING]
    return "\n".join(parts)


def _section_text(section: Table | Figure) -> str:
    if isinstance(section, Table):
        return (f"## {section.title}\n\nCSV: [tables/{section.name}.csv](tables/{section.name}.csv)\n\n"
                + section.markdown())
    return f"## {section.title}\n\n![{section.title}](figures/{section.name}.png)\n\n{section.reading}\n"
