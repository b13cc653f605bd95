"""What ``naspipe search`` writes: every candidate (CSV), the best subnet (JSON), a convergence plot (PNG).

The directory is built aside and renamed into place whole, so ``--out`` never holds half a
search; an existing directory is replaced only when it holds a previous search's
``best.json`` (or is empty), never the user's own files.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError
from naspipe.fsutil import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_creatable,
    replace_path,
    temp_dir_beside,
)
from naspipe.runplan.subnet_file import subnet_json
from naspipe.search.evolution import Candidate, best
from naspipe.search.options import csv_text
from naspipe.subnet import Subnet

BEST = "best.json"
CANDIDATES = "candidates.csv"
PLOT = "convergence.png"


def check_out_dir(out: Path) -> None:
    """Refuse, before any work, an ``--out`` that is a file or a directory of someone else's files."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / BEST).is_file():
        raise UsageError(f"--out {out}: refusing to replace a non-empty directory without {BEST}")
    check_creatable(out, "--out")


def write_search(out: Path, candidates: Sequence[Candidate], metrics: dict[int, dict[str, float]],
                 names: Sequence[str], summary: dict[str, Any], randoms: Sequence[Subnet] = ()) -> None:
    """Write the search to ``out`` whole; ``randoms`` become ``random-K.json`` (the subnets a workflow retrains
    beside the winner, so the winner is judged against random architectures trained the same way)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_beside(out, ".tmp")
    try:
        rows = [[c.generation, c.index, c.origin, str(c.subnet), c.score, *(metrics[i][m] for m in names)]
                for i, c in enumerate(candidates)]
        atomic_write_text(tmp / CANDIDATES, csv_text(["generation", "index", "origin", "choices", "score", *names],
                                                     rows))
        top = best(candidates)
        atomic_write_json(tmp / BEST, subnet_json(top.subnet, score=top.score, generation=top.generation,
                                                  **summary))
        for k, subnet in enumerate(randoms):
            atomic_write_json(tmp / f"random-{k}.json", subnet_json(subnet, random_index=k))
        atomic_write_bytes(tmp / PLOT, convergence_png(candidates, str(summary.get("metric", "score"))))
        replace_path(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_reused(out: Path, stored: Path, provenance: dict[str, Any]) -> None:
    """Write to ``out`` a copy of a stored search of the same content, its best.json naming this run."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_beside(out, ".tmp")
    try:
        shutil.copytree(stored, tmp, dirs_exist_ok=True)
        best_json = json.loads((tmp / BEST).read_text(encoding="utf-8"))
        atomic_write_json(tmp / BEST, {**best_json, **provenance})
        replace_path(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def convergence_png(candidates: Sequence[Candidate], metric: str) -> bytes:
    """Every candidate's score per generation (dots) and the best so far (line)."""
    from naspipe.report.plotting import render

    def draw(ax: Any) -> None:
        ax.scatter([c.generation for c in candidates], [c.score for c in candidates], s=12, alpha=0.5,
                   label="candidate")
        gens = sorted({c.generation for c in candidates})
        ax.plot(gens, [best([c for c in candidates if c.generation <= g]).score for g in gens], marker="o",
                color="black", label="best so far")
        ax.set_xlabel("generation")
        ax.set_ylabel(metric if metric != "loss" else "-loss")
        ax.legend()

    return render(draw)
