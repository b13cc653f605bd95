"""Native reader and writer for fairseq's binarized "mmap" indexed dataset.

NASPipe's original artifact consumed WMT14 data binarized by
``fairseq-preprocess --dataset-impl mmap``.  Reading that format natively keeps
fairseq (and its pinned torch) out of our dependencies, and writing the same
format for our own token shards means one reader serves both.

On-disk layout (fairseq 0.12, ``MMapIndexedDataset``), all little-endian:

``PREFIX.idx``::

    9 bytes   magic b"MMIDIDX\\x00\\x00"
    uint64    version (1)
    uint8     dtype code (see ``DTYPE_CODES``)
    uint64    number of sequences N
    int32[N]  sizes (tokens per sequence)
    int64[N]  pointers (byte offset of each sequence in the .bin)

``PREFIX.bin``: the sequences' tokens, concatenated.

Megatron-LM's variant of the format adds a ``uint64`` document count after N
and an ``int64`` document index after the pointers; the reader detects it from
the file size and accepts it too.  The writer always writes fairseq's layout.
"""

from __future__ import annotations

import operator
import os
import struct
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

import numpy as np

from .dictionary import Dictionary  # re-exported: fairseq keeps both in one place
from .errors import DataError

__all__ = [
    "DTYPE_CODES",
    "Dictionary",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "best_fitting_dtype",
    "dataset_exists",
    "write_indexed_dataset",
]

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
_HEADER = struct.Struct("<9sQBQ")  # magic, version, dtype code, N  -> 26 bytes
_DOC_COUNT = struct.Struct("<Q")

# fairseq 0.12 ``indexed_dataset._code_to_dtype`` (6 was ``np.float``, i.e. float64).
DTYPE_CODES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float64),
    8: np.dtype(np.uint16),
    9: np.dtype(np.uint32),
    10: np.dtype(np.uint64),
}


def dtype_code(dtype: np.dtype | type) -> int:
    """fairseq's code for ``dtype`` (the first matching code, as fairseq's ``code()``)."""
    wanted = np.dtype(dtype)
    for code, candidate in DTYPE_CODES.items():
        if candidate == wanted:
            return code
    raise DataError(f"dtype {wanted} has no fairseq indexed-dataset code")


