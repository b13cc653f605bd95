"""The report's sections in order: one module per table or figure, each with ``build(inputs)``.

To add a table or figure, write a module whose ``build(inputs: ReportInputs)`` returns a
:class:`~naspipe.report.section.Table` or :class:`~naspipe.report.section.Figure` and add
its name here; the CLI writes its files and ``report.md`` includes it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from naspipe.plan import paths

if TYPE_CHECKING:  # pandas only when sections are built: the workflow reads the file lists below at parse time
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
    "naspipe.report.sim_gpus",
    "naspipe.report.sim_fig5",
    "naspipe.report.sim_fig7",
)


# What the sections write, by file stem (the workflow declares them as the report's outputs; a test checks
# them against what `build_sections` returns): tables/NAME.{csv,md}, figures/NAME.png, and the figures
# whose numbers a claim reads also as tables/NAME.csv. `claims` (tables/claims.*) comes first, from the CLI.
TABLES: tuple[str, ...] = (
    "run_summary",
    "table1_spaces",
    "table2_systems",
    "table3_reproducibility",
    "table4_access_order",
    "table5_profile",
    "sim_table2_systems",
    "sim_table2_gpus",
)
FIGURES: tuple[str, ...] = (
    "fig4_loss_vs_time",
    "fig4_search_score",
    "fig5_throughput",
    "fig6_ablation",
    "fig7_scaling",
    "fig_search_convergence",
    "sim_fig5_throughput",
    "sim_fig7_scaling",
)
FIGURE_TABLES: tuple[str, ...] = ("fig6_ablation",)


def build_sections(inputs: ReportInputs) -> list[Table | Figure]:
    return [importlib.import_module(name).build(inputs) for name in SECTIONS]


def report_outputs() -> list[tuple[str, str | None, str | None]]:
    """``naspipe report``'s files as (path, caption, report category): captioned ones appear in the HTML report.

    The workflow declares them as the report rule's outputs (workflow/rules/common.smk); kept here, with the
    lists it reads, so that the run plan (``naspipe.plan``) never imports the report."""

    def table(name: str, caption: str | None, category: str = "Tables") -> tuple[str, str | None, str | None]:
        return paths.path("table", name=name), caption, category if caption else None

    md: list[tuple[str, str | None, str | None]] = [(paths.path("table_md", name=name), None, None) for name in TABLES]
    return ([table("claims", "claims", "Claims"), (paths.path("table_md", name="claims"), None, None)]
            + [table(name, None) for name in FIGURE_TABLES] + [table(name, name) for name in TABLES] + md
            + [(paths.path("figure", name=name), name, "Figures") for name in FIGURES]
            + [(paths.results("report.md"), None, None)])
