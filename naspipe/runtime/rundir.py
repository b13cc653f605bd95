"""The runtime's side of a run directory: create the working directory, bring its logs to a checkpoint.

Where a run works and how it is published is the run plan's (:mod:`naspipe.runplan.rundir`, torch-free,
shared with the simulator); what lives here needs the checkpoint files (:mod:`naspipe.runtime.checkpoint`).
The plan's names are re-exported so that ``rundir.plan(...)`` and ``rundir.publish(...)`` read as before.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError
from naspipe.fsutil import aside_copies
from naspipe.runplan.rundir import (
    SUFFIX,
    RunDir,
    check_logs,
    has_checkpoint,
    plan,
    publish,
    refuse_live_source,
    run_of,
    work_of,
)
from naspipe.runtime import checkpoint as ckpt

__all__ = ["SUFFIX", "RunDir", "check_logs", "discard_if_empty", "plan", "prepare", "publish", "refuse_live_source",
           "work_of"]


def prepare(run: RunDir, checkpoint: Path | None, manifest: dict[str, Any] | None) -> None:
    """Create the working directory and bring its logs to the checkpoint's point."""
    remove_stale_asides(run)
    try:
        if run.work.exists() and not run.in_place:
            shutil.rmtree(run.work)
        run.logs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {run.final}: cannot create {run.work} ({exc.strerror or exc})") from None
    shutil.rmtree(run.logs / "trace", ignore_errors=True)
    if checkpoint is None or manifest is None:
        return
    lengths: dict[str, int] = manifest["logs"]
    if run.in_place:
        ckpt.prune(run.work / "checkpoints", keep=1 << 30, newer_than=int(manifest["step"]))
        for path in sorted(p for p in run.logs.rglob("*") if p.is_file()):
            os.truncate(path, lengths.get(path.relative_to(run.logs).as_posix(), 0))
        return
    source = run_of(checkpoint) / "logs"
    for name, length in sorted(lengths.items()):
        _copy_prefix(source / name, run.logs / name, length)


def _copy_prefix(src: Path, dst: Path, length: int) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        left = length
        while left > 0:
            block = fin.read(min(left, 1 << 20))
            if not block:
                break
            fout.write(block)
            left -= len(block)


def discard_if_empty(run: RunDir) -> None:
    """Remove a fresh run's working directory that holds no complete checkpoint (nothing to resume)."""
    if run.in_place or not run.work.is_dir():
        return
    if not has_checkpoint(run.work):
        shutil.rmtree(run.work, ignore_errors=True)


def remove_stale_asides(run: RunDir) -> None:
    """Delete what an interrupted publish left of an older ``DIR`` (``.DIR.XXXXXXXX.old``), once ``DIR`` is
    the newer run: a SIGKILL during an ``--overwrite`` publish left it there for good. Called with the run's
    lock held, so no publish into ``DIR`` is under way. Left alone while ``DIR`` is missing (killed between
    the two renames): then it is the only copy of the old run."""
    if not run.final.is_dir():
        return
    for old in aside_copies(run.final):
        shutil.rmtree(old, ignore_errors=True)


