"""Seeded synthetic datasets for machines without real data.

Both generators write *raw* files (parallel text; an ImageFolder tree of PNGs)
so they travel through exactly the same preparation code as WMT and ImageNet;
nothing is downloaded.  Every byte is a pure function of the seed: each
sentence/image draws from its own generator keyed by (seed, split, index), and
outputs are written atomically.

Translation task: a small random lexicon and grammar.  The target is not a
word-for-word copy, so BLEU measures learning: words map through a fixed
bilingual lexicon, adjectives follow their noun, the verb moves to the end of
the clause (before an optional prepositional phrase), and the determiner's
form agrees with the gender of its noun, which may be two words away.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from naspipe.fsutil import atomic_write_json
from naspipe.seeding import rng_for

from .errors import DataError
from .output_dir import atomic_output_dir, check_replaceable

SRC_LANG, TGT_LANG = "src", "tgt"
_SRC_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "du", "fi")
_TGT_SYLLABLES = ("ber", "dak", "gol", "hin", "jus", "mor", "nek", "pol", "rast", "tov", "wel", "zim")
_WORD_CLASSES = {"noun": 48, "adj": 16, "verb": 24, "prep": 6}
_DETERMINERS = 3


@dataclass(frozen=True)
class Lexicon:
    """Source words per class and their translations (determiners have two genders)."""

    src: dict[str, list[str]]
    tgt: dict[str, list[str]]
    tgt_det: list[tuple[str, str]]
    gender: list[int]


def make_lexicon(seed: int) -> Lexicon:
    """Random but seed-determined vocabularies for both languages."""
    rng = rng_for(seed, "lexicon")
    sizes = {"det": _DETERMINERS, **_WORD_CLASSES}
    total = sum(sizes.values())
    src_words = _pseudo_words(rng, _SRC_SYLLABLES, total)
    tgt_words = _pseudo_words(rng, _TGT_SYLLABLES, total + _DETERMINERS)
    src: dict[str, list[str]] = {}
    tgt: dict[str, list[str]] = {}
    start = 0
    for word_class, size in sizes.items():
        src[word_class] = src_words[start : start + size]
        tgt[word_class] = tgt_words[start : start + size]
        start += size
    extra = tgt_words[total:]
    tgt_det = [(tgt["det"][i], extra[i]) for i in range(_DETERMINERS)]
    gender = rng.integers(0, 2, size=sizes["noun"]).tolist()
    return Lexicon(src=src, tgt=tgt, tgt_det=tgt_det, gender=gender)


def _pseudo_words(rng: np.random.Generator, syllables: tuple[str, ...], count: int) -> list[str]:
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < count:
        length = int(rng.integers(2, 4))
        word = "".join(syllables[int(i)] for i in rng.integers(0, len(syllables), size=length))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def _noun_phrase(rng: np.random.Generator) -> tuple[int, list[int], int]:
    """(determiner, adjectives, noun) indices; 0-2 adjectives."""
    det = int(rng.integers(0, _DETERMINERS))
    adjectives = rng.integers(0, _WORD_CLASSES["adj"], size=int(rng.integers(0, 3))).tolist()
    return det, adjectives, int(rng.integers(0, _WORD_CLASSES["noun"]))


def make_pair(lexicon: Lexicon, rng: np.random.Generator) -> tuple[str, str]:
    """One (source, target) sentence pair: S = NP V NP [P NP] ."""
    subject, obj = _noun_phrase(rng), _noun_phrase(rng)
    verb = int(rng.integers(0, _WORD_CLASSES["verb"]))
    pp = None
    if rng.random() < 0.5:
        pp = (int(rng.integers(0, _WORD_CLASSES["prep"])), _noun_phrase(rng))
    src = _src_np(lexicon, subject) + [lexicon.src["verb"][verb]] + _src_np(lexicon, obj)
    tgt = _tgt_np(lexicon, subject) + _tgt_np(lexicon, obj) + [lexicon.tgt["verb"][verb]]
    if pp is not None:
        src += [lexicon.src["prep"][pp[0]]] + _src_np(lexicon, pp[1])
        tgt += [lexicon.tgt["prep"][pp[0]]] + _tgt_np(lexicon, pp[1])
    return " ".join(src) + ".", " ".join(tgt) + "."  # detokenized: the period is attached


def _src_np(lexicon: Lexicon, phrase: tuple[int, list[int], int]) -> list[str]:
    det, adjectives, noun = phrase
    return [lexicon.src["det"][det], *(lexicon.src["adj"][a] for a in adjectives), lexicon.src["noun"][noun]]


def _tgt_np(lexicon: Lexicon, phrase: tuple[int, list[int], int]) -> list[str]:
    det, adjectives, noun = phrase
    article = lexicon.tgt_det[det][lexicon.gender[noun]]
    return [article, lexicon.tgt["noun"][noun], *(lexicon.tgt["adj"][a] for a in adjectives)]


def make_synthetic_translation(
    out_dir: Path | str, seed: int, train_pairs: int, valid_pairs: int = 500, test_pairs: int = 500
) -> dict[str, Any]:
    """Write ``{train,valid,test}.{src,tgt}`` parallel text plus ``meta.json``; return the meta."""
    counts = {"train": train_pairs, "valid": valid_pairs, "test": test_pairs}
    for split, count in counts.items():
        if count < 1:
            raise DataError(f"{split} pairs must be positive, got {count}")
    check_replaceable(out_dir)
    lexicon = make_lexicon(seed)
    with atomic_output_dir(out_dir) as tmp:
        for split, count in counts.items():
            pairs = [make_pair(lexicon, rng_for(seed, "translation", split, i)) for i in range(count)]
            for lang, column in ((SRC_LANG, 0), (TGT_LANG, 1)):
                text = "".join(pair[column] + "\n" for pair in pairs)
                (tmp / f"{split}.{lang}").write_bytes(text.encode("utf-8"))
        meta = {"kind": "synthetic-translation", "seed": seed, "pairs": counts, "langs": [SRC_LANG, TGT_LANG]}
        atomic_write_json(tmp / "meta.json", meta)
    return meta


# --------------------------------------------------------------------------- images


def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    coords = (np.arange(size, dtype=np.float64) + 0.5) / size
    return np.meshgrid(coords, coords, indexing="xy")


def _disc(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cx, cy, r = rng.uniform(0.35, 0.65), rng.uniform(0.35, 0.65), rng.uniform(0.18, 0.3)
    return (x - cx) ** 2 + (y - cy) ** 2 < r**2


def _ring(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cx, cy, r = rng.uniform(0.4, 0.6), rng.uniform(0.4, 0.6), rng.uniform(0.22, 0.32)
    d = np.sqrt((x - cx) ** 2 + (y - cy) ** 2)
    return np.abs(d - r) < 0.06


def _square(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cx, cy, h = rng.uniform(0.35, 0.65), rng.uniform(0.35, 0.65), rng.uniform(0.15, 0.28)
    return (np.abs(x - cx) < h) & (np.abs(y - cy) < h)


def _triangle(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cx, cy, h = rng.uniform(0.4, 0.6), rng.uniform(0.4, 0.6), rng.uniform(0.25, 0.38)
    top = cy - h
    inside = (y > top) & (y < cy + h)
    return inside & (np.abs(x - cx) < (y - top) / 2)


def _cross(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cx, cy, w = rng.uniform(0.4, 0.6), rng.uniform(0.4, 0.6), rng.uniform(0.06, 0.1)
    arm = rng.uniform(0.25, 0.4)
    return ((np.abs(x - cx) < w) & (np.abs(y - cy) < arm)) | ((np.abs(y - cy) < w) & (np.abs(x - cx) < arm))


def _grating(angle: float) -> Callable[[np.ndarray, np.ndarray, np.random.Generator], np.ndarray]:
    def draw(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        theta = np.deg2rad(angle + rng.uniform(-10, 10))
        freq, phase = rng.uniform(3, 5), rng.uniform(0, 2 * np.pi)
        return np.sin(2 * np.pi * freq * (x * np.cos(theta) + y * np.sin(theta)) + phase) > 0

    return draw


def _checker(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    freq = rng.uniform(2.5, 4)
    px, py = rng.uniform(0, 1, size=2)
    return (np.floor(x * freq + px) + np.floor(y * freq + py)) % 2 == 0


def _dots(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    mask = np.zeros_like(x, dtype=bool)
    for _ in range(int(rng.integers(5, 9))):
        cx, cy = rng.uniform(0.1, 0.9, size=2)
        mask |= (x - cx) ** 2 + (y - cy) ** 2 < 0.06**2
    return mask


SHAPES: dict[str, Callable[[np.ndarray, np.ndarray, np.random.Generator], np.ndarray]] = {
    "checker": _checker,
    "circle": _disc,
    "cross": _cross,
    "diagonal": _grating(45.0),
    "dots": _dots,
    "horizontal": _grating(90.0),
    "ring": _ring,
    "square": _square,
    "triangle": _triangle,
    "vertical": _grating(0.0),
}


def render_image(shape: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """(size, size, 3) uint8 image of ``shape`` with random colours and Gaussian noise."""
    x, y = _grid(size)
    mask = SHAPES[shape](x, y, rng)
    background, foreground = rng.uniform(0, 255, size=3), rng.uniform(0, 255, size=3)
    while np.abs(foreground - background).sum() < 150:  # keep the shape visible
        foreground = rng.uniform(0, 255, size=3)
    image = np.where(mask[..., None], foreground, background)
    image += rng.normal(0.0, 12.0, size=image.shape)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def make_synthetic_images(
    out_dir: Path | str, seed: int, per_class: int, size: int = 32, val_per_class: int | None = None
) -> dict[str, Any]:
    """Write ``train/<class>/NNNNN.png`` and ``val/<class>/...`` plus ``meta.json``; return the meta."""
    val_count = max(1, per_class // 5) if val_per_class is None else val_per_class
    if per_class < 1 or val_count < 1:
        raise DataError(f"images per class must be positive, got train={per_class} val={val_count}")
    if size < 8:
        raise DataError(f"image size must be at least 8 pixels, got {size}")
    check_replaceable(out_dir)
    counts = {"train": per_class, "val": val_count}
    with atomic_output_dir(out_dir) as tmp:
        for split, count in counts.items():
            for shape in SHAPES:
                _write_class(tmp / split / shape, seed, split, shape, count, size)
        meta = {"kind": "synthetic-images", "seed": seed, "size": size, "per_class": counts, "classes": sorted(SHAPES)}
        atomic_write_json(tmp / "meta.json", meta)
    return meta


def _write_class(class_dir: Path, seed: int, split: str, shape: str, count: int, size: int) -> None:
    class_dir.mkdir(parents=True)
    for index in range(count):
        pixels = render_image(shape, size, rng_for(seed, "image", split, shape, index))
        Image.fromarray(pixels).save(class_dir / f"{index:05d}.png", format="PNG")