def best_fitting_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (as fairseq's ``best_fitting_int_dtype``), else int32."""
    return np.dtype(np.uint16) if vocab_size < 65500 else np.dtype(np.int32)


def index_path(prefix: Path | str) -> Path:
    """``PREFIX.idx`` (suffix appended, never substituted: prefixes contain dots)."""
    return Path(f"{prefix}.idx")


def data_path(prefix: Path | str) -> Path:
    """``PREFIX.bin``."""
    return Path(f"{prefix}.bin")


def dataset_exists(prefix: Path | str) -> bool:
    """True when both ``PREFIX.idx`` and ``PREFIX.bin`` exist."""
    return index_path(prefix).is_file() and data_path(prefix).is_file()


def _strip_extension(prefix: Path | str) -> str:
    text = str(prefix)
    for ext in (".idx", ".bin"):
        if text.endswith(ext):
            return text[: -len(ext)]
    return text


class IndexedDataset:
    """Memory-mapped, read-only view of a fairseq mmap indexed dataset.

    Nothing but the headers is read eagerly, so opening a multi-gigabyte WMT
    shard is instant and pages are shared between processes.
    """

    def __init__(self, prefix: Path | str) -> None:
        self.prefix = Path(_strip_extension(prefix))
        idx, bin_ = index_path(self.prefix), data_path(self.prefix)
        for path in (idx, bin_):
            if not path.is_file():
                raise DataError(f"{path}: no such file")
        self._dtype, count, sizes_offset = _read_header(idx)
        self._index = np.memmap(idx, dtype=np.uint8, mode="r")
        self._sizes = np.frombuffer(self._index, dtype="<i4", count=count, offset=sizes_offset)
        self._pointers = np.frombuffer(
            self._index, dtype="<i8", count=count, offset=sizes_offset + 4 * count
        )
        _check_pointers(idx, self._sizes, self._pointers, self._dtype.itemsize)
        self._data = _map_data(bin_, self._dtype, int(self._sizes.sum(dtype=np.int64)))

    def __len__(self) -> int:
        return len(self._sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        """Tokens of sequence ``i`` as a fresh (writable, non-mmap) array."""
        i, n = operator.index(i), len(self)
        if not -n <= i < n:
            raise IndexError(f"{self.prefix}: sequence index {i} out of range for {n} sequences")
        i %= n
        start = int(self._pointers[i]) // self._dtype.itemsize
        return np.array(self._data[start : start + int(self._sizes[i])])

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]

    @property
    def sizes(self) -> np.ndarray:
        """int32 array of sequence lengths (read-only view of the index)."""
        return self._sizes

    @property
    def dtype(self) -> np.dtype:
        """Element dtype of the tokens in the ``.bin`` file."""
        return self._dtype

    @property
    def num_tokens(self) -> int:
        """Total number of tokens over all sequences."""
        return int(self._sizes.sum(dtype=np.int64))

    def max_token(self) -> int:
        """Largest token value (-1 for an empty dataset); scans the whole ``.bin``."""
        return int(self._data.max()) if self._data.size else -1

    def __repr__(self) -> str:
        return f"IndexedDataset({str(self.prefix)!r}, n={len(self)}, dtype={self._dtype})"


def _read_header(idx: Path) -> tuple[np.dtype, int, int]:
    """Validate the ``.idx`` header and size; return (dtype, N, offset of sizes)."""
    file_size = idx.stat().st_size
    with open(idx, "rb") as handle:
        head = handle.read(_HEADER.size + _DOC_COUNT.size)
    if len(head) < _HEADER.size:
        raise DataError(f"{idx}: truncated index header ({len(head)} bytes, need {_HEADER.size})")
    magic, version, code, count = _HEADER.unpack_from(head)
    if magic != MAGIC:
        raise DataError(f"{idx}: bad magic {magic!r}, expected fairseq mmap index {MAGIC!r}")
    if version != VERSION:
        raise DataError(f"{idx}: unsupported index version {version}, expected {VERSION}")
    if code not in DTYPE_CODES:
        raise DataError(f"{idx}: unknown dtype code {code} (known: {sorted(DTYPE_CODES)})")
    fairseq_size = _HEADER.size + 12 * count
    if file_size == fairseq_size:
        return DTYPE_CODES[code], count, _HEADER.size
    if len(head) == _HEADER.size + _DOC_COUNT.size:
        (docs,) = _DOC_COUNT.unpack_from(head, _HEADER.size)
        if file_size == fairseq_size + _DOC_COUNT.size + 8 * docs:  # Megatron-LM layout
            return DTYPE_CODES[code], count, _HEADER.size + _DOC_COUNT.size
    raise DataError(
        f"{idx}: index is {file_size} bytes but header says {count} sequences "
        f"(expected {fairseq_size} bytes); the file is truncated or not an mmap index"
    )


def _check_pointers(idx: Path, sizes: np.ndarray, pointers: np.ndarray, itemsize: int) -> None:
    """Require contiguous sequences, as fairseq writes them, so the .bin size is checkable."""
    if len(sizes) and int(sizes.min()) < 0:
        bad = int(np.argmax(sizes < 0))
        raise DataError(f"{idx}: negative size {int(sizes[bad])} for sequence {bad}")
    expected = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], dtype=np.int64, out=expected[1:])
    expected *= itemsize
    if not np.array_equal(expected, pointers):
        bad = int(np.argmax(expected != pointers))
        raise DataError(
            f"{idx}: pointer of sequence {bad} is {int(pointers[bad])}, expected {int(expected[bad])}"
        )


