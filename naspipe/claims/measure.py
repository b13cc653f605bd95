"""Reading one claim's value out of the result tables: select rows, take a column, reduce.

Why a mapping of frames and not files: the report evaluates the claims on the tables it has
just built in memory (so ``report.md`` and ``tables/claims.csv`` agree with the tables beside
them), and ``naspipe claims`` on the same tables read back from ``results/tables``. A table,
column or row that is not there is not an error: the claim is "not checkable here" and the
reading says which file, column or rows were missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from naspipe.claims.ledger import Measure, Scalar
from naspipe.claims.verdicts import as_bool, format_value

# columns that tell matched rows apart in a reason ("stages=8", "model=unit-time")
KEYS = ("hardware", "space", "system", "variant", "model", "factor", "order", "stages", "seed", "batch")
Sources = Mapping[str, pd.DataFrame]


@dataclass(frozen=True)
class Reading:
    """What a measure found: per-row (label, value) pairs, the reduced value, or why there is none."""

    values: list[tuple[str, Scalar]] = field(default_factory=list)
    value: Scalar | None = None
    missing: str = ""
    label: str = ""  # which row(s) the reduced value comes from

    @property
    def ok(self) -> bool:
        return not self.missing


def matches(cell: object, expected: Scalar) -> bool:
    if isinstance(expected, bool):
        return isinstance(cell, bool | str | int | float) and as_bool(cell)  == expected
    if isinstance(expected, int | float):
        try:
            return float(cell) == float(expected)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
    return str(cell) == str(expected)


def select(measure: Measure, sources: Sources) -> pd.DataFrame | str:
    """The matching rows, or why there are none (one line naming the file, column or rows)."""
    frame = sources.get(measure.table)
    if frame is None:
        return f"{measure.table}.csv missing"
    for column in [measure.column, *measure.where]:
        if column not in frame.columns:
            return f"{measure.table}.csv has no column {column!r}"
    keep = pd.Series(True, index=frame.index)
    for column, wanted in measure.where.items():
        keep &= frame[column].map(lambda cell, w=wanted: any(matches(cell, x) for x in w))
    where = measure.describe().partition(" ")[2] or "any row"
    if not keep.any():
        return f"no row of {measure.table}.csv with {where}"
    rows = frame[keep & frame[measure.column].notna()]
    if rows.empty:
        return f"{measure.table}.csv has no {measure.column} value for {where}"
    return rows


def row_label(rows: pd.DataFrame, index: object) -> str:
    varying = [k for k in KEYS if k in rows.columns and rows[k].nunique(dropna=False) > 1]
    return ", ".join(f"{k}={format_value(rows.at[index, k])}" for k in varying)


def cell(value: object) -> Scalar:
    if hasattr(value, "item"):
        value = value.item()  # numpy scalars to Python ones
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)


def read(measure: Measure, sources: Sources) -> Reading:
    rows = select(measure, sources)
    if isinstance(rows, str):
        return Reading(missing=rows)
    values = [(row_label(rows, i), cell(rows.at[i, measure.column])) for i in rows.index]
    return reduce(measure, rows, values)


def reduce(measure: Measure, rows: pd.DataFrame, values: list[tuple[str, Scalar]]) -> Reading:
    how = measure.reduce
    if how in {"all", "any"}:
        return Reading(values=values, label=f"{len(values)} rows")
    if how == "distinct":
        distinct = {format_value(v) for _, v in values}
        return Reading(values=values, value=len(distinct), label=f"{len(distinct)} distinct of {len(values)} rows")
    if how in {"one", "last"}:
        if how == "one" and len(values) > 1:
            return Reading(values=values, missing=f"{len(values)} rows of {measure.table}.csv match "
                                                  f"{measure.describe()}; the claim needs one")
        return Reading(values=values, value=values[-1][1], label=values[-1][0])
    numbers = pd.to_numeric(rows[measure.column], errors="coerce")
    if numbers.isna().any():
        return Reading(values=values, missing=f"{measure.describe()} is not numeric")
    if how == "median":
        return Reading(values=values, value=float(numbers.median()), label=f"median of {len(values)} rows")
    at = numbers.idxmax() if how == "max" else numbers.idxmin()
    return Reading(values=values, value=float(numbers[at]), label=row_label(rows, at))


def ratio(top: Reading, bottom: Reading, bottom_measure: Measure) -> Reading:
    """``top / bottom`` for a claim's ``divide_by``; missing when either is, or the divisor is zero."""
    if not top.ok:
        return top
    if not bottom.ok:
        return Reading(missing=bottom.missing)
    try:
        value = float(top.value) / float(bottom.value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return Reading(missing=f"{bottom_measure.describe()} is not numeric")
    except ZeroDivisionError:
        return Reading(missing=f"{bottom_measure.describe()} is zero")
    return Reading(values=[(top.label, value)], value=value,
                   label=f"{format_value(top.value)} / {format_value(bottom.value)}")
