"""The ``meta.json`` that describes a prepared translation dataset.

Training code should not guess file names or special-token ids: everything a
consumer needs (where the shards are, which ids are pad/bos/eos/unk, the
vocabulary sizes, line counts) is recorded once, by the preparation step, and
validated here on load so a hand-edited or stale file fails loudly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from naspipe.fsutil import atomic_write_json

from .dictionary import Dictionary
from .errors import DataError

META_NAME = "meta.json"
KIND = "translation"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class SplitFiles:
    """Shard prefixes (relative to the data directory) and size of one split."""

    src: str
    tgt: str
    lines: int


@dataclass(frozen=True)
class TranslationMeta:
    """Validated contents of a translation ``meta.json``.

    ``data_dir`` is where shards and dictionaries live: the meta file's own
    directory for ``prepare wmt`` output, or an external fairseq-binarized
    directory for ``prepare fairseq``.
    """

    data_dir: Path
    src_lang: str
    tgt_lang: str
    src_dict: str
    tgt_dict: str
    src_vocab_size: int
    tgt_vocab_size: int
    bos: int
    pad: int
    eos: int
    unk: int
    splits: dict[str, SplitFiles]
    extra: dict[str, Any] = field(default_factory=dict)

    def prefixes(self, split: str) -> tuple[Path, Path]:
        """Absolute (src, tgt) shard prefixes of ``split``."""
        if split not in self.splits:
            raise DataError(f"{self.data_dir}: no split {split!r} (available: {', '.join(sorted(self.splits))})")
        files = self.splits[split]
        return self.data_dir / files.src, self.data_dir / files.tgt

    def dictionaries(self) -> tuple[Dictionary, Dictionary]:
        """Load the (src, tgt) dictionaries; the same object twice when joined."""
        src = Dictionary.load(self.data_dir / self.src_dict)
        if self.tgt_dict == self.src_dict:
            return src, src
        return src, Dictionary.load(self.data_dir / self.tgt_dict)

    def to_json(self, data_dir_text: str) -> dict[str, Any]:
        """JSON object for this meta, with ``data_dir`` stored as ``data_dir_text``."""
        obj: dict[str, Any] = dict(self.extra)
        obj.update(
            kind=KIND,
            format_version=FORMAT_VERSION,
            data_dir=data_dir_text,
            src_lang=self.src_lang,
            tgt_lang=self.tgt_lang,
            src_dict=self.src_dict,
            tgt_dict=self.tgt_dict,
            joined_dictionary=self.src_dict == self.tgt_dict,
            src_vocab_size=self.src_vocab_size,
            tgt_vocab_size=self.tgt_vocab_size,
            vocab_size=max(self.src_vocab_size, self.tgt_vocab_size),
            bos=self.bos,
            pad=self.pad,
            eos=self.eos,
            unk=self.unk,
            splits={name: vars(files) for name, files in sorted(self.splits.items())},
        )
        return obj

    def save(self, out_dir: Path | str) -> Path:
        """Write ``meta.json`` into ``out_dir``; ``data_dir`` is stored relative when inside it."""
        out = Path(out_dir)
        target = self.data_dir.resolve()
        text = "." if target == out.resolve() else str(target)
        path = out / META_NAME
        atomic_write_json(path, self.to_json(text))
        return path


def load_meta(meta_dir: Path | str) -> TranslationMeta:
    """Read and validate ``meta_dir/meta.json``; errors name the file and field."""
    path = Path(meta_dir) / META_NAME
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(obj, dict) or obj.get("kind") != KIND:
        kind = obj.get("kind") if isinstance(obj, dict) else type(obj).__name__
        raise DataError(f"{path}: field 'kind' is {kind!r}, expected {KIND!r}")
    return _from_json(path, obj)


def _from_json(path: Path, obj: dict[str, Any]) -> TranslationMeta:
    known = set(TranslationMeta.__dataclass_fields__) | {"kind", "format_version", "joined_dictionary", "vocab_size"}
    data_dir = Path(_get(path, obj, "data_dir", str))
    return TranslationMeta(
        data_dir=data_dir if data_dir.is_absolute() else (path.parent / data_dir),
        src_lang=_get(path, obj, "src_lang", str),
        tgt_lang=_get(path, obj, "tgt_lang", str),
        src_dict=_get(path, obj, "src_dict", str),
        tgt_dict=_get(path, obj, "tgt_dict", str),
        src_vocab_size=_get(path, obj, "src_vocab_size", int),
        tgt_vocab_size=_get(path, obj, "tgt_vocab_size", int),
        bos=_get(path, obj, "bos", int),
        pad=_get(path, obj, "pad", int),
        eos=_get(path, obj, "eos", int),
        unk=_get(path, obj, "unk", int),
        splits=_splits(path, _get(path, obj, "splits", dict)),
        extra={key: value for key, value in obj.items() if key not in known},
    )


def _splits(path: Path, raw: dict[str, Any]) -> dict[str, SplitFiles]:
    if not raw:
        raise DataError(f"{path}: field 'splits' is empty")
    splits = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict):
            raise DataError(f"{path}: field 'splits.{name}' must be an object, got {entry!r}")
        where = f"splits.{name}."
        splits[name] = SplitFiles(
            src=_get(path, entry, "src", str, where),
            tgt=_get(path, entry, "tgt", str, where),
            lines=_get(path, entry, "lines", int, where),
        )
    return splits


def _get(path: Path, obj: dict[str, Any], key: str, kind: type, where: str = "") -> Any:
    if key not in obj:
        raise DataError(f"{path}: missing field '{where}{key}'")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DataError(f"{path}: field '{where}{key}' must be {kind.__name__}, got {value!r}")
    return value

