"""Are runs bitwise identical? If not, where do they first diverge?

Two runs are identical when every loss (compared as exact ``float.hex()`` strings) and every
layer digest match. Otherwise the report names the first subnet whose loss differs and the
first layers whose tensors differ, which is where to start looking.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from naspipe.errors import UsageError


@dataclass(frozen=True)
class RunRecord:
    path: Path
    losses: dict[int, str]
    layers: dict[int, str]
    weights: str


def read_run(path: Path) -> RunRecord:
    losses = {int(r["subnet"]): r["loss_hex"] for r in _rows(path / "losses.csv", ("subnet", "loss_hex"))}
    layers = {int(r["layer"]): r["sha256"] for r in _rows(path / "layer_hashes.csv", ("layer", "sha256"))}
    try:
        weights = (path / "weights.sha256").read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"{path / 'weights.sha256'}: {exc.strerror or exc}") from None
    return RunRecord(path, losses, layers, weights)


def _rows(path: Path, needed: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in needed if c not in (reader.fieldnames or [])]
            if missing:
                raise UsageError(f"{path}: missing column {missing[0]!r}")
            return list(reader)
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None


def compare_pair(a: RunRecord, b: RunRecord) -> list[str]:
    """Differences between two runs, most useful first; empty when bitwise identical."""
    problems: list[str] = []
    if a.losses.keys() != b.losses.keys():
        problems.append(f"trained subnets differ: {len(a.losses)} vs {len(b.losses)} losses")
    for y in sorted(a.losses.keys() & b.losses.keys()):
        if a.losses[y] != b.losses[y]:
            problems.append(
                f"first diverging step: subnet {y} "
                f"(loss {float.fromhex(a.losses[y])!r} vs {float.fromhex(b.losses[y])!r})"
            )
            break
    differing = sorted(lid for lid in a.layers.keys() & b.layers.keys() if a.layers[lid] != b.layers[lid])
    if differing:
        shown = ", ".join(map(str, differing[:5])) + (" ..." if len(differing) > 5 else "")
        problems.append(f"{len(differing)} layers differ, first: {shown}")
    if a.layers.keys() != b.layers.keys():
        problems.append("runs hold different layer sets")
    if not problems and a.weights != b.weights:
        problems.append("weights digest differs")
    return problems


def compare_runs(paths: list[Path]) -> tuple[bool, str]:
    if len(paths) < 2:
        raise UsageError("compare needs at least two run directories")
    runs = [read_run(p) for p in paths]
    lines, same = [], True
    for other in runs[1:]:
        problems = compare_pair(runs[0], other)
        if problems:
            same = False
            lines.append(f"DIFFERENT: {runs[0].path} vs {other.path}")
            lines.extend(f"  {p}" for p in problems)
        else:
            lines.append(f"IDENTICAL: {runs[0].path} vs {other.path} "
                         f"({len(other.losses)} losses, weights {other.weights[:16]})")
    return same, "\n".join(lines)
