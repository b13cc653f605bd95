"""Reading line-aligned parallel text (plain or gzip) with precise errors.

Parallel corpora are aligned by line number, so lines are split on ``\\n``
only (``str.splitlines`` would also split on U+2028 and friends and silently
misalign the two sides), and a bad byte is reported with its line number.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from pathlib import Path
from typing import BinaryIO

from .errors import DataError

_CHUNK = 1 << 20


def read_lines(path: Path | str) -> list[str]:
    """Return the lines of a UTF-8 text file (``.gz`` transparently), without newlines.

    Raises DataError for a missing or empty file, invalid UTF-8 (naming the line)
    or a corrupt gzip stream.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        with _open_binary(path) as handle:
            lines = [_decode(path, number, raw) for number, raw in enumerate(handle, start=1)]
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot read: {exc}") from exc
    if not lines:
        raise DataError(f"{path}: empty file")
    return lines


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of the file's bytes as stored (a ``.gz`` is hashed compressed)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _open_binary(path: Path) -> BinaryIO:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _decode(path: Path, number: int, raw: bytes) -> str:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}:{number}: invalid UTF-8 at byte {exc.start} of the line ({raw[exc.start:exc.start + 4]!r})"
        ) from exc
