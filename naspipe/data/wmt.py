"""Raw parallel text -> joint SentencePiece BPE -> fairseq-format token shards.

The output directory is self-contained and reproducible: the BPE model is
trained single-threaded on all training sentences in file order (no sampling,
no shuffling, fixed random seed), so the same inputs give byte-identical
``spm.model``, dictionaries and shards.  SentencePiece is told to use
fairseq's special ids (``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3), so a
piece id *is* its fairseq dictionary id and one reader serves both formats.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm

from naspipe.fsutil import atomic_write_bytes
from naspipe.seeding import derive_seed

from .dictionary import Dictionary
from .errors import DataError
from .indexed import IndexedDatasetWriter, best_fitting_dtype
from .meta import SplitFiles, TranslationMeta
from .output_dir import atomic_output_dir, check_replaceable
from .progress import progress
from .textio import read_lines, sha256_file

SPM_MODEL = "spm.model"
BOS_ID, PAD_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
_CHUNK_LINES = 10_000
_LANG = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,15}$")


@dataclass(frozen=True)
class ParallelFiles:
    """One split's source and target text files."""

    split: str
    src: Path
    tgt: Path


@dataclass(frozen=True)
class _Split:
    files: ParallelFiles
    src_lines: list[str]
    tgt_lines: list[str]


def prepare_wmt(
    src: Path | str,
    tgt: Path | str,
    out_dir: Path | str,
    vocab_size: int,
    *,
    valid_src: Path | str | None = None,
    valid_tgt: Path | str | None = None,
    test_src: Path | str | None = None,
    test_tgt: Path | str | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    seed: int = 0,
    character_coverage: float = 1.0,
) -> TranslationMeta:
    """Tokenize parallel text with a joint BPE model and write shards + meta to ``out_dir``.

    ``src``/``tgt`` are the training files; optional valid/test pairs are
    encoded with the model trained on the training split only.
    """
    if vocab_size <= len((BOS_ID, PAD_ID, EOS_ID, UNK_ID)):
        raise DataError(f"vocab_size must exceed the 4 special symbols, got {vocab_size}")
    check_replaceable(out_dir)
    pairs = _collect_pairs(src, tgt, valid_src, valid_tgt, test_src, test_tgt)
    langs = _languages(pairs[0], src_lang, tgt_lang)
    splits = [_read_split(files) for files in pairs]
    model = train_bpe(splits[0].src_lines + splits[0].tgt_lines, vocab_size, seed, character_coverage)
    processor = spm.SentencePieceProcessor(model_proto=model)
    with atomic_output_dir(out_dir) as tmp:
        atomic_write_bytes(tmp / SPM_MODEL, model)
        info = {s.files.split: _write_split(tmp, s, processor, langs, vocab_size) for s in splits}
        dictionary = _dictionary(processor, tmp, info["train"]["counts"], langs)
        meta = _meta(tmp, langs, len(dictionary), info, model, seed, character_coverage)
        meta.save(tmp)
    return TranslationMeta(**{**vars(meta), "data_dir": Path(out_dir).resolve()})


def train_bpe(sentences: Sequence[str], vocab_size: int, seed: int = 0, character_coverage: float = 1.0) -> bytes:
    """Train a deterministic SentencePiece BPE model on ``sentences``; return the model bytes."""
    writer = io.BytesIO()
    spm.set_random_generator_seed(derive_seed(seed, "spm") % (2**31))
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=writer,
            model_type="bpe",
            vocab_size=vocab_size,
            character_coverage=character_coverage,
            bos_id=BOS_ID,
            pad_id=PAD_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            num_threads=1,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            minloglevel=2,
        )
    except RuntimeError as exc:
        raise DataError(f"SentencePiece training failed (vocab_size={vocab_size}): {exc}") from exc
    return writer.getvalue()


def _collect_pairs(*paths: Path | str | None) -> list[ParallelFiles]:
    pairs = [ParallelFiles("train", Path(paths[0]), Path(paths[1]))]  # type: ignore[arg-type]
    for split, (a, b) in (("valid", paths[2:4]), ("test", paths[4:6])):
        if (a is None) != (b is None):
            raise DataError(f"{split}: give both source and target files, got {a!r} and {b!r}")
        if a is not None and b is not None:
            pairs.append(ParallelFiles(split, Path(a), Path(b)))
    return pairs


