"""Deterministic PNGs from matplotlib: Agg rendering, fixed size and DPI, no software/timestamp metadata.

Figures are built as plain :class:`matplotlib.figure.Figure` objects (no pyplot), so the
report neither needs nor changes a global backend, and the seaborn style applies only inside
:func:`render`. Equal data gives equal bytes, so rerunning the report changes no file.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 100


def render(draw: Callable[[Any], None], ncols: int = 1, width: float = 6.0, height: float = 4.0,
           nrows: int = 1) -> bytes:
    """Call ``draw(axes)`` on a fresh figure of ``nrows`` x ``ncols`` panels (one axes if 1; else a flat array,
    row by row) and return PNG bytes."""
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook"):
        fig = Figure(figsize=(width * ncols, height * nrows), dpi=DPI)
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, squeeze=False).flatten()
        draw(axes if len(axes) > 1 else axes[0])
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def render_facets(
    draw: Callable[[Any, str], None], facets: list[str], width: float = 6.0, height: float = 4.0,
    wrap: int | None = None,
) -> bytes:
    """One panel per facet (e.g. per space), ``draw(ax, facet)`` in each; a placeholder when there is none.
    ``wrap``: at most that many panels a row (default: one row); panels left over in the last row are hidden."""
    if not facets:
        return render(no_data, 1, width, height)
    ncols = min(len(facets), wrap or len(facets))
    nrows = -(-len(facets) // ncols)

    def draw_all(axes: Any) -> None:
        panels = list(axes) if len(facets) > 1 else [axes]
        for ax, facet in zip(panels, facets, strict=False):
            draw(ax, facet)
        for ax in panels[len(facets):]:
            ax.set_axis_off()

    return render(draw_all, ncols, width, height, nrows)


def no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data in the inputs", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
