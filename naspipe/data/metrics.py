"""Evaluation metrics: corpus BLEU and top-k accuracy.

BLEU goes through sacrebleu (default 13a tokenization, corpus level) so our
numbers are comparable with published ones; top-k accuracy accepts numpy or
torch inputs without importing torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import sacrebleu

from .errors import DataError


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (0-100) of detokenized ``hypotheses`` against one reference each."""
    if len(hypotheses) != len(references):
        raise DataError(f"bleu: {len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise DataError("bleu: no sentences to score")
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


def topk_accuracy(logits: Any, labels: Any, ks: Sequence[int] = (1, 5)) -> dict[int, float]:
    """Fraction of rows whose label is among the ``k`` highest logits, for each ``k``.

    A label counts as in the top k when fewer than ``k`` classes score strictly
    higher, so ties never depend on sort order.
    """
    scores, targets = _to_numpy(logits), _to_numpy(labels)
    if scores.ndim != 2 or targets.ndim != 1 or len(scores) != len(targets):
        raise DataError(f"topk_accuracy: need logits (N, C) and labels (N,), got {scores.shape} and {targets.shape}")
    if len(targets) == 0:
        raise DataError("topk_accuracy: empty batch")
    classes = scores.shape[1]
    targets = targets.astype(np.int64)
    if targets.min() < 0 or targets.max() >= classes:
        raise DataError(f"topk_accuracy: labels must lie in [0, {classes}), got {targets.min()}..{targets.max()}")
    for k in ks:
        if not 1 <= k <= classes:
            raise DataError(f"topk_accuracy: k={k} must lie in [1, {classes}]")
    label_scores = scores[np.arange(len(targets)), targets]
    rank = (scores > label_scores[:, None]).sum(axis=1)
    return {int(k): float((rank < k).mean()) for k in ks}


def _to_numpy(value: Any) -> np.ndarray:
    """numpy view of a numpy array, list, or torch tensor (any device or dtype)."""
    if hasattr(value, "detach"):
        tensor = value.detach().cpu()
        if getattr(tensor, "is_floating_point", lambda: False)():
            tensor = tensor.double()
        return tensor.numpy()
    return np.asarray(value)