def _languages(train: ParallelFiles, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
    """Language codes from flags, else from file suffixes (``train.en.gz`` -> ``en``)."""
    src = src_lang or _suffix_lang(train.src) or "src"
    tgt = tgt_lang or _suffix_lang(train.tgt) or "tgt"
    if src == tgt and not (src_lang and tgt_lang):
        src, tgt = src_lang or "src", tgt_lang or "tgt"
    for flag, lang in (("source", src), ("target", tgt)):
        if not _LANG.match(lang):
            raise DataError(f"{flag} language code {lang!r} must match {_LANG.pattern}")
    if src == tgt:
        raise DataError(f"source and target language codes are both {src!r}")
    return src, tgt


def _suffix_lang(path: Path) -> str | None:
    name = path.name[: -len(".gz")] if path.name.endswith(".gz") else path.name
    stem, dot, suffix = name.rpartition(".")
    return suffix if dot and stem and _LANG.match(suffix) else None


def _read_split(files: ParallelFiles) -> _Split:
    src_lines, tgt_lines = read_lines(files.src), read_lines(files.tgt)
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"{files.split}: line counts differ: {files.src} has {len(src_lines)} lines, "
            f"{files.tgt} has {len(tgt_lines)}"
        )
    return _Split(files, src_lines, tgt_lines)


def _write_split(
    out: Path, split: _Split, processor: spm.SentencePieceProcessor, langs: tuple[str, str], vocab: int
) -> dict[str, Any]:
    counts = np.zeros(vocab, dtype=np.int64)
    prefixes = []
    sides = ((langs[0], split.src_lines, split.files.src), (langs[1], split.tgt_lines, split.files.tgt))
    for lang, lines, path in sides:
        prefix = f"{split.files.split}.{langs[0]}-{langs[1]}.{lang}"
        counts += _encode_to_shard(out / prefix, lines, processor, vocab)
        prefixes.append((prefix, str(Path(path).resolve()), sha256_file(path)))
    return {"lines": len(split.src_lines), "prefixes": prefixes, "counts": counts}


def _encode_to_shard(
    prefix: Path, lines: list[str], processor: spm.SentencePieceProcessor, vocab: int
) -> np.ndarray:
    """Encode in chunks (bounded memory on WMT-sized files); return per-id token counts."""
    counts = np.zeros(vocab, dtype=np.int64)
    starts = range(0, len(lines), _CHUNK_LINES)
    with IndexedDatasetWriter(prefix, best_fitting_dtype(vocab)) as writer:
        for start in progress(starts, len(starts), prefix.name):
            encoded = processor.encode(lines[start : start + _CHUNK_LINES], out_type=int, num_threads=1)
            for sequence in encoded:
                sequence.append(EOS_ID)
                writer.add(np.asarray(sequence, dtype=np.int64))
            flat = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int64)
            counts += np.bincount(flat, minlength=vocab)
    return counts


def _dictionary(
    processor: spm.SentencePieceProcessor, out: Path, counts: np.ndarray, langs: tuple[str, str]
) -> Dictionary:
    """fairseq dict whose ids equal the SentencePiece ids (pieces 0-3 are fairseq's specials)."""
    size = processor.get_piece_size()
    specials = [processor.id_to_piece(i) for i in range(4)]
    if specials != ["<s>", "<pad>", "</s>", "<unk>"]:
        raise DataError(f"SentencePiece special pieces are {specials}, expected fairseq's")
    pieces = [processor.id_to_piece(i) for i in range(4, size)]
    dictionary = Dictionary.from_symbols(pieces, counts[4:size].tolist())
    for name in ("dict.txt", f"dict.{langs[0]}.txt", f"dict.{langs[1]}.txt"):
        dictionary.save(out / name)
    return dictionary


def _meta(
    out: Path,
    langs: tuple[str, str],
    vocab: int,
    info: dict[str, dict[str, Any]],
    model: bytes,
    seed: int,
    coverage: float,
) -> TranslationMeta:
    splits = {
        name: SplitFiles(src=entry["prefixes"][0][0], tgt=entry["prefixes"][1][0], lines=entry["lines"])
        for name, entry in info.items()
    }
    sources = {
        name: {
            "src": {"path": entry["prefixes"][0][1], "sha256": entry["prefixes"][0][2]},
            "tgt": {"path": entry["prefixes"][1][1], "sha256": entry["prefixes"][1][2]},
        }
        for name, entry in info.items()
    }
    tokenizer = {
        "type": "sentencepiece",
        "model": SPM_MODEL,
        "model_type": "bpe",
        "joint": True,
        "sha256": _sha256(model),
        "seed": seed,
        "character_coverage": coverage,
        "sentencepiece_version": spm.__version__,
    }
    return TranslationMeta(
        data_dir=out,
        src_lang=langs[0],
        tgt_lang=langs[1],
        src_dict="dict.txt",
        tgt_dict="dict.txt",
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        bos=BOS_ID,
        pad=PAD_ID,
        eos=EOS_ID,
        unk=UNK_ID,
        splits=splits,
        extra={"tokenizer": tokenizer, "sources": sources},
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_tokenizer(data_dir: Path | str) -> spm.SentencePieceProcessor:
    """The SentencePiece model of a ``prepare wmt`` directory, for detokenizing hypotheses."""
    path = Path(data_dir) / SPM_MODEL
    if not path.is_file():
        raise DataError(f"{path}: no such file (was the directory made by 'prepare wmt'?)")
    return spm.SentencePieceProcessor(model_file=str(path))
