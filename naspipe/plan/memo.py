"""Workflow jobs keyed by what they compute: a result made once per key, copied to every job that asks.

Sequential training and CSP at every stage count end with the same weights bit for bit (the
contract, checked by Table 3's comparison), so their searches pick the same winner, its retrain
gives the same weights, and its scoring the same numbers. Snakemake cannot know that before the
runs end, so the search-phase jobs stay one per run (the report lists every system) and each
looks its result up here under a key made of the *content* it depends on (weight digests, the
subnet's choices, the command's options): the first job with a key computes it and stores a copy;
later ones copy it instead. A job whose key another job is computing waits for it (one lock file
per key), so two jobs never compute one key. A key holds only what the command reads, so a
different input is a different key: a hit can only return what the command would have written.

The store lives beside the outputs it serves (``results/search/.memo``), so deleting those outputs
deletes it too.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from naspipe.fsutil import replace_path, temp_dir_beside

DONE = ".memo-complete"  # written last into a stored entry: an entry without it is ignored and replaced


def key_of(parts: dict[str, Any]) -> str:
    """The SHA-256 of ``parts`` as canonical JSON (sorted keys): equal parts, equal key."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@contextmanager
def claimed(store: Path, key: str) -> Iterator[Path | None]:
    """Hold ``key``'s lock; yield its complete stored entry, or None when the caller must compute it.

    Blocking: a second job with the same key waits here until the first has stored its result.
    """
    store.mkdir(parents=True, exist_ok=True)
    with open(store / f"{key}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            entry = store / key
            yield entry if (entry / DONE).is_file() else None
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def put(store: Path, key: str, result: Path) -> None:
    """Store a copy of ``result`` (a file or a directory) under ``key``, whole or not at all."""
    entry = store / key
    tmp = temp_dir_beside(entry, ".tmp")
    try:
        _copy(result, tmp / result.name)
        (tmp / DONE).write_text(result.name + "\n", encoding="utf-8")
        if entry.exists():  # an incomplete entry of a job that died
            shutil.rmtree(entry)
        os.rename(tmp, entry)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def stored(entry: Path) -> Path:
    """The result kept in a complete entry (the file or directory ``put`` copied)."""
    return entry / (entry / DONE).read_text(encoding="utf-8").strip()


def copy_out(entry: Path, out: Path) -> None:
    """Copy a stored result to ``out`` whole: built beside it, then renamed into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_beside(out, ".tmp")
    try:
        _copy(stored(entry), tmp / "result")
        replace_path(tmp / "result", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst)
