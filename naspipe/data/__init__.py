"""Dataset preparation and deterministic batching for NASPipe.

Raw inputs (WMT parallel text, fairseq-binarized directories, ImageNet-style
ImageFolder trees, or seeded synthetic data) are turned once into fixed,
hashed, atomically written shards; training then reads batch ``i`` as a pure
function of ``(seed, i)``.  Every bad input raises :class:`DataError` with a
one-line message naming the file, line, field or value.
"""

from __future__ import annotations

from .batches import (
    ImageBatch,
    ImageBatches,
    SampleOrder,
    TranslationBatch,
    TranslationBatches,
)
from .dictionary import Dictionary
from .errors import DataError
from .fairseq_dir import inspect_fairseq_dir, prepare_fairseq, resolve_translation_dir
from .images import load_image, prepare_images
from .indexed import IndexedDataset, IndexedDatasetWriter, write_indexed_dataset
from .meta import TranslationMeta, load_meta
from .metrics import bleu, topk_accuracy
from .synthetic import make_synthetic_images, make_synthetic_translation
from .wmt import load_tokenizer, prepare_wmt, train_bpe

__all__ = [
    "DataError",
    "Dictionary",
    "ImageBatch",
    "ImageBatches",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "SampleOrder",
    "TranslationBatch",
    "TranslationBatches",
    "TranslationMeta",
    "bleu",
    "inspect_fairseq_dir",
    "load_image",
    "load_meta",
    "load_tokenizer",
    "make_synthetic_images",
    "make_synthetic_translation",
    "prepare_fairseq",
    "prepare_images",
    "prepare_wmt",
    "resolve_translation_dir",
    "topk_accuracy",
    "train_bpe",
    "write_indexed_dataset",
]
