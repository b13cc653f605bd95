"""Translation decoding with a subnet's layers: beam search (beam 1 is greedy) and detokenisation.

The decoder is run over the whole target prefix at every step (no incremental state): every
causal op sees only earlier positions, so position ``t``'s logits depend on tokens ``< t``
alone, and the result is the same as an incremental decoder's at a cost that is fine for
evaluation-sized models. Beam scores are summed log-probabilities without length
normalisation; a finished hypothesis keeps its score and only extends with padding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from naspipe.space.base import State
from naspipe.space.nlp import BOS, EOS, PAD

Forward = Callable[[State], State]


def beam_decode(forward: Forward, src: torch.Tensor, beam: int) -> list[list[int]]:
    """The best hypothesis per source row (token ids, without EOS), at most ``seq_len`` tokens."""
    rows, length = src.shape
    src = src.repeat_interleave(beam, dim=0)
    tgt = torch.full((rows * beam, length), PAD, dtype=torch.long, device=src.device)
    tgt[:, 0] = BOS
    out = torch.full_like(tgt, PAD)
    scores = torch.full((rows, beam), float("-inf"), device=src.device)
    scores[:, 0] = 0.0
    finished = torch.zeros(rows * beam, dtype=torch.bool, device=src.device)
    for t in range(length):
        (logits,) = forward((src, tgt))
        logp = torch.log_softmax(logits[:, t].float(), dim=-1)
        vocab = logp.shape[-1]
        logp[finished] = float("-inf")
        logp[finished, PAD] = 0.0
        total = (scores.unsqueeze(-1) + logp.view(rows, beam, vocab)).view(rows, beam * vocab)
        scores, flat = torch.topk(total, beam, dim=-1)
        origin = (flat // vocab + torch.arange(rows, device=src.device).unsqueeze(1) * beam).view(-1)
        token = (flat % vocab).view(-1)
        tgt, out, finished = tgt[origin], out[origin], finished[origin]
        token = torch.where(finished, torch.full_like(token, PAD), token)
        out[:, t] = token
        finished = finished | (token == EOS)
        if t + 1 < length:
            tgt[:, t + 1] = token
        if bool(finished.all()):
            break
    best = out.view(rows, beam, length)[:, 0]
    return [strip(row.tolist()) for row in best]


def strip(ids: Sequence[int]) -> list[int]:
    """Tokens up to the first EOS or padding."""
    kept = []
    for token in ids:
        if token in (EOS, PAD):
            break
        kept.append(int(token))
    return kept


class Detokenizer:
    """Token ids to text: SentencePiece when the dataset has ``spm.model``, else its dictionary's
    symbols (fairseq ``@@ `` BPE joined), else (generated data) the ids as words."""

    def __init__(self, data_dir: str | None) -> None:
        self._dictionary = None
        self._spm = None
        if data_dir is None:
            return
        from naspipe.data.fairseq_dir import resolve_translation_dir

        meta = resolve_translation_dir(data_dir)
        self._dictionary = meta.dictionaries()[1]
        model = Path(meta.data_dir) / "spm.model"
        if model.is_file():
            import sentencepiece as spm

            self._spm = spm.SentencePieceProcessor(model_file=str(model))

    def __call__(self, ids: Sequence[int]) -> str:
        if self._dictionary is None:
            return " ".join(f"w{i}" for i in ids)
        pieces = self._dictionary.tokens(list(ids))
        if self._spm is not None:
            return str(self._spm.decode_pieces(pieces))
        return " ".join(pieces).replace("@@ ", "")
