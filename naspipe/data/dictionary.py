"""fairseq-compatible vocabulary (``dict.*.txt``).

fairseq's ids are positional: four special symbols first (``<s>``=0,
``<pad>``=1, ``</s>``=2, ``<unk>``=3), then one ``token count`` line per
symbol in file order.  Reproducing those rules exactly is what makes ids in
fairseq-binarized shards decode to the right words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from naspipe.fsutil import atomic_write_text

from .errors import DataError

BOS, PAD, EOS, UNK = "<s>", "<pad>", "</s>", "<unk>"
SPECIALS = (BOS, PAD, EOS, UNK)
OVERWRITE_FLAG = "#fairseq:overwrite"
_SPACES = re.compile(r"\s+")


class Dictionary:
    """Maps symbols to ids and back, following fairseq's ``Dictionary`` semantics."""

    def __init__(self) -> None:
        self.symbols: list[str] = []
        self.counts: list[int] = []
        self._indices: dict[str, int] = {}
        self.bos_index = self._append(BOS, 1)
        self.pad_index = self._append(PAD, 1)
        self.eos_index = self._append(EOS, 1)
        self.unk_index = self._append(UNK, 1)
        self.nspecial = len(self.symbols)

    @classmethod
    def load(cls, path: Path | str) -> Dictionary:
        """Read a fairseq ``dict.txt``; errors name the file and line."""
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        dictionary = cls()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}: invalid UTF-8 at byte {exc.start}") from exc
        for number, line in enumerate(text.split("\n"), start=1):
            if line.strip():
                dictionary._add_line(path, number, line)
        return dictionary

    @classmethod
    def from_symbols(cls, symbols: Iterable[str], counts: Iterable[int] | None = None) -> Dictionary:
        """Build a dictionary whose non-special ids follow ``symbols`` in order."""
        dictionary = cls()
        symbols = list(symbols)
        counts = list(counts) if counts is not None else [0] * len(symbols)
        if len(counts) != len(symbols):
            raise DataError(f"{len(symbols)} symbols but {len(counts)} counts")
        for symbol, count in zip(symbols, counts, strict=True):
            if symbol in dictionary._indices:
                raise DataError(f"duplicate symbol {symbol!r}")
            dictionary._append(symbol, int(count))
        return dictionary

    def _add_line(self, path: Path, number: int, line: str) -> None:
        """Parse one line exactly as fairseq's ``add_from_file`` does."""
        try:
            word, field = line.rstrip().rsplit(" ", 1)
            overwrite = field == OVERWRITE_FLAG
            if overwrite:
                word, field = word.rsplit(" ", 1)
            count = int(field)
        except ValueError:
            raise DataError(f"{path}:{number}: expected '<token> <count>', got {line!r}") from None
        if word in self._indices and not overwrite:
            raise DataError(
                f"{path}:{number}: duplicate token {word!r} (add {OVERWRITE_FLAG} to allow it)"
            )
        self._append(word, count)

    def _append(self, symbol: str, count: int) -> int:
        index = len(self.symbols)
        self._indices[symbol] = index
        self.symbols.append(symbol)
        self.counts.append(count)
        return index

    def __len__(self) -> int:
        return len(self.symbols)

    def __contains__(self, symbol: object) -> bool:
        return symbol in self._indices

    def __getitem__(self, index: int) -> str:
        return self.symbol(index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dictionary) and self.symbols == other.symbols

    def bos(self) -> int:
        """Id of ``<s>``."""
        return self.bos_index

    def pad(self) -> int:
        """Id of ``<pad>``."""
        return self.pad_index

    def eos(self) -> int:
        """Id of ``</s>``."""
        return self.eos_index

    def unk(self) -> int:
        """Id of ``<unk>``."""
        return self.unk_index

    def index(self, symbol: str) -> int:
        """Id of ``symbol``, or the ``<unk>`` id when it is not in the dictionary."""
        return self._indices.get(symbol, self.unk_index)

    def symbol(self, index: int) -> str:
        """Symbol for ``index``; out-of-range ids decode to ``<unk>`` as in fairseq."""
        if 0 <= index < len(self.symbols):
            return self.symbols[index]
        return UNK

    def encode_line(self, line: str, append_eos: bool = True) -> np.ndarray:
        """Whitespace-tokenize ``line`` (fairseq's ``tokenize_line``) and map to int64 ids."""
        words = _SPACES.sub(" ", line).strip().split()
        ids = [self.index(word) for word in words]
        if append_eos:
            ids.append(self.eos_index)
        return np.asarray(ids, dtype=np.int64)

    def tokens(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        """Symbols of ``ids`` up to the first ``</s>``, dropping ``<s>`` and ``<pad>``."""
        words: list[str] = []
        for raw in np.asarray(ids).reshape(-1).tolist():
            index = int(raw)
            if index == self.eos_index:
                break
            if index not in (self.bos_index, self.pad_index):
                words.append(self.symbol(index))
        return words

    def string(self, ids: Sequence[int] | np.ndarray, separator: str = " ") -> str:
        """Decode ``ids`` to text: stops at ``</s>``, drops ``<s>``/``<pad>``."""
        return separator.join(self.tokens(ids))

    def save(self, path: Path | str) -> None:
        """Write the non-special symbols as ``token count`` lines, atomically."""
        lines = []
        for symbol, count in zip(self.symbols[self.nspecial :], self.counts[self.nspecial :], strict=True):
            if not symbol or symbol != symbol.strip() or "\n" in symbol or "\r" in symbol:
                raise DataError(f"{path}: symbol {symbol!r} cannot be stored in a fairseq dictionary")
            lines.append(f"{symbol} {count}\n")
        atomic_write_text(path, "".join(lines))
