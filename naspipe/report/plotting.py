"""Deterministic PNGs from matplotlib: Agg backend, fixed size and DPI, no software/timestamp metadata.

Equal data gives equal bytes, so a rerun of the report with unchanged inputs changes no file.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

DPI = 100


def render(draw: Callable[[Any], None], ncols: int = 1, width: float = 6.0, height: float = 4.0) -> bytes:
    """Call ``draw(axes)`` on a fresh figure of ``ncols`` panels and return it as PNG bytes."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    try:
        draw(axes[0] if ncols > 1 else axes[0][0])
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
        return buffer.getvalue()
    finally:
        plt.close(fig)


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
