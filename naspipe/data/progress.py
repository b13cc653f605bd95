"""Progress bars that appear only for humans.

A progress bar in a log file or CI output is noise, so tqdm is enabled only
when stderr is an interactive terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def bar_wanted(mode: str) -> bool:
    """The ``progress`` config key's rule: ``on``, or ``auto`` when stderr is a terminal."""
    return mode == "on" or (mode == "auto" and _stderr_is_tty())


def progress(items: Iterable[T], total: int | None = None, desc: str = "") -> Iterator[T]:
    """Wrap ``items`` in a tqdm bar when stderr is a TTY, else yield them unchanged."""
    if not _stderr_is_tty():
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, total=total, desc=desc, leave=False, file=sys.stderr)


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
