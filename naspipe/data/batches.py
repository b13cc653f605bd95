"""Deterministic batching: batch ``i`` is a pure function of ``(seed, i)``.

NASPipe's reproducibility guarantee requires that the data a subnet sees at
step ``i`` does not depend on how many workers ran, in which order steps were
scheduled, or whether training resumed from a checkpoint.  So there is no
iterator state: the training stream is an endless sequence of samples where
sample ``k`` is ``perm(k // N)[k % N]`` and ``perm(e)`` is a permutation of
``range(N)`` drawn from ``PCG64(derive_seed(seed, e))``; batch ``i`` holds
samples ``i*B .. i*B+B-1`` (a batch may straddle an epoch boundary, so no
sample is ever skipped).

Batches have fixed shapes, so pipelines see static shapes.  Arrays are
numpy; callers convert to tensors.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np

from naspipe.seeding import rng_for

from .errors import DataError
from .fairseq_dir import resolve_translation_dir
from .indexed import IndexedDataset

B = TypeVar("B")

# fairseq's special ids, used when datasets are passed without a meta.json.
FAIRSEQ_BOS, FAIRSEQ_PAD, FAIRSEQ_EOS = 0, 1, 2


class SampleOrder:
    """The seeded sample stream shared by all batchers."""

    def __init__(self, num_samples: int, batch_size: int, seed: int) -> None:
        if num_samples < 1:
            raise DataError("cannot batch an empty dataset (0 samples)")
        if batch_size < 1:
            raise DataError(f"batch_size must be positive, got {batch_size}")
        self.num_samples, self.batch_size, self.seed = num_samples, batch_size, seed
        self._permutation = functools.lru_cache(maxsize=4)(self._make_permutation)

    def _make_permutation(self, epoch: int) -> np.ndarray:
        return rng_for(self.seed, epoch).permutation(self.num_samples)

    def indices(self, i: int) -> np.ndarray:
        """Dataset indices (int64, length B) of training batch ``i``."""
        if i < 0:
            raise DataError(f"batch index must be non-negative, got {i}")
        stream = np.arange(i * self.batch_size, (i + 1) * self.batch_size, dtype=np.int64)
        epochs, positions = np.divmod(stream, self.num_samples)
        out = np.empty(self.batch_size, dtype=np.int64)
        for epoch in np.unique(epochs).tolist():
            chosen = epochs == epoch
            out[chosen] = self._permutation(int(epoch))[positions[chosen]]
        return out

    def epoch_of(self, i: int) -> float:
        """Fractional epoch reached at the start of batch ``i`` (for logging and LR schedules)."""
        return i * self.batch_size / self.num_samples

    @property
    def batches_per_epoch(self) -> int:
        """Batches needed to see every sample once (the last may straddle into the next epoch)."""
        return -(-self.num_samples // self.batch_size)


class _Batches(ABC, Generic[B]):
    """Shuffled training batches and in-order evaluation batches over ``len(self)`` samples.

    Subclasses set ``batch_size`` and ``order`` and say how to ``_take`` a set of indices.
    """

    batch_size: int
    order: SampleOrder

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def _take(self, indices: np.ndarray) -> B: ...

    def batch(self, i: int) -> B:
        """Training batch ``i`` (shuffled; pure function of seed and ``i``)."""
        return self._take(self.order.indices(i))

    def ordered(self) -> Iterator[B]:
        """Evaluation batches in dataset order; the last one may hold fewer than B rows."""
        for start in range(0, len(self), self.batch_size):
            yield self._take(np.arange(start, min(start + self.batch_size, len(self)), dtype=np.int64))


@dataclass(frozen=True)
class TranslationBatch:
    """int64 arrays of shape (B, max_len): ``tgt_in[t]`` is the decoder input predicting ``tgt_out[t]``."""

    src: np.ndarray
    tgt_in: np.ndarray
    tgt_out: np.ndarray
    indices: np.ndarray


class TranslationBatches(_Batches[TranslationBatch]):
    """Fixed-shape translation batches from a prepared directory or a pair of datasets.

    ``src`` is the stored source sequence (fairseq stores it with a final
    ``</s>``); with ``target`` = the stored target (``</s>``-terminated, one is
    appended if missing), ``tgt_in`` = ``<s> + target[:-1]`` and ``tgt_out`` =
    ``target``.  All three are truncated to ``max_len`` and padded with ``pad``.
    """

    def __init__(
        self,
        data: Path | str | tuple[IndexedDataset, IndexedDataset],
        batch_size: int,
        max_len: int,
        pad: int | None = None,
        bos: int | None = None,
        eos: int | None = None,
        seed: int = 0,
        split: str = "train",
    ) -> None:
        if max_len < 1:
            raise DataError(f"max_len must be positive, got {max_len}")
        self.src_data, self.tgt_data, specials = _open_pair(data, split)
        self.pad = specials[0] if pad is None else pad
        self.bos = specials[1] if bos is None else bos
        self.eos = specials[2] if eos is None else eos
        self.batch_size, self.max_len = batch_size, max_len
        self.order = SampleOrder(len(self.src_data), batch_size, seed)

    def __len__(self) -> int:
        return len(self.src_data)

    def _take(self, indices: np.ndarray) -> TranslationBatch:
        shape = (len(indices), self.max_len)
        src, tgt_in, tgt_out = (np.full(shape, self.pad, dtype=np.int64) for _ in range(3))
        for row, index in enumerate(indices.tolist()):
            source = self.src_data[index][: self.max_len]
            src[row, : len(source)] = source
            target = self._target(index)
            decoder_in = np.concatenate(([self.bos], target[:-1]))[: self.max_len]
            tgt_in[row, : len(decoder_in)] = decoder_in
            tgt_out[row, : min(len(target), self.max_len)] = target[: self.max_len]
        return TranslationBatch(src=src, tgt_in=tgt_in, tgt_out=tgt_out, indices=indices)

    def _target(self, index: int) -> np.ndarray:
        target = self.tgt_data[index].astype(np.int64)
        if len(target) == 0 or target[-1] != self.eos:
            target = np.append(target, self.eos)
        return target


def _open_pair(
    data: Path | str | tuple[IndexedDataset, IndexedDataset], split: str
) -> tuple[IndexedDataset, IndexedDataset, tuple[int, int, int]]:
    """(src, tgt, (pad, bos, eos)) from a directory's meta or from two datasets."""
    if isinstance(data, tuple):
        src, tgt = data
        specials = (FAIRSEQ_PAD, FAIRSEQ_BOS, FAIRSEQ_EOS)
    else:
        meta = resolve_translation_dir(data)
        src_prefix, tgt_prefix = meta.prefixes(split)
        src, tgt = IndexedDataset(src_prefix), IndexedDataset(tgt_prefix)
        specials = (meta.pad, meta.bos, meta.eos)
    if len(src) != len(tgt):
        raise DataError(f"{src.prefix} has {len(src)} sequences but {tgt.prefix} has {len(tgt)}")
    return src, tgt, specials


