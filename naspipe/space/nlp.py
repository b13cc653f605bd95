"""Evolved-Transformer style encoder-decoder translation space (NASPipe's NLP space).

Positions: a shared embedding layer (source and target token embeddings + sinusoidal
positions), ``blocks`` choice blocks (the first ``blocks // 2`` are encoder blocks, the rest
decoder blocks), and a shared output projection. Candidate ``c`` of a block runs operation
``SEQ_OPS[c % 24]`` (see :mod:`naspipe.space.ops.seq`); candidates beyond the 24 distinct
operations are independent copies with their own weights.

- Encoder block: ``enc + dropout(op(LN(enc)))`` with padded source positions masked.
- Decoder block: ``dec + dropout(causal_op(LN(dec)))``, then
  ``dec + dropout(cross_attention(LN(dec), LN(enc)))``, so every decoder layer reads the
  encoder output and the encoder always reaches the loss. Causal ops never see future
  target positions.

State between positions (every tensor a later layer needs, so any position can be a
pipeline stage boundary):

- batch inputs: ``(src, tgt_in)`` int64 ``(B, seq_len)``,
- after the embedding and after every block: ``(enc, dec, src)`` with ``enc``/``dec`` float
  ``(B, seq_len, dim)`` and ``src`` the int64 source tokens (its padding is the mask); the
  output projection maps it to ``(logits,)``.

Every block of one kind has the same state in and out, so an op name and its input shape
determine the computation (the profiler relies on it). Layers pass tensors they do not
change through as the same objects (``dec`` in encoder blocks, ``enc`` in decoder blocks);
the output projection reads only ``dec``, so ``enc`` gets no gradient there (None).

Data: by default a deterministic synthetic translation task (a pure function of (seed,
step)): a random-length source sentence, its target is a fixed token-wise dictionary of the
source with adjacent tokens swapped pairwise (a local reordering), so the decoder must
attend to the source. With ``data`` set to a prepared translation directory, batches come
from :class:`naspipe.data.batches.TranslationBatches` (imported on first use; ``split``
picks the split, the directory's special ids must match these and ``vocab`` must cover its
dictionaries). Token ids follow fairseq: ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3. Loss: label-smoothed
cross-entropy over non-pad target tokens.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from naspipe.errors import UsageError
from naspipe.seeding import derive_seed
from naspipe.space.base import Batch, LayerContext, SearchSpace, SpaceLayer, State
from naspipe.space.nlp_shape import BOS, EOS, FIRST_WORD, PAD, UNK, NlpShape
from naspipe.space.ops.common import dropout, label_smoothed_cross_entropy
from naspipe.space.ops.seq import SEQ_OPS, CrossAttention, make_seq_op


def sinusoid_positions(length: int, dim: int) -> torch.Tensor:
    """The Transformer's fixed sinusoidal position table, ``(length, dim)``."""
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)[:, : dim // 2]
    return table.float()


class Embeddings(SpaceLayer):
    """Shared prefix: ``(src, tgt_in)`` token ids -> ``(enc, dec, src)``."""

    def __init__(self, vocab: int, dim: int, seq_len: int, dropout_p: float) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.register_buffer("positions", sinusoid_positions(seq_len, dim), persistent=False)
        self.dropout = dropout_p

    def forward(self, state: State, ctx: LayerContext) -> State:
        src, tgt = state
        p = self.dropout if self.training else 0.0
        enc = dropout(self.src_embed(src) + self.positions, p, ctx, "src")
        dec = dropout(self.tgt_embed(tgt) + self.positions, p, ctx, "tgt")
        return (enc, dec, src)


class EncoderBlock(SpaceLayer):
    """``enc + dropout(op(LN(enc)))``; ``dec`` and ``src`` pass through unchanged."""

    def __init__(self, op: str, dim: int, dropout_p: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.op = make_seq_op(op, dim, causal=False)
        self.dropout = dropout_p

    def forward(self, state: State, ctx: LayerContext) -> State:
        enc, dec, src = state
        keep = src != PAD
        h = self.norm(enc) * keep.unsqueeze(-1).to(enc.dtype)
        p = self.dropout if self.training else 0.0
        return (enc + dropout(self.op(h, keep), p, ctx, "op"), dec, src)


class DecoderBlock(SpaceLayer):
    """Causal op sublayer then cross-attention sublayer, both pre-norm residual."""

    def __init__(self, op: str, dim: int, cross_heads: int, dropout_p: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.op = make_seq_op(op, dim, causal=True)
        self.cross_norm = nn.LayerNorm(dim)
        self.memory_norm = nn.LayerNorm(dim)
        self.cross = CrossAttention(dim, cross_heads)
        self.dropout = dropout_p

    def forward(self, state: State, ctx: LayerContext) -> State:
        enc, dec, src = state
        keep = src != PAD
        p = self.dropout if self.training else 0.0
        dec = dec + dropout(self.op(self.norm(dec), None), p, ctx, "op")
        dec = dec + dropout(self.cross(self.cross_norm(dec), self.memory_norm(enc), keep), p, ctx, "cross")
        return (enc, dec, src)


class OutputProjection(SpaceLayer):
    """Shared suffix: ``(enc, dec, src)`` -> ``(logits,)`` (reads ``dec`` only)."""

    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, vocab)

    def forward(self, state: State, ctx: LayerContext) -> State:
        _, dec, _ = state
        return (self.proj(self.norm(dec)),)


class NlpSpace(NlpShape, SearchSpace):
    """The NLP space's layers, batches and loss; options, structure, costs and sizes are :class:`NlpShape`'s."""

    def make_layer(self, layer: int) -> SpaceLayer:
        o, s = self.options, self.structure
        op = s.op_name(layer)
        p = float(o["dropout"])
        if op == "embedding":
            return Embeddings(o["vocab"], o["dim"], o["seq_len"], p)
        if op == "output":
            return OutputProjection(o["dim"], o["vocab"])
        role, name = op.split(".", 1)
        if role == "enc":
            return EncoderBlock(name, o["dim"], p)
        return DecoderBlock(name, o["dim"], o["cross_heads"], p)

    # -- data ---------------------------------------------------------------------------------
    def _synthetic_batch(self, step: int, seed: int) -> Batch:
        o = self.options
        bsz, t, vocab = o["batch_size"], o["seq_len"], o["vocab"]
        gen = torch.Generator().manual_seed(derive_seed(seed, "batch", step))
        words = vocab - FIRST_WORD
        tokens = torch.randint(FIRST_WORD, vocab, (bsz, t - 1), generator=gen)
        lengths = torch.randint(max(1, (t - 1) // 2), t, (bsz,), generator=gen)  # in [(t-1)//2, t-1]
        table = torch.randperm(words, generator=torch.Generator().manual_seed(derive_seed(seed, "task"))) + FIRST_WORD
        src = torch.full((bsz, t), PAD, dtype=torch.long)
        tgt_in = torch.full((bsz, t), PAD, dtype=torch.long)
        tgt_out = torch.full((bsz, t), PAD, dtype=torch.long)
        for i in range(bsz):
            n = int(lengths[i])
            x = tokens[i, :n]
            order = torch.arange(n)
            pairs = (n // 2) * 2
            order[:pairs] = order[:pairs].view(-1, 2).flip(1).reshape(-1)  # swap adjacent pairs
            y = table[x[order] - FIRST_WORD]
            src[i, :n], src[i, n] = x, EOS
            tgt_in[i, 0], tgt_in[i, 1 : n + 1] = BOS, y
            tgt_out[i, :n], tgt_out[i, n] = y, EOS
        return Batch((src, tgt_in), (tgt_out,))

    def _dataset_batch(self, step: int, seed: int) -> Batch:
        source = self._dataset(seed)
        arrays = source.batch(step)
        src, tgt_in, tgt_out = arrays.src, arrays.tgt_in, arrays.tgt_out
        tensors = tuple(torch.as_tensor(a, dtype=torch.long).clone() for a in (src, tgt_in, tgt_out))
        o = self.options
        for tensor in tensors:
            if tuple(tensor.shape) != (o["batch_size"], o["seq_len"]):
                raise UsageError(
                    f"space {self.name!r}: dataset {o['data']} gave a batch of shape {tuple(tensor.shape)}, "
                    f"expected ({o['batch_size']}, {o['seq_len']})"
                )
            if int(tensor.max()) >= o["vocab"]:
                raise UsageError(
                    f"space {self.name!r}: dataset {o['data']} has token id {int(tensor.max())} >= vocab {o['vocab']}; "
                    f"set space.vocab to at least the dictionary size"
                )
        return Batch(tensors[:2], tensors[2:])

    def _dataset(self, seed: int):  # noqa: ANN202 - the reader's class lives in naspipe.data
        return self._reader(seed, self._open_dataset)

    def _open_dataset(self, seed: int):  # noqa: ANN202
        from naspipe.data.batches import TranslationBatches
        from naspipe.data.fairseq_dir import resolve_translation_dir

        o = self.options
        meta = resolve_translation_dir(o["data"])
        specials = {"pad": (meta.pad, PAD), "bos": (meta.bos, BOS), "eos": (meta.eos, EOS)}
        for name, (theirs, ours) in specials.items():
            if theirs != ours:
                raise UsageError(
                    f"space {self.name!r}: dataset {o['data']} uses {name} id {theirs}, the space needs {ours} "
                    f"(fairseq's convention)"
                )
        needed = max(meta.src_vocab_size, meta.tgt_vocab_size)
        if o["vocab"] < needed:
            raise UsageError(
                f"space {self.name!r}: dataset {o['data']} has a {needed}-token dictionary; "
                f"set space.vocab to at least {needed} (it is {o['vocab']})"
            )
        if o["split"] not in meta.splits:
            raise UsageError(
                f"space {self.name!r}: dataset {o['data']} has no split {o['split']!r}; "
                f"it has {', '.join(sorted(meta.splits))}"
            )
        return TranslationBatches(
            o["data"], batch_size=o["batch_size"], max_len=o["seq_len"], seed=seed, split=o["split"]
        )

    # -- objective ----------------------------------------------------------------------------
    def loss(self, output: State, batch: Batch) -> torch.Tensor:
        (logits,) = output
        (target,) = batch.targets
        target = target.to(logits.device)
        smoothing = float(self.options["label_smoothing"])
        return label_smoothed_cross_entropy(logits, target, smoothing, ignore_index=PAD)

    def accuracy(self, output: State, batch: Batch) -> torch.Tensor:
        """Token accuracy over non-pad targets."""
        (logits,) = output
        (target,) = batch.targets
        target = target.to(logits.device)
        keep = target != PAD
        hits = (logits.argmax(-1) == target) & keep
        return hits.sum().float() / keep.sum().clamp(min=1).float()


__all__ = ["BOS", "EOS", "FIRST_WORD", "PAD", "SEQ_OPS", "UNK", "NlpSpace"]
