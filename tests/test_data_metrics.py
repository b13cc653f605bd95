"""Corpus BLEU via sacrebleu and top-k accuracy on numpy and torch inputs."""

from __future__ import annotations

import numpy as np
import pytest

from naspipe.data import DataError, bleu, topk_accuracy


def test_bleu_matches_sacrebleu() -> None:
    import sacrebleu

    hyps = ["the cat sat on the mat", "a dog runs in the park"]
    refs = ["the cat sat on a mat", "a dog runs in the park"]
    assert bleu(hyps, refs) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert bleu(refs, refs) == pytest.approx(100.0)
    assert 0.0 < bleu(hyps, refs) < 100.0


def test_bleu_errors() -> None:
    with pytest.raises(DataError, match="2 hypotheses but 1 references"):
        bleu(["a", "b"], ["a"])
    with pytest.raises(DataError, match="no sentences"):
        bleu([], [])


def test_topk_accuracy_numpy() -> None:
    logits = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.3, 0.3, 0.4]])
    labels = np.array([1, 2, 0, 1])
    result = topk_accuracy(logits, labels, ks=(1, 2, 3))
    # ranks: 0, 1 (tie with 0.1 counts as not worse), 2, 1
    assert result == {1: 0.25, 2: 0.75, 3: 1.0}


def test_topk_accuracy_torch() -> None:
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 10, generator=generator, dtype=torch.bfloat16)
    labels = torch.randint(0, 10, (64,), generator=generator)
    result = topk_accuracy(logits, labels)
    top5 = logits.float().topk(5, dim=1).indices
    expected5 = (top5 == labels[:, None]).any(dim=1).float().mean().item()
    expected1 = (logits.float().argmax(dim=1) == labels).float().mean().item()
    assert result[1] == pytest.approx(expected1) and result[5] == pytest.approx(expected5)


def test_topk_accuracy_errors() -> None:
    with pytest.raises(DataError, match=r"k=5 must lie in \[1, 3\]"):
        topk_accuracy(np.zeros((2, 3)), np.zeros(2, dtype=np.int64))
    with pytest.raises(DataError, match=r"need logits \(N, C\) and labels \(N,\)"):
        topk_accuracy(np.zeros((2, 3)), np.zeros(3, dtype=np.int64), ks=(1,))
    with pytest.raises(DataError, match=r"labels must lie in \[0, 3\)"):
        topk_accuracy(np.zeros((1, 3)), np.array([3]), ks=(1,))
