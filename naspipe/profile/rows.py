"""One profile row and its CSV format: the file ``naspipe profile`` writes and training reads.

A row stands for one distinct (operation, input shape) of a space, measured once, and
records which positions and how many layers it covers. Floats are written with ``repr`` so
a CSV round trip is exact; the reader checks every value (numbers finite and in range: a
negative or NaN time would price a simulation into nonsense) and names the file, line,
column and value of a bad one (a :class:`~naspipe.errors.UsageError`). No torch here: reading a profile is cheap.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError
from naspipe.fsutil import atomic_write_text

ROLES = ("prefix", "block", "suffix")


@dataclass(frozen=True)
class ProfileRow:
    """One distinct (operation, input shape) of a space, measured once."""

    space: str
    op: str
    role: str  # prefix | block | suffix
    positions: str  # positions this row covers, e.g. "1-24" or "11;22"
    layers: int  # how many layers of the supernet this row stands for
    in_shape: str  # e.g. "8x64x512:float32;8x64:int64"
    device: str  # "cpu" or "cuda"
    device_name: str
    threads: int
    recompute: bool
    repeats: int
    warmup: int
    fwd_ms: float
    bwd_ms: float
    copy_ms: float
    param_bytes: int
    act_bytes: int

    @property
    def position_set(self) -> frozenset[int]:
        return frozenset(parse_positions(self.positions))


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ProfileRow))


def positions_text(positions: Iterable[int]) -> str:
    """``{1, 2, 3, 7}`` -> ``"1-3;7"``: runs of consecutive positions."""
    ordered = sorted(set(positions))
    runs: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ";".join(runs)


MAX_POSITION = 10_000_000  # far past any space a run can build; a larger range would be built in memory first


def parse_positions(text: str) -> list[int]:
    """Inverse of :func:`positions_text`; ValueError on malformed text or a position past :data:`MAX_POSITION`."""
    out: list[int] = []
    for part in filter(None, text.split(";")):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if first < 0 or last > MAX_POSITION:
            raise ValueError(f"positions must lie in 0..{MAX_POSITION}")
        out.extend(range(first, last + 1))
    return out


def format_profile_csv(rows: Sequence[ProfileRow]) -> str:
    """The CSV text of ``rows``: a header of :data:`FIELDS`, floats as exact ``repr``."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        record = asdict(row)
        for key in ("fwd_ms", "bwd_ms", "copy_ms"):
            record[key] = repr(float(record[key]))  # round-trips exactly
        writer.writerow(record)
    return buffer.getvalue()


def write_profile_csv(rows: Sequence[ProfileRow], path: str | os.PathLike[str]) -> None:
    """Write ``rows`` as CSV atomically (temporary sibling file + ``os.replace``)."""
    atomic_write_text(Path(path), format_profile_csv(rows))


_CONVERT: dict[str, Callable[[str], Any]] = {
    "layers": int,
    "threads": int,
    "repeats": int,
    "warmup": int,
    "param_bytes": int,
    "act_bytes": int,
    "fwd_ms": float,
    "bwd_ms": float,
    "copy_ms": float,
}


# the smallest value each number may take: a negative or non-finite time or count would price a
# simulation into nonsense (negative throughput, bubble below 0) without any error
_MINIMUM: dict[str, float] = {"layers": 1, "threads": 1, "repeats": 1, "warmup": 0, "param_bytes": 0,
                              "act_bytes": 0, "fwd_ms": 0.0, "bwd_ms": 0.0, "copy_ms": 0.0}


def _number(name: str, raw: str) -> int | float:
    """``raw`` converted for column ``name``; ValueError unless finite and at least its minimum."""
    value = _CONVERT[name](raw)
    if not math.isfinite(value) or value < _MINIMUM[name]:
        raise ValueError(f"must be a finite number >= {_MINIMUM[name]:g}")
    return value


def _to_bool(text: str) -> bool:
    if text in ("True", "true", "1"):
        return True
    if text in ("False", "false", "0"):
        return False
    raise ValueError(text)


def read_profile_csv(path: str | os.PathLike[str]) -> list[ProfileRow]:
    """Rows of a CSV written by :func:`write_profile_csv`; UsageError naming the file/line on problems."""
    target = Path(path)
    try:
        data = target.read_bytes()
    except OSError as exc:
        raise UsageError(f"{target}: cannot read profile ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(f"{target}:{line}: not a profile CSV (not UTF-8 text: byte {data[exc.start]:#04x})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
        if missing:
            raise UsageError(f"{target}: not a profile CSV (missing column {missing[0]!r})")
        return [_row(target, line, record) for line, record in enumerate(reader, start=2)]
    except csv.Error as exc:
        raise UsageError(f"{target}:{reader.line_num}: not a profile CSV ({exc})") from None


def _row(target: Path, line: int, record: dict[str, str | None]) -> ProfileRow:
    """One CSV record as a row, every value checked (numbers finite and in range); UsageError
    naming the file, line, column and value."""
    values: dict[str, Any] = {}
    for name in FIELDS:
        raw = record.get(name)
        try:
            if raw is None:
                raise ValueError("missing")
            if name == "recompute":
                values[name] = _to_bool(raw)
            else:
                values[name] = _number(name, raw) if name in _CONVERT else raw
        except ValueError as exc:
            why = f" ({exc})" if str(exc).startswith("must") else ""
            raise UsageError(f"{target}:{line}: bad value {raw!r} in column {name!r}{why}") from None
    if values["role"] not in ROLES:
        raise UsageError(f"{target}:{line}: bad value {values['role']!r} in column 'role'")
    try:
        if not parse_positions(values["positions"]):
            raise ValueError("no position")
    except ValueError:
        raise UsageError(f"{target}:{line}: bad value {values['positions']!r} in column 'positions'") from None
    return ProfileRow(**values)
