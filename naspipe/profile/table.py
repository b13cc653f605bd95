"""The markdown of the paper's Table 5 (per-op compute vs copy time) from profile rows."""

from __future__ import annotations

from collections.abc import Sequence

from naspipe.profile.rows import ProfileRow


def render_table5(rows: Sequence[ProfileRow]) -> str:
    """Markdown table: op, input shape, layers, fwd ms, bwd ms, copy ms, param MiB."""
    lines = [
        "| op | input | layers | fwd ms | bwd ms | copy ms | param MiB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        shape = r.in_shape.split(";")[0].split(":")[0]
        lines.append(
            f"| {r.op} | {shape} | {r.layers} | {r.fwd_ms:.3f} | {r.bwd_ms:.3f} | {r.copy_ms:.3f} "
            f"| {r.param_bytes / 2**20:.3f} |"
        )
    return "\n".join(lines) + "\n"
