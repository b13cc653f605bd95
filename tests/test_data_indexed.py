"""fairseq mmap indexed dataset reader/writer and Dictionary, checked against real fairseq output."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.data import DataError, Dictionary, IndexedDataset, IndexedDatasetWriter, write_indexed_dataset
from naspipe.data.indexed import MAGIC, data_path, index_path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SAMPLE = SHARED / "fairseq-bin-multi30k-sample"


@pytest.fixture(scope="module")
def sample() -> Path:
    if not (SAMPLE / "dict.en.txt").is_file():
        pytest.skip(f"shared data sample not found at {SAMPLE}")
    return SAMPLE


def _raw_lines(sample: Path, split: str, lang: str) -> list[str]:
    return (sample / "raw" / f"{split}.{lang}").read_text(encoding="utf-8").split("\n")[:-1]


# ------------------------------------------------------------------ real fairseq data


@pytest.mark.parametrize("split", ["train", "valid"])
@pytest.mark.parametrize("lang", ["en", "de"])
def test_decoded_ids_give_back_raw_tokens(sample: Path, split: str, lang: str) -> None:
    dictionary = Dictionary.load(sample / f"dict.{lang}.txt")
    dataset = IndexedDataset(sample / f"{split}.en-de.{lang}")
    lines = _raw_lines(sample, split, lang)
    assert len(dataset) == len(lines) == (2000 if split == "train" else 200)
    assert dataset.dtype == np.uint16
    unknown = 0
    for i, line in enumerate(lines):
        ids = dataset[i]
        assert ids[-1] == dictionary.eos() == 2
        expected = [word if word in dictionary else "<unk>" for word in line.split()]
        unknown += expected.count("<unk>")
        assert [dictionary[int(t)] for t in ids[:-1]] == expected, f"line {i + 1}"
        assert dictionary.string(ids) == " ".join(expected)
        assert np.array_equal(ids, dictionary.encode_line(line))
    assert dataset.sizes.tolist() == [len(line.split()) + 1 for line in lines]
    if split == "train":
        assert unknown == 0  # the joined dictionary was built from train


def test_valid_has_out_of_dictionary_tokens(sample: Path) -> None:
    """The sample exercises the <unk> path: some valid words are not in the train dictionary."""
    dictionary = Dictionary.load(sample / "dict.en.txt")
    dataset = IndexedDataset(sample / "valid.en-de.en")
    assert sum(int((dataset[i] == dictionary.unk()).sum()) for i in range(len(dataset))) > 0


def test_dictionary_layout(sample: Path) -> None:
    dictionary = Dictionary.load(sample / "dict.en.txt")
    lines = (sample / "dict.en.txt").read_text(encoding="utf-8").splitlines()
    assert len(dictionary) == len(lines) + 4 == 6008
    assert [dictionary[i] for i in range(4)] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert (dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()) == (0, 1, 2, 3)
    assert dictionary[4] == lines[0].split()[0] == "."
    assert dictionary.index(".") == 4
    assert dictionary.index("no-such-word-xyz") == 3
    assert dictionary.counts[4] == 3853
    assert Dictionary.load(sample / "dict.de.txt") == dictionary  # --joined-dictionary


def test_rewriting_sample_is_byte_identical(sample: Path, tmp_path: Path) -> None:
    """Our writer reproduces fairseq-preprocess's .idx/.bin bytes exactly."""
    original = IndexedDataset(sample / "train.en-de.de")
    prefix = write_indexed_dataset(tmp_path / "copy", iter(original), dtype=np.uint16)
    assert index_path(prefix).read_bytes() == (sample / "train.en-de.de.idx").read_bytes()
    assert data_path(prefix).read_bytes() == (sample / "train.en-de.de.bin").read_bytes()


# ------------------------------------------------------------------ writer round trip


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int32, np.int64])
def test_writer_round_trip(tmp_path: Path, dtype: type) -> None:
    rng = np.random.default_rng(0)
    sequences = [rng.integers(0, 100, size=int(n)) for n in rng.integers(0, 20, size=50)]
    sequences[3] = np.zeros(0, dtype=np.int64)
    write_indexed_dataset(tmp_path / "x", sequences, dtype=dtype)
    dataset = IndexedDataset(tmp_path / "x")
    assert len(dataset) == 50
    assert dataset.dtype == np.dtype(dtype)
    assert dataset.sizes.tolist() == [len(s) for s in sequences]
    assert all(np.array_equal(dataset[i], s) for i, s in enumerate(sequences))
    assert np.array_equal(dataset[-1], sequences[-1])
    assert dataset.num_tokens == sum(len(s) for s in sequences)
    with pytest.raises(IndexError):
        dataset[50]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 65535), max_size=12), max_size=12))
def test_writer_round_trip_property(tmp_path_factory: pytest.TempPathFactory, sequences: list[list[int]]) -> None:
    prefix = tmp_path_factory.mktemp("prop") / "p"
    write_indexed_dataset(prefix, sequences, dtype=np.uint16)
    dataset = IndexedDataset(prefix)
    assert [dataset[i].tolist() for i in range(len(dataset))] == sequences


def test_empty_dataset(tmp_path: Path) -> None:
    write_indexed_dataset(tmp_path / "e", [])
    dataset = IndexedDataset(tmp_path / "e")
    assert len(dataset) == 0 and dataset.num_tokens == 0 and dataset.max_token() == -1