def _map_data(bin_: Path, dtype: np.dtype, num_tokens: int) -> np.ndarray:
    expected = num_tokens * dtype.itemsize
    actual = bin_.stat().st_size
    if actual != expected:
        raise DataError(
            f"{bin_}: data file is {actual} bytes, index expects {expected} "
            f"({num_tokens} tokens of {dtype})"
        )
    if num_tokens == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(bin_, dtype=dtype.newbyteorder("<"), mode="r")


class IndexedDatasetWriter:
    """Streams sequences into ``PREFIX.bin``/``PREFIX.idx`` atomically.

    Use as a context manager: both files appear (via ``os.replace``) only when
    the block exits cleanly; on an exception the temporaries are removed.
    """

    def __init__(self, prefix: Path | str, dtype: np.dtype | type = np.uint16) -> None:
        self.prefix = Path(_strip_extension(prefix))
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self._code = dtype_code(np.dtype(dtype))
        self._info = np.iinfo(self.dtype) if self.dtype.kind in "iu" else None
        self._sizes: list[int] = []
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.prefix.name}.", suffix=".bin.tmp", dir=self.prefix.parent)
        self._tmp_bin = Path(tmp)
        self._bin = os.fdopen(fd, "wb")
        self._closed = False

    def add(self, tokens: Iterable[int] | np.ndarray) -> None:
        """Append one sequence; values must fit the writer's dtype."""
        array = np.asarray(tokens)
        if array.ndim != 1:
            raise DataError(f"{self.prefix}: sequence {len(self._sizes)} must be 1-D, got shape {array.shape}")
        if array.size and self._info is not None:
            low, high = array.min(), array.max()
            if low < self._info.min or high > self._info.max:
                raise DataError(
                    f"{self.prefix}: sequence {len(self._sizes)} has value outside {self.dtype} range "
                    f"[{self._info.min}, {self._info.max}] (min {low}, max {high})"
                )
        self._bin.write(array.astype(self.dtype, copy=False).tobytes(order="C"))
        self._sizes.append(int(array.size))

    def finalize(self) -> None:
        """Write the index and move both files into place."""
        self._bin.flush()
        os.fsync(self._bin.fileno())
        self._bin.close()
        self._closed = True
        index = _encode_index(self._code, np.asarray(self._sizes, dtype=np.int64), self.dtype.itemsize)
        fd, tmp_idx = tempfile.mkstemp(prefix=f".{self.prefix.name}.", suffix=".idx.tmp", dir=self.prefix.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(index)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(self._tmp_bin, data_path(self.prefix))
        os.replace(tmp_idx, index_path(self.prefix))

    def abort(self) -> None:
        """Discard everything written so far."""
        if not self._closed:
            self._bin.close()
            self._closed = True
        self._tmp_bin.unlink(missing_ok=True)

    def __enter__(self) -> IndexedDatasetWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.finalize()
        else:
            self.abort()


def _encode_index(code: int, sizes: np.ndarray, itemsize: int) -> bytes:
    if len(sizes) and int(sizes.max()) > np.iinfo(np.int32).max:
        raise DataError(f"sequence of {int(sizes.max())} tokens does not fit the int32 sizes array")
    pointers = np.zeros(len(sizes), dtype="<i8")
    np.cumsum(sizes[:-1], out=pointers[1:])
    pointers *= itemsize
    header = _HEADER.pack(MAGIC, VERSION, code, len(sizes))
    return header + sizes.astype("<i4").tobytes() + pointers.tobytes()


def write_indexed_dataset(
    prefix: Path | str, sequences: Iterable[Iterable[int] | np.ndarray], dtype: np.dtype | type = np.uint16
) -> Path:
    """Write all ``sequences`` to ``PREFIX.{bin,idx}`` atomically; return the prefix."""
    with IndexedDatasetWriter(prefix, dtype) as writer:
        for sequence in sequences:
            writer.add(sequence)
    return writer.prefix
