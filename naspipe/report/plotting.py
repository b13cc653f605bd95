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


def render(draw: Callable[[Any], None], ncols: int = 1, width: float = 6.0, height: float = 4.0) -> bytes:
    """Call ``draw(axes)`` on a fresh figure of ``ncols`` panels (one axes if 1) and return PNG bytes."""
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook"):
        fig = Figure(figsize=(width * ncols, height), dpi=DPI)
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, ncols, squeeze=False)[0]
        draw(axes if ncols > 1 else axes[0])
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def render_facets(draw: Callable[[Any, str], None], facets: list[str], width: float = 6.0, height: float = 4.0) -> bytes:
    """One panel per facet (e.g. per space), ``draw(ax, facet)`` in each; a placeholder when there is none."""
    if not facets:
        return render(no_data, 1, width, height)

    def draw_all(axes: Any) -> None:
        for ax, facet in zip(axes if len(facets) > 1 else [axes], facets, strict=True):
            draw(ax, facet)

    return render(draw_all, len(facets), width, height)


def no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data in the inputs", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
