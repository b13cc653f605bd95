"""The tables claims are measured from: ``results/tables/*.csv``, including the simulator's
calibration, attribution and bubble-model tables when the workflow wrote them.

Those three come from ``naspipe calibrate`` and the simulator's accounting switches (issue
17, items 3 and 4); their columns are a contract checked here, so a damaged file is one
line naming it and the missing column rather than a claim quietly read as absent. A
calibration row is *held out* when it was fitted neither on its own space family nor on all
rows: the column ``held_out`` is derived here, once, for the claims that read it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from naspipe.errors import UsageError

CONTRACT: dict[str, tuple[str, ...]] = {
    "calibration": ("space_family", "space", "system", "batch", "paper_exec_s", "predicted_exec_s", "rel_error",
                    "fitted_on"),
    "attribution": ("space", "order", "factor", "description", "csp_throughput", "gpipe_throughput", "ratio",
                    "unit"),
    "bubble_models": ("space", "model", "stages", "system", "bubble", "paper_bubble"),
}
OWN = "claims"  # the claims table itself is never a source


def parse_csv(text: str, label: str) -> pd.DataFrame:
    try:
        return pd.read_csv(io.StringIO(text))
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise UsageError(f"{label}: not a CSV table ({str(exc).splitlines()[0]})") from None


def read_csv(path: Path) -> pd.DataFrame:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read ({exc})") from None
    return checked(path.stem, parse_csv(text, str(path)), str(path))


def checked(name: str, frame: pd.DataFrame, label: str) -> pd.DataFrame:
    """A contract table with its columns checked and ``held_out`` derived for calibration."""
    needed = CONTRACT.get(name)
    if needed is None:
        return frame
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise UsageError(f"{label}: missing column {missing[0]!r} (expected {', '.join(needed)})")
    if name == "calibration":
        fitted = frame["fitted_on"].astype(str)
        frame = frame.assign(held_out=(fitted != frame["space_family"].astype(str)) & (fitted != "all"))
    return frame


def read_tables(directory: Path) -> dict[str, pd.DataFrame]:
    """Every ``*.csv`` under ``directory`` by file stem (the claims table itself left out)."""
    if not directory.is_dir():
        raise UsageError(f"--results: {directory} is not a directory")
    return {p.stem: read_csv(p) for p in sorted(directory.glob("*.csv")) if p.stem != OWN}


def read_extra(paths: Iterable[Path]) -> dict[str, pd.DataFrame]:
    """Tables named on the command line (``--tables F.csv``), each by its file stem."""
    tables: dict[str, pd.DataFrame] = {}
    for path in paths:
        if not path.is_file():
            raise UsageError(f"--tables {path}: not a file")
        if path.stem in tables:
            raise UsageError(f"--tables {path}: a table named {path.stem!r} was given twice")
        tables[path.stem] = read_csv(path)
    return tables


def from_csv_texts(texts: dict[str, str]) -> dict[str, pd.DataFrame]:
    """Tables as they will read back from their CSV files (the report's in-memory frames round-tripped)."""
    return {name: checked(name, parse_csv(text, f"table {name}"), f"table {name}") for name, text in texts.items()}
