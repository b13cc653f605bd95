"""Dataset preparation and deterministic batching for NASPipe.

Raw inputs (WMT parallel text, fairseq-binarized directories, ImageNet-style
ImageFolder trees, or seeded synthetic data) are turned once into fixed,
hashed, atomically written shards; training then reads batch ``i`` as a pure
function of ``(seed, i)``.  Every bad input raises :class:`DataError` with a
one-line message naming the file, line, field or value.

The package is imported lazily (:mod:`naspipe.lazy`): a training job that reads batches
(``naspipe.data.batches``) loads neither sacrebleu (BLEU) nor sentencepiece (BPE) nor Pillow;
each public name below is imported from its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from naspipe.lazy import lazy_attributes, lazy_dir

if TYPE_CHECKING:
    from naspipe.data.batches import (
        ImageBatch,
        ImageBatches,
        SampleOrder,
        TranslationBatch,
        TranslationBatches,
    )
    from naspipe.data.dictionary import Dictionary
    from naspipe.data.errors import DataError
    from naspipe.data.fairseq_dir import inspect_fairseq_dir, prepare_fairseq, resolve_translation_dir
    from naspipe.data.images import load_image, prepare_images
    from naspipe.data.indexed import IndexedDataset, IndexedDatasetWriter, write_indexed_dataset
    from naspipe.data.meta import TranslationMeta, load_meta
    from naspipe.data.metrics import bleu, topk_accuracy
    from naspipe.data.synthetic import make_synthetic_images, make_synthetic_translation
    from naspipe.data.wmt import load_tokenizer, prepare_wmt, train_bpe

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "ImageBatch": "naspipe.data.batches",
    "ImageBatches": "naspipe.data.batches",
    "SampleOrder": "naspipe.data.batches",
    "TranslationBatch": "naspipe.data.batches",
    "TranslationBatches": "naspipe.data.batches",
    "Dictionary": "naspipe.data.dictionary",
    "DataError": "naspipe.data.errors",
    "inspect_fairseq_dir": "naspipe.data.fairseq_dir",
    "prepare_fairseq": "naspipe.data.fairseq_dir",
    "resolve_translation_dir": "naspipe.data.fairseq_dir",
    "load_image": "naspipe.data.images",
    "prepare_images": "naspipe.data.images",
    "IndexedDataset": "naspipe.data.indexed",
    "IndexedDatasetWriter": "naspipe.data.indexed",
    "write_indexed_dataset": "naspipe.data.indexed",
    "TranslationMeta": "naspipe.data.meta",
    "load_meta": "naspipe.data.meta",
    "bleu": "naspipe.data.metrics",
    "topk_accuracy": "naspipe.data.metrics",
    "make_synthetic_images": "naspipe.data.synthetic",
    "make_synthetic_translation": "naspipe.data.synthetic",
    "load_tokenizer": "naspipe.data.wmt",
    "prepare_wmt": "naspipe.data.wmt",
    "train_bpe": "naspipe.data.wmt",
}

__getattr__ = lazy_attributes(globals(), _EXPORTS)

__dir__ = lazy_dir(globals(), _EXPORTS)


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
