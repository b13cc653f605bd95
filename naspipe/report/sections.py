"""The report's sections in order: one module per table or figure, each with ``build(inputs)``.

To add a table or figure, write a module whose ``build(inputs: ReportInputs)`` returns a
:class:`~naspipe.report.section.Table` or :class:`~naspipe.report.section.Figure` and add
its name here; the CLI writes its files and ``report.md`` includes it.
"""

from __future__ import annotations

import importlib

from naspipe.report.inputs import ReportInputs
from naspipe.report.section import Figure, Table

SECTIONS: tuple[str, ...] = (
    "naspipe.report.run_summary",  # right after the claims (naspipe.report.document)
    "naspipe.report.table1_spaces",
    "naspipe.report.table2_systems",
    "naspipe.report.table3_reproducibility",
    "naspipe.report.table4_access_order",
    "naspipe.report.table5_profile",
    "naspipe.report.fig4_loss",
    "naspipe.report.fig4_search_score",
    "naspipe.report.fig5_throughput",
    "naspipe.report.fig6_ablation",
    "naspipe.report.fig7_scaling",
    "naspipe.report.fig_search_convergence",
    "naspipe.report.sim_table2",
    "naspipe.report.sim_fig5",
    "naspipe.report.sim_fig7",
)


def build_sections(inputs: ReportInputs) -> list[Table | Figure]:
    return [importlib.import_module(name).build(inputs) for name in SECTIONS]