def test_prefix_may_carry_extension(tmp_path: Path) -> None:
    write_indexed_dataset(tmp_path / "a.b.c", [[1, 2]])
    assert IndexedDataset(tmp_path / "a.b.c.idx")[0].tolist() == [1, 2]


def test_writer_is_atomic_on_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with IndexedDatasetWriter(tmp_path / "w", np.uint16) as writer:
            writer.add([1, 2, 3])
            raise RuntimeError("crash")
    assert list(tmp_path.iterdir()) == []


def test_writer_rejects_out_of_range(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"sequence 1 has value outside uint16"):
        write_indexed_dataset(tmp_path / "w", [[1], [70000]], dtype=np.uint16)
    assert list(tmp_path.iterdir()) == []


def test_reads_megatron_variant(tmp_path: Path) -> None:
    """Megatron-LM adds a document index; the reader accepts it too."""
    sizes = np.array([2, 3], dtype=np.int32)
    pointers = np.array([0, 4], dtype=np.int64)
    doc_idx = np.array([0, 1, 2], dtype=np.int64)
    header = MAGIC + struct.pack("<QBQQ", 1, 8, 2, 3)
    (tmp_path / "m.idx").write_bytes(header + sizes.tobytes() + pointers.tobytes() + doc_idx.tobytes())
    (tmp_path / "m.bin").write_bytes(np.array([5, 6, 7, 8, 9], dtype=np.uint16).tobytes())
    dataset = IndexedDataset(tmp_path / "m")
    assert [dataset[0].tolist(), dataset[1].tolist()] == [[5, 6], [7, 8, 9]]


# ------------------------------------------------------------------ errors name the file


def _good(tmp_path: Path) -> Path:
    return write_indexed_dataset(tmp_path / "g", [[1, 2], [3]], dtype=np.uint16)


def test_bad_magic(tmp_path: Path) -> None:
    prefix = _good(tmp_path)
    data = bytearray(index_path(prefix).read_bytes())
    data[:3] = b"XXX"
    index_path(prefix).write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"g\.idx: bad magic"):
        IndexedDataset(prefix)


def test_bad_version_and_dtype(tmp_path: Path) -> None:
    prefix = _good(tmp_path)
    data = index_path(prefix).read_bytes()
    index_path(prefix).write_bytes(data[:9] + struct.pack("<Q", 2) + data[17:])
    with pytest.raises(DataError, match=r"g\.idx: unsupported index version 2"):
        IndexedDataset(prefix)
    index_path(prefix).write_bytes(data[:17] + bytes([42]) + data[18:])
    with pytest.raises(DataError, match=r"g\.idx: unknown dtype code 42"):
        IndexedDataset(prefix)


def test_truncated_index(tmp_path: Path) -> None:
    prefix = _good(tmp_path)
    index_path(prefix).write_bytes(index_path(prefix).read_bytes()[:-4])
    with pytest.raises(DataError, match=r"g\.idx: index is \d+ bytes but header says 2 sequences"):
        IndexedDataset(prefix)
    index_path(prefix).write_bytes(MAGIC)
    with pytest.raises(DataError, match=r"g\.idx: truncated index header"):
        IndexedDataset(prefix)


def test_bin_size_mismatch(tmp_path: Path) -> None:
    prefix = _good(tmp_path)
    data_path(prefix).write_bytes(data_path(prefix).read_bytes() + b"\0\0")
    with pytest.raises(DataError, match=r"g\.bin: data file is 8 bytes, index expects 6"):
        IndexedDataset(prefix)


def test_missing_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.idx: no such file"):
        IndexedDataset(tmp_path / "nope")


# ------------------------------------------------------------------ Dictionary edge cases


def test_dictionary_file_rules(tmp_path: Path) -> None:
    path = tmp_path / "dict.txt"
    path.write_text("hello 5\nworld 3\nhello 1 #fairseq:overwrite\nmulti word 2\n", encoding="utf-8")
    dictionary = Dictionary.load(path)
    assert len(dictionary) == 8
    assert dictionary.index("hello") == 6  # overwrite re-adds at a new id, like fairseq
    assert dictionary.index("multi word") == 7
    assert dictionary.string([4, 5, 1, 0, 2, 5]) == "hello world"  # drops <pad>/<s>, stops at </s>
    assert dictionary.string([4, 3, 999]) == "hello <unk> <unk>"
    assert dictionary.string(np.array([[5, 2]])) == "world"


def test_dictionary_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "dict.txt"
    path.write_text("a 1\nb\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"dict\.txt:2: expected '<token> <count>', got 'b'"):
        Dictionary.load(path)
    path.write_text("a 1\nb x\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"dict\.txt:2: expected"):
        Dictionary.load(path)
    path.write_text("a 1\nb 2\na 3\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"dict\.txt:3: duplicate token 'a'"):
        Dictionary.load(path)


def test_dictionary_save_round_trip(tmp_path: Path) -> None:
    dictionary = Dictionary.from_symbols(["▁a", "b", "ü"], [3, 2, 1])
    dictionary.save(tmp_path / "d.txt")
    assert (tmp_path / "d.txt").read_text(encoding="utf-8") == "▁a 3\nb 2\nü 1\n"
    assert Dictionary.load(tmp_path / "d.txt") == dictionary
