"""Validating and registering a directory binarized by ``fairseq-preprocess``.

The artifact's WMT14 data was produced by fairseq; rather than re-tokenizing
it (which would change the experiment), we check it thoroughly and write a
``meta.json`` that points at it, so training reads the original shards.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from .dictionary import Dictionary
from .errors import DataError
from .indexed import IndexedDataset, data_path, index_path
from .meta import META_NAME, SplitFiles, TranslationMeta, load_meta
from .textio import sha256_file

# {split}.{src}-{tgt}.{lang}.idx, e.g. train.en-de.en.idx
_SHARD = re.compile(r"^(?P<split>[^.]+)\.(?P<src>[^.-]+)-(?P<tgt>[^.-]+)\.(?P<lang>[^.]+)\.idx$")


def resolve_translation_dir(data_dir: Path | str) -> TranslationMeta:
    """Meta of a prepared directory, or inferred from a bare fairseq-binarized directory (here, not in
    :mod:`naspipe.data.meta`, which this module builds on: the two no longer import each other)."""
    data_dir = Path(data_dir)
    if (data_dir / META_NAME).is_file():
        return load_meta(data_dir)
    return inspect_fairseq_dir(data_dir)


def inspect_fairseq_dir(
    data_dir: Path | str, src_lang: str | None = None, tgt_lang: str | None = None
) -> TranslationMeta:
    """Validate a fairseq-binarized directory and describe it (shards stay where they are)."""
    data_dir = Path(data_dir).resolve()
    if not data_dir.is_dir():
        raise DataError(f"{data_dir}: no such directory")
    src, tgt, splits = _find_splits(data_dir, src_lang, tgt_lang)
    src_dict, tgt_dict = f"dict.{src}.txt", f"dict.{tgt}.txt"
    dictionaries = (Dictionary.load(data_dir / src_dict), Dictionary.load(data_dir / tgt_dict))
    if dictionaries[0] == dictionaries[1]:
        tgt_dict = src_dict
    files = {name: _check_split(data_dir, name, src, tgt, dictionaries) for name in splits}
    first = dictionaries[0]
    return TranslationMeta(
        data_dir=data_dir,
        src_lang=src,
        tgt_lang=tgt,
        src_dict=src_dict,
        tgt_dict=tgt_dict,
        src_vocab_size=len(dictionaries[0]),
        tgt_vocab_size=len(dictionaries[1]),
        bos=first.bos(),
        pad=first.pad(),
        eos=first.eos(),
        unk=first.unk(),
        splits=files,
        extra={"tokenizer": {"type": "fairseq-preprocessed"}},
    )


def prepare_fairseq(
    data_dir: Path | str,
    out_dir: Path | str,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> TranslationMeta:
    """Validate ``data_dir`` and write ``out_dir/meta.json`` pointing at it (with file hashes)."""
    meta = inspect_fairseq_dir(data_dir, src_lang, tgt_lang)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: output path exists and is not a directory")
    existing = out / META_NAME
    if out.resolve() != meta.data_dir and out.is_dir() and any(out.iterdir()) and not existing.is_file():
        raise DataError(f"{out}: refusing to write into a non-empty directory without {META_NAME}")
    meta = TranslationMeta(**{**vars(meta), "extra": {**meta.extra, "files": _hashes(meta)}})
    out.mkdir(parents=True, exist_ok=True)
    meta.save(out)
    return meta


def _find_splits(
    data_dir: Path, src_lang: str | None, tgt_lang: str | None
) -> tuple[str, str, list[str]]:
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted(data_dir.iterdir()):
        match = _SHARD.match(path.name)
        if match and match["lang"] in (match["src"], match["tgt"]):
            found[(match["src"], match["tgt"])].add(match["split"])
    if src_lang is not None or tgt_lang is not None:
        found = {pair: s for pair, s in found.items() if pair == (src_lang or pair[0], tgt_lang or pair[1])}
    if not found:
        raise DataError(f"{data_dir}: no fairseq shards named SPLIT.SRC-TGT.LANG.idx")
    if len(found) > 1:
        pairs = ", ".join(f"{s}-{t}" for s, t in sorted(found))
        raise DataError(f"{data_dir}: several language pairs ({pairs}); choose one with --src-lang/--tgt-lang")
    (src, tgt), splits = next(iter(found.items()))
    return src, tgt, sorted(splits)


def _check_split(
    data_dir: Path, split: str, src: str, tgt: str, dictionaries: tuple[Dictionary, Dictionary]
) -> SplitFiles:
    names = (f"{split}.{src}-{tgt}.{src}", f"{split}.{src}-{tgt}.{tgt}")
    datasets = [IndexedDataset(data_dir / name) for name in names]
    for name, dataset, dictionary in zip(names, datasets, dictionaries, strict=True):
        top = dataset.max_token()
        if top >= len(dictionary):
            raise DataError(
                f"{index_path(data_dir / name)}: token id {top} out of range for a dictionary of {len(dictionary)}"
            )
    if len(datasets[0]) != len(datasets[1]):
        raise DataError(
            f"{data_dir}: split {split!r}: {names[0]} has {len(datasets[0])} sequences "
            f"but {names[1]} has {len(datasets[1])}"
        )
    return SplitFiles(src=names[0], tgt=names[1], lines=len(datasets[0]))


def _hashes(meta: TranslationMeta) -> dict[str, str]:
    paths = {meta.data_dir / meta.src_dict, meta.data_dir / meta.tgt_dict}
    for files in meta.splits.values():
        for prefix in (files.src, files.tgt):
            paths.update({index_path(meta.data_dir / prefix), data_path(meta.data_dir / prefix)})
    return {path.name: sha256_file(path) for path in sorted(paths)}
