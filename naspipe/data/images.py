"""ImageFolder tree -> fixed-size uint8 shards (the ImageNet preparation path).

Decoding and resizing JPEGs during training costs CPU time that varies run to
run; doing it once, here, makes every epoch read identical bytes.  The
transform is torchvision's evaluation pipeline on its PIL backend
(``Resize(resize)`` bilinear on the shorter side, then ``CenterCrop(crop)``),
reimplemented on Pillow because torchvision is not importable here.

Output (``N`` images of ``crop x crop``)::

    {split}.images.npy   uint8  (N, 3, crop, crop)
    {split}.labels.npy   int64  (N,)
    classes.json         class names; label i is classes[i]
    meta.json
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from naspipe.fsutil import atomic_write_json

from .errors import DataError
from .output_dir import atomic_output_dir, check_replaceable
from .progress import progress

# torchvision.datasets.folder.IMG_EXTENSIONS, matched case-insensitively as torchvision does.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
KIND = "images"
_SHOW_BAD = 5


@dataclass(frozen=True)
class Sample:
    """One image file and its class index."""

    path: Path
    label: int


def find_classes(split_dir: Path | str) -> list[str]:
    """Sorted subdirectory names, as torchvision's ``ImageFolder.find_classes``."""
    split_dir = Path(split_dir)
    if not split_dir.is_dir():
        raise DataError(f"{split_dir}: no such directory")
    classes = sorted(entry.name for entry in os.scandir(split_dir) if entry.is_dir())
    if not classes:
        raise DataError(f"{split_dir}: no class subdirectories")
    return classes


def list_samples(split_dir: Path | str, classes: Sequence[str], limit_per_class: int | None = None) -> list[Sample]:
    """Files in torchvision's ``make_dataset`` order, at most ``limit_per_class`` per class."""
    split_dir = Path(split_dir)
    samples: list[Sample] = []
    for label, name in enumerate(classes):
        files = list(_class_files(split_dir / name))
        if not files:
            raise DataError(f"{split_dir / name}: no image files ({', '.join(IMG_EXTENSIONS)})")
        samples.extend(Sample(path, label) for path in files[:limit_per_class])
    return samples


def _class_files(class_dir: Path) -> Iterator[Path]:
    if not class_dir.is_dir():
        raise DataError(f"{class_dir}: class directory missing (classes come from the train split)")
    for root, _, names in sorted(os.walk(class_dir, followlinks=True)):
        for name in sorted(names):
            if name.lower().endswith(IMG_EXTENSIONS):
                yield Path(root) / name


def load_image(path: Path | str, resize: int, crop: int) -> np.ndarray:
    """Decode to RGB, resize the shorter side to ``resize`` (bilinear), centre-crop; (3, crop, crop) uint8."""
    with open(path, "rb") as handle:
        image = Image.open(handle).convert("RGB")
    image = _resize_shorter(image, resize)
    return np.asarray(_center_crop(image, crop), dtype=np.uint8).transpose(2, 0, 1).copy()


def _resize_shorter(image: Image.Image, size: int) -> Image.Image:
    """torchvision ``Resize(int)``: shorter side -> size, longer side truncated proportionally."""
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    new_size = (new_short, new_long) if width <= height else (new_long, new_short)
    if new_size == image.size:
        return image
    return image.resize(new_size, Image.Resampling.BILINEAR)


def _center_crop(image: Image.Image, crop: int) -> Image.Image:
    """torchvision ``CenterCrop(int)`` (offsets rounded as ``int(round((h - c) / 2))``)."""
    width, height = image.size
    top = int(round((height - crop) / 2.0))
    left = int(round((width - crop) / 2.0))
    return image.crop((left, top, left + crop, top + crop))


def prepare_images(
    root: Path | str,
    out_dir: Path | str,
    resize: int = 256,
    crop: int = 224,
    *,
    limit_per_class: int | None = None,
    splits: Sequence[str] = ("train", "val"),
    workers: int = 1,
) -> dict[str, Any]:
    """Convert ``root/{split}/<class>/*`` into shards in ``out_dir``; return the meta dict.

    Every unreadable image is collected and reported in one DataError; no
    image is ever dropped silently, because a dataset that quietly shrinks
    changes the experiment.
    """
    _check_sizes(resize, crop, limit_per_class, workers)
    check_replaceable(out_dir)
    root = Path(root)
    classes = find_classes(root / splits[0])
    _check_same_classes(root, splits, classes)
    plan = {split: list_samples(root / split, classes, limit_per_class) for split in splits}
    bad: list[str] = []
    with atomic_output_dir(out_dir) as tmp:
        for split, samples in plan.items():
            bad += _write_split(tmp, split, samples, resize, crop, workers)
        if bad:
            raise DataError(_bad_message(root, bad))
        meta = _meta(root, classes, plan, resize, crop, limit_per_class)
        atomic_write_json(tmp / "classes.json", classes)
        atomic_write_json(tmp / "meta.json", meta)
    return meta


