"""The ``prepare`` subcommands, run through argparse exactly as the top-level CLI mounts them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from naspipe.cli import main
from naspipe.commands.prepare import add_parser as add_prepare_parser
from naspipe.commands.prepare import run as run_prepare
from naspipe.data import DataError, load_meta

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SAMPLE = SHARED / "fairseq-bin-multi30k-sample"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="naspipe")
    add_prepare_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_synthetic_pipeline_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, shards = tmp_path / "text", tmp_path / "bin"
    args = _parse(["prepare", "synthetic-translation", "--out", str(text), "--seed", "3", "--pairs", "300",
                   "--valid-pairs", "20", "--test-pairs", "10"])
    assert args.func is run_prepare and run_prepare(args) == 0
    assert main(["prepare", "wmt", "--src", str(text / "train.src"), "--tgt", str(text / "train.tgt"),
                 "--valid-src", str(text / "valid.src"), "--valid-tgt", str(text / "valid.tgt"),
                 "--test-src", str(text / "test.src"), "--test-tgt", str(text / "test.tgt"),
                 "--vocab-size", "120", "--out", str(shards)]) == 0
    meta = load_meta(shards)
    assert {name: s.lines for name, s in meta.splits.items()} == {"train": 300, "valid": 20, "test": 10}
    assert "wrote" in capsys.readouterr().out


def test_synthetic_images_and_imagenet(tmp_path: Path) -> None:
    assert main(["prepare", "synthetic-images", "--out", str(tmp_path / "tree"), "--seed", "1",
                 "--per-class", "2", "--val-per-class", "1", "--size", "16"]) == 0
    assert main(["prepare", "imagenet", "--root", str(tmp_path / "tree"), "--resize", "16", "--crop", "14",
                 "--out", str(tmp_path / "shards"), "--limit-per-class", "1"]) == 0
    assert np.load(tmp_path / "shards" / "train.images.npy").shape == (10, 3, 14, 14)


def test_fairseq_registration(tmp_path: Path) -> None:
    if not (SAMPLE / "dict.en.txt").is_file():
        pytest.skip(f"shared data sample not found at {SAMPLE}")
    assert main(["prepare", "fairseq", "--data", str(SAMPLE), "--out", str(tmp_path / "reg")]) == 0
    meta = json.loads((tmp_path / "reg" / "meta.json").read_text(encoding="utf-8"))
    assert meta["data_dir"] == str(SAMPLE.resolve()) and meta["splits"]["train"]["lines"] == 2000


def test_data_error_propagates_from_run_prepare(tmp_path: Path) -> None:
    args = _parse(["prepare", "wmt", "--src", str(tmp_path / "missing.en"), "--tgt", str(tmp_path / "missing.de"),
                   "--vocab-size", "100", "--out", str(tmp_path / "out")])
    with pytest.raises(DataError, match=r"missing\.en: no such file"):
        run_prepare(args)


def test_main_prints_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.en").write_text("x\ny\n", encoding="utf-8")
    (tmp_path / "a.de").write_text("x\n", encoding="utf-8")
    code = main(["prepare", "wmt", "--src", str(tmp_path / "a.en"), "--tgt", str(tmp_path / "a.de"),
                 "--vocab-size", "50", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("naspipe: error: train: line counts differ") and err.count("\n") == 1


def test_argument_validation(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _parse(["prepare", "synthetic-images", "--out", "x", "--per-class", "0"])
    assert info.value.code == 2 and "expected a positive integer, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse(["prepare"])
