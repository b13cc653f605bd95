"""The search phase's report inputs: searches with their retrained accuracy, and score-over-time curves.

``--search DIR=ACC.csv`` pairs a ``naspipe search`` output directory (``best.json`` names the
run it searched: space, system, stages, seed) with the ``naspipe evaluate`` CSV of the winner
retrained (its search accuracy). ``--curve F.csv`` is a ``naspipe evaluate --every-checkpoint``
CSV (each row names its run and checkpoint wall time). Bad input is one UsageError naming the
file.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from naspipe.errors import UsageError

BEST_FIELDS = ("space", "system", "stages", "train_seed", "metric", "score")
RETRAINED_FIELDS = ("space", "choices")
CURVE_FIELDS = ("space", "system", "stages", "seed", "step", "wall_s")


@dataclass(frozen=True)
class SearchResult:
    """One search over one run's supernet and its winner's retrained score."""

    best: dict[str, Any]
    candidates: pd.DataFrame
    accuracy: float

    @property
    def key(self) -> tuple[str, str, int, int]:
        b = self.best
        return (str(b["space"]), str(b["system"]), int(b["stages"]), int(b["train_seed"]))


def read_search(spec: str) -> SearchResult:
    directory, sep, accuracy_file = spec.partition("=")
    if not sep or not directory or not accuracy_file:
        raise UsageError(f"--search {spec!r}: expected SEARCH_DIR=ACCURACY.csv")
    best_path = Path(directory) / "best.json"
    try:
        best = json.loads(best_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"search {best_path}: unreadable ({exc})") from None
    missing = [k for k in BEST_FIELDS if not isinstance(best, dict) or k not in best]
    if missing:
        raise UsageError(f"search {best_path}: field {missing[0]!r} is missing")
    candidates = _read_csv(Path(directory) / "candidates.csv", ("generation", "score"))
    rows = _read_csv(Path(accuracy_file), (best["metric"],))
    if len(rows) != 1:
        raise UsageError(f"search accuracy {accuracy_file}: expected one row (the retrained winner), got {len(rows)}")
    return SearchResult(best, candidates, float(rows[best["metric"]].iloc[0]))


def read_curve(path: Path) -> pd.DataFrame:
    return _read_csv(path, CURVE_FIELDS)


def read_retrained(path: Path) -> pd.DataFrame:
    """A ``naspipe evaluate --own-subnet`` CSV: retrained random subnets, one row each, with their space."""
    return _read_csv(path, RETRAINED_FIELDS)


def _read_csv(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    try:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{path}: unreadable ({exc})") from None
    frame = pd.DataFrame(rows)
    missing = [k for k in required if k not in frame.columns]
    if rows and missing:
        raise UsageError(f"{path}: missing column {missing[0]!r}")
    if not rows:
        raise UsageError(f"{path}: no rows")
    return frame