@dataclass(frozen=True)
class ImageBatch:
    """``images`` uint8 (B, 3, H, W), ``labels`` int64 (B,)."""

    images: np.ndarray
    labels: np.ndarray
    indices: np.ndarray


class ImageBatches(_Batches[ImageBatch]):
    """Fixed-shape image batches from ``{split}.images.npy`` / ``{split}.labels.npy`` shards."""

    def __init__(self, shard_dir: Path | str, split: str, batch_size: int, seed: int = 0) -> None:
        self.images, self.labels = _open_image_shards(Path(shard_dir), split)
        self.batch_size = batch_size
        self.order = SampleOrder(len(self.labels), batch_size, seed)

    def __len__(self) -> int:
        return len(self.labels)

    def _take(self, indices: np.ndarray) -> ImageBatch:
        """Read in ascending index order (sequential on disk), then restore batch order."""
        order = np.argsort(indices, kind="stable")
        images = np.empty((len(indices), *self.images.shape[1:]), dtype=np.uint8)
        images[order] = self.images[indices[order]]
        labels = np.asarray(self.labels[indices], dtype=np.int64)
        return ImageBatch(images=images, labels=labels, indices=indices)


def _open_image_shards(shard_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    image_path, label_path = shard_dir / f"{split}.images.npy", shard_dir / f"{split}.labels.npy"
    for path in (image_path, label_path):
        if not path.is_file():
            raise DataError(f"{path}: no such file")
    try:
        images = np.load(image_path, mmap_mode="r")
        labels = np.load(label_path, mmap_mode="r")
    except ValueError as exc:
        raise DataError(f"{shard_dir}: cannot read {split} shards: {exc}") from exc
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1] != 3:
        raise DataError(f"{image_path}: expected uint8 (N, 3, H, W), got {images.dtype} {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images):
        raise DataError(f"{label_path}: expected ({len(images)},) labels, got shape {labels.shape}")
    return images, labels