def _check_sizes(resize: int, crop: int, limit: int | None, workers: int) -> None:
    if resize < 1 or crop < 1:
        raise DataError(f"resize and crop must be positive, got resize={resize} crop={crop}")
    if crop > resize:
        raise DataError(f"crop ({crop}) must not exceed resize ({resize}): the crop would need padding")
    if limit is not None and limit < 1:
        raise DataError(f"limit_per_class must be positive, got {limit}")
    if workers < 1:
        raise DataError(f"workers must be positive, got {workers}")


def _check_same_classes(root: Path, splits: Sequence[str], classes: list[str]) -> None:
    for split in splits[1:]:
        other = find_classes(root / split)
        if other != classes:
            extra = sorted(set(other) - set(classes))
            missing = sorted(set(classes) - set(other))
            raise DataError(
                f"{root / split}: classes differ from {root / splits[0]} "
                f"(extra: {extra[:_SHOW_BAD]}, missing: {missing[:_SHOW_BAD]})"
            )


def _write_split(out: Path, split: str, samples: list[Sample], resize: int, crop: int, workers: int) -> list[str]:
    """Fill the memory-mapped shard in order; return 'path (reason)' for each bad image."""
    images = np.lib.format.open_memmap(
        out / f"{split}.images.npy", mode="w+", dtype=np.uint8, shape=(len(samples), 3, crop, crop)
    )
    bad: list[str] = []
    jobs = [(str(sample.path), resize, crop) for sample in samples]
    for index, (array, error) in enumerate(progress(_decode_all(jobs, workers), len(jobs), split)):
        if error is not None:
            bad.append(f"{samples[index].path} ({error})")
        else:
            images[index] = array
    images.flush()
    del images
    labels = np.asarray([sample.label for sample in samples], dtype=np.int64)
    np.save(out / f"{split}.labels.npy", labels)
    return bad


def _decode_all(jobs: list[tuple[str, int, int]], workers: int) -> Iterator[tuple[np.ndarray | None, str | None]]:
    """Decode in order, in a process pool when ``workers > 1`` (ordered imap keeps it deterministic)."""
    if workers == 1 or len(jobs) < 2:
        yield from map(_decode_job, jobs)
        return
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap(_decode_job, jobs, chunksize=32)


def _decode_job(job: tuple[str, int, int]) -> tuple[np.ndarray | None, str | None]:
    path, resize, crop = job
    try:
        return load_image(path, resize, crop), None
    except Exception as exc:  # noqa: BLE001 -- any decoder failure means "unreadable image"
        return None, f"{type(exc).__name__}: {exc}".replace("\n", " ")


def _bad_message(root: Path, bad: list[str]) -> str:
    shown = "; ".join(bad[:_SHOW_BAD])
    more = f"; ... and {len(bad) - _SHOW_BAD} more" if len(bad) > _SHOW_BAD else ""
    return f"{root}: {len(bad)} unreadable image(s): {shown}{more}"


def _meta(
    root: Path,
    classes: list[str],
    plan: dict[str, list[Sample]],
    resize: int,
    crop: int,
    limit: int | None,
) -> dict[str, Any]:
    return {
        "kind": KIND,
        "format_version": 1,
        "root": str(root.resolve()),
        "resize": resize,
        "crop": crop,
        "interpolation": "bilinear",
        "layout": "NCHW",
        "dtype": "uint8",
        "num_classes": len(classes),
        "classes_file": "classes.json",
        "limit_per_class": limit,
        "splits": {split: _split_meta(root, split, samples, len(classes)) for split, samples in plan.items()},
    }


def _split_meta(root: Path, split: str, samples: list[Sample], num_classes: int) -> dict[str, Any]:
    """Counts plus a hash of the ordered (relative path, size, label) list, to detect tree changes."""
    digest = hashlib.sha256()
    for sample in samples:
        relative = sample.path.relative_to(root).as_posix()
        digest.update(f"{relative}\t{sample.path.stat().st_size}\t{sample.label}\n".encode())
    per_class = np.bincount([s.label for s in samples], minlength=num_classes).tolist()
    return {
        "count": len(samples),
        "images": f"{split}.images.npy",
        "labels": f"{split}.labels.npy",
        "per_class": per_class,
        "manifest_sha256": digest.hexdigest(),
    }

