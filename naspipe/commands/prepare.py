"""``naspipe prepare DATASET ...``: the dataset preparation sub-commands.

The top-level ``naspipe`` CLI (:mod:`naspipe.cli`) mounts these with :func:`add_parser` and
calls :func:`run`; the work itself is in :mod:`naspipe.data`. DataError (a UsageError)
propagates so that its one handler prints one ``naspipe: error: ...`` line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from naspipe.data.errors import DataError
from naspipe.data.fairseq_dir import prepare_fairseq
from naspipe.data.images import prepare_images
from naspipe.data.synthetic import make_synthetic_images, make_synthetic_translation
from naspipe.data.wmt import prepare_wmt


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``prepare {wmt,fairseq,imagenet,synthetic-translation,synthetic-images}``."""
    prepare = subparsers.add_parser("prepare", help="prepare datasets (tokenize, binarize, shard)")
    prepare.set_defaults(func=run)
    commands = prepare.add_subparsers(dest="prepare_command", metavar="DATASET", required=True)
    _add_wmt(commands)
    _add_fairseq(commands)
    _add_imagenet(commands)
    _add_synthetic_translation(commands)
    _add_synthetic_images(commands)
    return prepare


def _add_wmt(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("wmt", help="raw parallel text -> joint BPE -> fairseq-format shards")
    parser.add_argument("--src", type=Path, required=True, help="training source text (plain or .gz)")
    parser.add_argument("--tgt", type=Path, required=True, help="training target text (plain or .gz)")
    parser.add_argument("--valid-src", type=Path)
    parser.add_argument("--valid-tgt", type=Path)
    parser.add_argument("--test-src", type=Path)
    parser.add_argument("--test-tgt", type=Path)
    parser.add_argument("--vocab-size", type=_positive, required=True, help="joint BPE vocabulary size")
    parser.add_argument("--src-lang", help="source language code (default: from the file suffix)")
    parser.add_argument("--tgt-lang", help="target language code (default: from the file suffix)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--character-coverage", type=float, default=1.0)
    parser.add_argument("--out", type=Path, required=True)


def _add_fairseq(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("fairseq", help="validate a fairseq-preprocess directory and register it")
    parser.add_argument("--data", type=Path, required=True, help="directory made by fairseq-preprocess (mmap)")
    parser.add_argument("--src-lang")
    parser.add_argument("--tgt-lang")
    parser.add_argument("--out", type=Path, required=True, help="where meta.json is written (may equal --data)")


def _add_imagenet(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("imagenet", help="ImageFolder tree -> resized, centre-cropped uint8 shards")
    parser.add_argument("--root", type=Path, required=True, help="directory holding train/ and val/")
    parser.add_argument("--resize", type=_positive, default=256, help="shorter side after resize")
    parser.add_argument("--crop", type=_positive, default=224, help="centre crop size")
    parser.add_argument("--limit-per-class", type=_positive, help="use only the first K images per class")
    parser.add_argument("--workers", type=_positive, default=1, help="decoder processes")
    parser.add_argument("--out", type=Path, required=True)


def _add_synthetic_translation(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("synthetic-translation", help="seeded toy translation task (raw text)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", type=_positive, required=True, help="training pairs")
    parser.add_argument("--valid-pairs", type=_positive, default=500)
    parser.add_argument("--test-pairs", type=_positive, default=500)
    parser.add_argument("--out", type=Path, required=True)


def _add_synthetic_images(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("synthetic-images", help="seeded procedural images (ImageFolder PNG tree)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-class", type=_positive, required=True, help="training images per class")
    parser.add_argument("--val-per-class", type=_positive, help="validation images per class (default per-class/5)")
    parser.add_argument("--size", type=_positive, default=32, help="image side in pixels")
    parser.add_argument("--out", type=Path, required=True)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    """Run the chosen ``prepare`` command; print a one-line summary; return 0 (DataError propagates)."""
    handlers: dict[str, Callable[[argparse.Namespace], str]] = {
        "wmt": _run_wmt,
        "fairseq": _run_fairseq,
        "imagenet": _run_imagenet,
        "synthetic-translation": _run_synthetic_translation,
        "synthetic-images": _run_synthetic_images,
    }
    command = getattr(args, "prepare_command", None)
    if command not in handlers:
        raise DataError(f"prepare: unknown dataset {command!r} (choose from {', '.join(handlers)})")
    print(handlers[command](args))
    return 0


def _run_wmt(args: argparse.Namespace) -> str:
    meta = prepare_wmt(
        args.src,
        args.tgt,
        args.out,
        args.vocab_size,
        valid_src=args.valid_src,
        valid_tgt=args.valid_tgt,
        test_src=args.test_src,
        test_tgt=args.test_tgt,
        src_lang=args.src_lang,
        tgt_lang=args.tgt_lang,
        seed=args.seed,
        character_coverage=args.character_coverage,
    )
    return f"wrote {args.out}: {_split_summary(meta.splits)}, vocab {meta.src_vocab_size}"


def _run_fairseq(args: argparse.Namespace) -> str:
    meta = prepare_fairseq(args.data, args.out, args.src_lang, args.tgt_lang)
    return f"wrote {Path(args.out) / 'meta.json'}: {meta.src_lang}-{meta.tgt_lang}, {_split_summary(meta.splits)}"


def _run_imagenet(args: argparse.Namespace) -> str:
    meta = prepare_images(
        args.root, args.out, args.resize, args.crop, limit_per_class=args.limit_per_class, workers=args.workers
    )
    counts = ", ".join(f"{name} {entry['count']}" for name, entry in meta["splits"].items())
    return f"wrote {args.out}: {meta['num_classes']} classes, {counts} images of {args.crop}x{args.crop}"


def _run_synthetic_translation(args: argparse.Namespace) -> str:
    make_synthetic_translation(args.out, args.seed, args.pairs, args.valid_pairs, args.test_pairs)
    return f"wrote {args.out}: train/valid/test .src/.tgt ({args.pairs}/{args.valid_pairs}/{args.test_pairs} pairs)"


def _run_synthetic_images(args: argparse.Namespace) -> str:
    meta = make_synthetic_images(args.out, args.seed, args.per_class, args.size, args.val_per_class)
    return f"wrote {args.out}: {len(meta['classes'])} classes, per class {meta['per_class']}"


def _split_summary(splits: dict) -> str:  # dict[str, SplitFiles]
    return ", ".join(f"{name} {files.lines} pairs" for name, files in sorted(splits.items()))

