"""Raw parallel text -> joint BPE -> fairseq shards, and registering fairseq directories."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from naspipe.data import (
    DataError,
    Dictionary,
    IndexedDataset,
    inspect_fairseq_dir,
    load_meta,
    load_tokenizer,
    prepare_fairseq,
    prepare_wmt,
    write_indexed_dataset,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MULTI30K = SHARED / "multi30k"
SAMPLE = SHARED / "fairseq-bin-multi30k-sample"
LINES = 2000


def _head(path: Path, count: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as handle:
        return [line.rstrip("\n") for line in itertools.islice(handle, count)]


def _read(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="\n") as handle:
        return handle.read()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """First 2000 train / 200 val pairs of Multi30k; source plain text, target gzip."""
    if not (MULTI30K / "train.en.gz").is_file():
        pytest.skip(f"shared data not found at {MULTI30K}")
    root = tmp_path_factory.mktemp("multi30k")
    files = {}
    for split, source, count in (("train", "train", LINES), ("valid", "val", 200)):
        en, de = _head(MULTI30K / f"{source}.en.gz", count), _head(MULTI30K / f"{source}.de.gz", count)
        files[f"{split}_src"] = root / f"{split}.en"
        files[f"{split}_src"].write_text("".join(line + "\n" for line in en), encoding="utf-8")
        files[f"{split}_tgt"] = root / f"{split}.de.gz"
        with gzip.open(files[f"{split}_tgt"], "wt", encoding="utf-8", newline="\n") as handle:
            handle.writelines(line + "\n" for line in de)
    return files


@pytest.fixture(scope="module")
def prepared(corpus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prepared") / "wmt"
    prepare_wmt(
        corpus["train_src"], corpus["train_tgt"], out, 1000,
        valid_src=corpus["valid_src"], valid_tgt=corpus["valid_tgt"],
    )
    return out


def test_output_layout_and_meta(prepared: Path, corpus: dict[str, Path]) -> None:
    names = {p.name for p in prepared.iterdir()}
    for split in ("train", "valid"):
        for lang in ("en", "de"):
            assert {f"{split}.en-de.{lang}.bin", f"{split}.en-de.{lang}.idx"} <= names
    assert {"spm.model", "dict.txt", "dict.en.txt", "dict.de.txt", "meta.json"} <= names
    raw = json.loads((prepared / "meta.json").read_text(encoding="utf-8"))
    assert (raw["vocab_size"], raw["pad"], raw["bos"], raw["eos"], raw["unk"]) == (1000, 1, 0, 2, 3)
    assert raw["splits"]["train"]["lines"] == LINES and raw["splits"]["valid"]["lines"] == 200
    assert raw["sources"]["train"]["src"]["path"] == str(corpus["train_src"].resolve())
    assert len(raw["sources"]["valid"]["tgt"]["sha256"]) == 64
    meta = load_meta(prepared)
    assert (meta.src_lang, meta.tgt_lang, meta.data_dir) == ("en", "de", prepared)


def test_shards_decode_to_original_text(prepared: Path, corpus: dict[str, Path]) -> None:
    processor = load_tokenizer(prepared)
    meta = load_meta(prepared)
    for split in ("train", "valid"):
        src_prefix, tgt_prefix = meta.prefixes(split)
        for prefix, path in ((src_prefix, corpus[f"{split}_src"]), (tgt_prefix, corpus[f"{split}_tgt"])):
            dataset = IndexedDataset(prefix)
            lines = _read(path).split("\n")[:-1]
            assert len(dataset) == len(lines)
            for i, line in enumerate(lines):
                ids = dataset[i]
                assert ids[-1] == meta.eos
                assert processor.decode(ids[:-1].tolist()) == processor.normalize(line).replace("▁", " ").strip()


def test_dictionary_ids_equal_sentencepiece_ids(prepared: Path) -> None:
    processor = load_tokenizer(prepared)
    dictionary = Dictionary.load(prepared / "dict.txt")
    assert len(dictionary) == processor.get_piece_size() == 1000
    assert [dictionary[i] for i in range(1000)] == [processor.id_to_piece(i) for i in range(1000)]
    assert Dictionary.load(prepared / "dict.en.txt") == dictionary == Dictionary.load(prepared / "dict.de.txt")
    train = IndexedDataset(prepared / "train.en-de.en")
    text = dictionary.string(train[0]).replace(" ", "").replace("▁", " ").strip()
    assert text == processor.decode(train[0][:-1].tolist())
    assert sum(dictionary.counts[4:]) > 0


def test_deterministic(prepared: Path, corpus: dict[str, Path], tmp_path: Path) -> None:
    again = tmp_path / "again"
    prepare_wmt(
        corpus["train_src"], corpus["train_tgt"], again, 1000,
        valid_src=corpus["valid_src"], valid_tgt=corpus["valid_tgt"],
    )
    for path in prepared.iterdir():
        assert (again / path.name).read_bytes() == path.read_bytes(), path.name


def test_replaces_previous_output(prepared: Path, corpus: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    prepare_wmt(corpus["valid_src"], corpus["valid_tgt"], out, 300)
    prepare_wmt(corpus["valid_src"], corpus["valid_tgt"], out, 200)
    assert load_meta(out).src_vocab_size == 200
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temp dirs left behind


# ------------------------------------------------------------------ errors


def test_mismatched_line_counts_name_both_files(corpus: dict[str, Path], tmp_path: Path) -> None:
    short = tmp_path / "short.de"
    short.write_text("eins\nzwei\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.en has 2000 lines, .*short\.de has 2"):
        prepare_wmt(corpus["train_src"], short, tmp_path / "out", 500)
    assert not (tmp_path / "out").exists()


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "a.en").write_text("hello\n", encoding="utf-8")
    (tmp_path / "a.de").write_bytes(b"")
    with pytest.raises(DataError, match=r"a\.de: empty file"):
        prepare_wmt(tmp_path / "a.en", tmp_path / "a.de", tmp_path / "out", 100)


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n", encoding="utf-8")
    with gzip.open(tmp_path / "a.de.gz", "wb") as handle:
        handle.write(b"eins\nzwei\ndr\xffei\n")
    with pytest.raises(DataError, match=r"a\.de\.gz:3: invalid UTF-8"):
        prepare_wmt(tmp_path / "a.en", tmp_path / "a.de.gz", tmp_path / "out", 100)


def test_line_split_only_on_newline(tmp_path: Path) -> None:
    """U+2028 inside a sentence must not split it (that would misalign the corpus)."""
    (tmp_path / "a.en").write_text("a\u2028b\nc\n", encoding="utf-8")
    (tmp_path / "a.de").write_text("x\ny\n", encoding="utf-8")
    meta = prepare_wmt(tmp_path / "a.en", tmp_path / "a.de", tmp_path / "out", 12)
    assert meta.splits["train"].lines == 2


def test_vocab_too_large_leaves_nothing(corpus: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"SentencePiece training failed \(vocab_size=100000\)"):
        prepare_wmt(corpus["valid_src"], corpus["valid_tgt"], tmp_path / "out", 100000)
    assert list(tmp_path.iterdir()) == []


def test_valid_pair_must_be_complete(corpus: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"valid: give both source and target files"):
        prepare_wmt(corpus["train_src"], corpus["train_tgt"], tmp_path / "o", 500, valid_src=corpus["valid_src"])


def test_refuses_to_replace_foreign_directory(corpus: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious", encoding="utf-8")
    with pytest.raises(DataError, match=r"mine: refusing to replace a non-empty directory"):
        prepare_wmt(corpus["valid_src"], corpus["valid_tgt"], tmp_path / "mine", 200)
    assert (tmp_path / "mine" / "notes.txt").read_text(encoding="utf-8") == "precious"


# ------------------------------------------------------------------ fairseq directories


@pytest.fixture(scope="module")
def sample() -> Path:
    if not (SAMPLE / "dict.en.txt").is_file():
        pytest.skip(f"shared data sample not found at {SAMPLE}")
    return SAMPLE


def test_prepare_fairseq_points_at_data(sample: Path, tmp_path: Path) -> None:
    meta = prepare_fairseq(sample, tmp_path / "reg")
    assert (meta.src_lang, meta.tgt_lang, meta.src_vocab_size) == ("en", "de", 6008)
    assert {name: s.lines for name, s in meta.splits.items()} == {"train": 2000, "valid": 200}
    loaded = load_meta(tmp_path / "reg")
    assert loaded.data_dir == sample.resolve()
    assert loaded.prefixes("valid")[1] == sample.resolve() / "valid.en-de.de"
    assert loaded.src_dict == loaded.tgt_dict == "dict.en.txt"
    assert set(loaded.extra["files"]) >= {"train.en-de.en.bin", "dict.en.txt"}
    with pytest.raises(DataError, match=r"no split 'test' \(available: train, valid\)"):
        loaded.prefixes("test")


def _fake_fairseq(root: Path, src_lines: int, tgt_lines: int, top: int = 5) -> Path:
    root.mkdir()
    for lang in ("xx", "yy"):
        (root / f"dict.{lang}.txt").write_text("a 1\nb 1\n", encoding="utf-8")
    write_indexed_dataset(root / "train.xx-yy.xx", [[4, 2]] * src_lines)
    write_indexed_dataset(root / "train.xx-yy.yy", [[top, 2]] * tgt_lines)
    return root


def test_fairseq_errors(tmp_path: Path) -> None:
    good = _fake_fairseq(tmp_path / "good", 3, 3)
    assert inspect_fairseq_dir(good).splits["train"].lines == 3
    mismatched = _fake_fairseq(tmp_path / "mismatch", 3, 2)
    with pytest.raises(DataError, match=r"train\.xx-yy\.xx has 3 sequences but train\.xx-yy\.yy has 2"):
        inspect_fairseq_dir(mismatched)
    out_of_range = _fake_fairseq(tmp_path / "range", 1, 1, top=6)
    with pytest.raises(DataError, match=r"train\.xx-yy\.yy\.idx: token id 6 out of range for a dictionary of 6"):
        inspect_fairseq_dir(out_of_range)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: no fairseq shards"):
        inspect_fairseq_dir(tmp_path / "empty")


def test_meta_errors_name_field(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({"kind": "translation", "data_dir": "."}), encoding="utf-8")
    with pytest.raises(DataError, match=r"meta\.json: missing field 'src_lang'"):
        load_meta(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"kind": "images"}), encoding="utf-8")
    with pytest.raises(DataError, match=r"meta\.json: field 'kind' is 'images', expected 'translation'"):
        load_meta(tmp_path)
    (tmp_path / "meta.json").write_text("{", encoding="utf-8")
    with pytest.raises(DataError, match=r"meta\.json: not valid JSON"):
        load_meta(tmp_path)
