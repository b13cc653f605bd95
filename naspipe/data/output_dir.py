"""The output directory of ``naspipe prepare``: built aside, renamed into place, never mixed.

Data preparation can run for hours; a crash or Ctrl-C must never leave a half-written
shard that a later training run silently consumes. A dataset is built in a temporary
sibling directory and renamed into place as a whole; an existing directory is replaced
only when it is a previous naspipe dataset (it holds ``meta.json``). Single files are
written with :mod:`naspipe.fsutil`, the package's one atomic file writer.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from naspipe.fsutil import replace_path, temp_dir_beside

from .errors import DataError
from .meta import META_NAME as MARKER


def check_replaceable(out_dir: Path | str) -> None:
    """Refuse early to overwrite a directory that is not a naspipe data directory.

    Replacing is allowed for a missing path, an empty directory, or a directory
    holding ``meta.json`` (a previous naspipe output).  Anything else might be
    the user's own files, and deleting them would be unforgivable.
    """
    out = Path(out_dir)
    if not out.exists():
        return
    if not out.is_dir():
        raise DataError(f"{out}: output path exists and is not a directory")
    if any(out.iterdir()) and not (out / MARKER).is_file():
        raise DataError(f"{out}: refusing to replace a non-empty directory without {MARKER}")


@contextmanager
def atomic_output_dir(out_dir: Path | str) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``out_dir`` only if the block succeeds."""
    out = Path(out_dir)
    check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_beside(out, ".tmp")
    try:
        yield tmp
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap_into_place(tmp: Path, out: Path) -> None:
    check_replaceable(out)
    replace_path(tmp, out)


__all__ = ["atomic_output_dir", "check_replaceable"]
