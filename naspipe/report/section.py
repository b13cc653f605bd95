"""What a report section builds: a table (frame + markdown) or a figure (PNG bytes), with its reading.

Sections are built fully in memory, so a report either writes every file or none. The
markdown renderer is local (a dozen lines) rather than pandas' ``to_markdown``, which needs
the optional ``tabulate`` package.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Table:
    name: str  # file stem under tables/, e.g. "table1_spaces"
    title: str
    frame: pd.DataFrame
    reading: str  # two or three sentences generated from the numbers
    body: str | None = None  # markdown body when the frame's own rendering is not the paper's

    def markdown(self) -> str:
        body = self.body if self.body is not None else frame_to_markdown(self.frame)
        if self.frame.empty:
            body = "_No rows: the inputs hold no data for this table._\n"
        return f"{body}\n{self.reading}\n"

    def csv(self) -> str:
        return frame_csv(self.frame)


@dataclass(frozen=True)
class Figure:
    name: str  # file stem under figures/, e.g. "fig5_throughput"
    title: str
    png: bytes
    reading: str
    data: pd.DataFrame | None = None  # the plotted numbers, written as tables/<name>.csv when a claim reads them

    def csv(self) -> str:
        return frame_csv(self.data if self.data is not None else pd.DataFrame())


def frame_csv(frame: pd.DataFrame) -> str:
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue()


def format_cell(value: object) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return str(value).replace("|", "\\|")


def frame_to_markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    align = "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(frame[c]) else "---" for c in frame.columns) + "|"
    rows = ["| " + " | ".join(format_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, align, *rows]) + "\n"
