"""The paper's Table 2 as data (``paper_table2.csv``, package data), for the side-by-side Table 2 and Figure 5.

One row per space and system at the paper's 8 GPUs, in the suite's system names; ``score``
is BLEU (NLP) or top-5 % (CV), ``gpu_mem_x``/``gpu_alu_x`` are totals over 8 GPUs in units of
one GPU, an empty cache hit is the paper's "N/A". Figure 5's bars are not in the paper's
text; its stated ranges (1.1x-7.8x over GPipe, 0.87x-6.5x over PipeDream, 0.77x-1.5x over
VPipe) are exactly the ratios of Table 2's GPU ALU column, so :func:`paper_vs_gpipe` derives
the paper's normalised throughput from that column and says so wherever it is shown.
"""

from __future__ import annotations

import io
from importlib import resources

import pandas as pd

PAPER_STAGES = 8  # "By default, we used 8 GPUs for each experiment" (section 5)


def paper_table2() -> pd.DataFrame:
    text = resources.files("naspipe.claims").joinpath("paper_table2.csv").read_text(encoding="utf-8")
    return pd.read_csv(io.StringIO(text))


def paper_vs_gpipe() -> pd.DataFrame:
    """Per space and system, the paper's throughput over GPipe's, derived as GPU ALU over GPipe's GPU ALU."""
    table = paper_table2()
    gpipe = table[table["system"] == "gpipe"].set_index("space")["gpu_alu_x"]
    return table.assign(paper_vs_gpipe=table["gpu_alu_x"] / table["space"].map(gpipe))[
        ["space", "system", "paper_vs_gpipe"]]
