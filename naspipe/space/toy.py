"""A small sequence-to-sequence space with real layers, for tests and CPU demos.

Token embedding (shared) -> ``blocks`` choice blocks -> LayerNorm + projection (shared).
Each block offers ``candidates`` layers cycling through a residual MLP, multi-head
self-attention and a 1-D convolution, so subnets collide on layers and the scheduler has
real work. The task: predict, at each position, a fixed random permutation of the previous
token, which needs context (attention or convolution) and is learnable in a few hundred
steps.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from naspipe.errors import UsageError
from naspipe.seeding import derive_seed
from naspipe.space.base import Batch, LayerContext, SearchSpace, SpaceLayer, State, seeded_dropout
from naspipe.space.toy_shape import TOY_OPS, ToyShape


class Embedding(SpaceLayer):
    def __init__(self, vocab: int, dim: int, seq_len: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Parameter(torch.randn(seq_len, dim) * 0.02)

    def forward(self, state: State, ctx: LayerContext) -> State:
        (tokens,) = state
        return (self.tokens(tokens) + self.positions,)


class MLP(SpaceLayer):
    def __init__(self, dim: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)
        self.dropout = dropout

    def forward(self, state: State, ctx: LayerContext) -> State:
        (x,) = state
        return (x + seeded_dropout(self.down(F.gelu(self.up(self.norm(x)))), self.dropout, ctx),)


class SelfAttention(SpaceLayer):
    """Multi-head self-attention written out (matmul + softmax), deterministic on every device."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise UsageError(f"dim {dim} is not divisible by heads {heads}")
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.heads = heads
        self.dropout = dropout

    def forward(self, state: State, ctx: LayerContext) -> State:
        (x,) = state
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1)
        mixed = (weights @ v).transpose(1, 2).reshape(b, t, d)
        return (x + seeded_dropout(self.out(mixed), self.dropout, ctx),)


class Conv(SpaceLayer):
    def __init__(self, dim: int, kernel: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.conv = nn.Conv1d(dim, dim, kernel, padding=kernel // 2)
        self.dropout = dropout

    def forward(self, state: State, ctx: LayerContext) -> State:
        (x,) = state
        y = self.conv(self.norm(x).transpose(1, 2)).transpose(1, 2)
        return (x + seeded_dropout(F.gelu(y), self.dropout, ctx),)


class Head(SpaceLayer):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, vocab)

    def forward(self, state: State, ctx: LayerContext) -> State:
        (x,) = state
        return (self.proj(self.norm(x)),)


class ToySpace(ToyShape, SearchSpace):
    """The toy space's layers, batches and loss; options, structure and sizes are :class:`ToyShape`'s."""

    def make_layer(self, layer: int) -> SpaceLayer:
        o, op = self.options, self.structure.op_name(layer)
        if op == "embedding":
            return Embedding(o["vocab"], o["dim"], o["seq_len"])
        if op == "head":
            return Head(o["dim"], o["vocab"])
        if op == "mlp":
            return MLP(o["dim"], o["dropout"])
        if op == "attention":
            return SelfAttention(o["dim"], o["heads"], o["dropout"])
        return Conv(o["dim"], 3, o["dropout"])

    def _synthetic_batch(self, step: int, seed: int) -> Batch:
        o = self.options
        gen = torch.Generator().manual_seed(derive_seed(seed, "batch", step))
        tokens = torch.randint(0, o["vocab"], (o["batch_size"], o["seq_len"]), generator=gen)
        table = torch.randperm(o["vocab"], generator=torch.Generator().manual_seed(derive_seed(seed, "task")))
        targets = table[torch.roll(tokens, 1, dims=1)]
        return Batch((tokens,), (targets,))

    def loss(self, output: State, batch: Batch) -> torch.Tensor:
        (logits,) = output
        (targets,) = batch.targets
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


__all__ = ["TOY_OPS", "ToySpace"]
