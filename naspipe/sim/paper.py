"""The paper's testbed measurements that the calibration and the attribution are checked against.

Facts from NASPipe (ASPLOS'22), Table 2 (8 GPUs): per space and system the input batch, the
"Exec." column (seconds per subnet, bubble eliminated) and the "Bubble" column; and the
Figure 5 speedup of NASPipe over GPipe, which equals Table 2's ALU ratio. They are inputs,
typed once here with their source, so that every table this package derives from them says
where a number came from; nothing computed from them is stored.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "NASPipe (ASPLOS'22) Table 2"
SYSTEMS = ("csp", "pipedream", "gpipe", "vpipe")  # NASPipe, PipeDream, GPipe, VPipe in the table's order


@dataclass(frozen=True)
class PaperRow:
    """One row of Table 2: ``exec_s`` and ``bubble`` as printed."""

    space: str
    system: str
    batch: int
    exec_s: float
    bubble: float

    @property
    def family(self) -> str:
        return self.space.split(".")[0]


def _rows(space: str, values: tuple[tuple[int, float, float], ...]) -> list[PaperRow]:
    return [PaperRow(space, system, b, e, u) for system, (b, e, u) in zip(SYSTEMS, values, strict=True)]


TABLE2: tuple[PaperRow, ...] = tuple(
    _rows("nlp.c1", ((192, 1.13, 0.39), (16, 0.49, 0.1), (32, 0.54, 0.57), (192, 1.21, 0.57)))
    + _rows("nlp.c2", ((192, 1.09, 0.57), (24, 0.51, 0.1), (64, 0.68, 0.57), (192, 1.24, 0.57)))
    + _rows("nlp.c3", ((192, 1.12, 0.68), (48, 0.59, 0.1), (128, 0.96, 0.57), (192, 1.20, 0.57)))
    + _rows("cv.c1", ((64, 0.87, 0.43), (12, 0.51, 0.1), (24, 0.63, 0.57), (64, 0.96, 0.57)))
    + _rows("cv.c2", ((64, 0.86, 0.58), (16, 0.54, 0.1), (32, 0.65, 0.57), (64, 0.95, 0.57)))
    + _rows("cv.c3", ((64, 0.89, 0.68), (24, 0.63, 0.1), (48, 0.76, 0.57), (64, 0.96, 0.57)))
)

# Figure 5 / Table 2 ALU ratio: NASPipe's throughput over GPipe's per space (paper section 5.1).
SPEEDUP_OVER_GPIPE: dict[str, float] = {"nlp.c1": 7.8, "nlp.c2": 3.11, "nlp.c3": 1.11,
                                        "cv.c1": 3.5, "cv.c2": 2.0, "cv.c3": 1.05}
TABLE2_STAGES = 8  # "8 GPUs by default"


def row(space: str, system: str) -> PaperRow:
    """The Table 2 row of ``space`` and ``system``; KeyError if the paper has none."""
    for r in TABLE2:
        if r.space == space and r.system == system:
            return r
    raise KeyError(f"Table 2 has no row for {space} {system}")
