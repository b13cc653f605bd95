"""Where a run works and how it is published: ``DIR.partial/`` while running, ``DIR`` when done.

A run writes everything (checkpoints, the stages' logs, the final files) into the sibling
working directory ``DIR.partial`` and, only when every output is complete, publishes it as
``DIR`` with one ``os.replace`` of the whole directory. So ``DIR`` always holds exactly one
run, complete; an interrupted or killed run leaves ``DIR.partial`` with its last complete
checkpoint, resumable with ``--resume DIR.partial --out DIR``.

The location is checked before any work: ``--out`` must not be a file, lie under a file, or
be unwritable; a non-empty ``DIR`` or an existing ``DIR.partial`` is refused unless
``--overwrite`` is given (then a stale ``DIR.partial`` is removed at the start and ``DIR``
is replaced only at publish time, so a failed run leaves the old ``DIR`` intact) or the
run resumes from it (``--resume DIR.partial`` continues in place, and replaces ``DIR`` when
done: only an ``--overwrite`` or extending run leaves a ``DIR.partial`` beside a finished
``DIR``; ``--resume DIR --out DIR`` extends a finished run and replaces it when done).
A ``DIR.partial`` that holds no complete checkpoint has nothing to resume (a run killed
before its first checkpoint, or while its stages were starting): it blocks nothing, and
the next run into ``DIR`` replaces it. A run whose ``DIR.partial`` disappears while it
trains (removed or renamed) stops with :class:`RunDirGone` and never re-creates it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from naspipe.errors import UsageError
from naspipe.fsutil import check_creatable, replace_path
from naspipe.runplan import runlock

SUFFIX = ".partial"
CHECKPOINT_MANIFESTS = "checkpoints/step-*/manifest.json"  # a complete checkpoint (naspipe.runtime.checkpoint)


class RunDirGone(RuntimeError):
    """The run's working directory was removed or renamed while it trained: the stages stop without
    writing (a checkpoint or output written now would re-create it, incomplete, and block the rerun)."""

    def __init__(self, work: Path) -> None:
        super().__init__(f"{work} was removed or renamed while the run trained; the stages stopped and nothing was "
                         f"written or published; run the command again (a renamed directory resumes with "
                         f"--resume NEW_NAME --out {work.with_name(work.name.removesuffix(SUFFIX))})")
        self.work = work


def check_still_there(work: Path) -> None:
    """Raise :class:`RunDirGone` unless ``work`` is still a directory; called before a stage writes by path."""
    if not work.is_dir():
        raise RunDirGone(work)


@contextmanager
def stops_if_removed(work: Path) -> Iterator[None]:
    """Around a stage's work: a write by path that raced the removal or rename of ``work`` (there at
    :func:`check_still_there`, gone at the write) fails with ``FileNotFoundError``; it is the same event, so
    it stops the stage with the same :class:`RunDirGone`."""
    try:
        yield
    except FileNotFoundError:
        if work.is_dir():
            raise
        raise RunDirGone(work) from None


def has_checkpoint(run: Path) -> bool:
    """Whether ``run`` holds a complete checkpoint (something a resume could continue)."""
    return any(run.glob(CHECKPOINT_MANIFESTS))


@dataclass(frozen=True)
class RunDir:
    final: Path  # --out: appears only complete
    work: Path  # DIR.partial: checkpoints, logs and outputs while the run goes
    in_place: bool = False  # resuming the run that lives in ``work``
    overwrite: bool = False

    @property
    def logs(self) -> Path:
        return self.work / "logs"


def plan(out: Path, checkpoint: Path | None, overwrite: bool) -> RunDir:
    """Check the output location (nothing is written); raise UsageError naming the problem."""
    if out.name.endswith(SUFFIX) or not out.name:
        raise UsageError(f"--out {out}: name a run directory (a run works in DIR{SUFFIX} and publishes DIR)")
    _check_writable(out)
    work = work_of(out)
    runlock.refuse_if_held(work, out)  # a live run: name it, whatever else is asked (--overwrite included)
    source = run_of(checkpoint) if checkpoint is not None else None
    in_place = source is not None and work.exists() and source.samefile(work)
    extends = source is not None and out.exists() and source.samefile(out)
    if out.is_dir() and any(out.iterdir()) and not (overwrite or extends or in_place):
        raise UsageError(f"--out {out}: directory is not empty; pass --overwrite to replace it when this run "
                         f"completes, or --resume {out} to extend it")
    if work.exists() and not (overwrite or in_place) and has_checkpoint(work):
        raise UsageError(f"--out {out}: {work} holds an interrupted run; continue it with --resume {work} or pass "
                         "--overwrite to discard it")
    return RunDir(out, work, in_place, overwrite)


def work_of(out: Path) -> Path:
    return out.with_name(out.name + SUFFIX)


def _check_writable(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    check_creatable(out, "--out")


def refuse_live_source(checkpoint: Path) -> None:
    """A checkpoint of a run still in progress may be pruned while it is read: refuse it, naming the run."""
    source = run_of(checkpoint)
    if source.name.endswith(SUFFIX):
        runlock.refuse_if_held(source, source.with_name(source.name[: -len(SUFFIX)]))


def run_of(checkpoint: Path) -> Path:
    """The run directory that holds ``checkpoint`` (RUN/checkpoints/step-N) and its logs."""
    return checkpoint.absolute().parent.parent


def check_logs(checkpoint: Path, manifest: dict[str, Any]) -> None:
    """The logs the checkpoint counts on are there and at least as long as it recorded."""
    logs = run_of(checkpoint) / "logs"
    for name, length in sorted(manifest["logs"].items()):
        path = logs / name
        if ".." in Path(name).parts or not path.is_file():
            raise UsageError(f"checkpoint {checkpoint}: its log {path} is missing (a checkpoint must stay inside its "
                             "run directory)")
        if path.stat().st_size < length:
            raise UsageError(f"checkpoint {checkpoint}: its log {path} is shorter than the {length} bytes it recorded")


def publish(run: RunDir) -> None:
    """Make the complete working directory ``DIR``: one rename (two when replacing an old ``DIR``)."""
    replace_path(run.work, run.final)
