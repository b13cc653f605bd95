"""Evolved-Transformer style sequence operations on ``(batch, time, dim)`` tensors.

Every op maps a normalised input ``h`` to a tensor of the same shape. ``keep`` (bool,
``(batch, time)``, True for real tokens) masks padded keys; ``causal=True`` makes the op
see only positions ``<= t`` at output position ``t`` (convolutions are left-padded,
attention gets a lower-triangular mask), which is how decoder candidates are built.

The 24 distinct operations (:data:`SEQ_OPS`), interleaved by family so that any small
prefix of the list (a space with few candidates) still covers every family:

- standard convolution, kernel 1, 3, 5 (``conv{k}``),
- depthwise-separable convolution, kernel 3, 5, 7, 9, 11 (``sep{k}``),
- lightweight convolution (Wu et al., 2019), kernel 3, 5, 7, 15, weight sharing
  r in 1, 4, 16 (``light{k}r{r}``): ``H = dim / r`` softmax-normalised kernels, each shared
  by ``r`` adjacent channels, between a GLU input projection and an output projection,
- multi-head self-attention with 4, 8, 16 heads (``attn{h}``),
- gated linear unit (``glu``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from naspipe.errors import UsageError
from naspipe.space.ops.seq_sizes import SEQ_OPS, parse_seq_op, seq_op_macs, seq_op_sizes


def _pad_time(x: torch.Tensor, kernel: int, causal: bool) -> torch.Tensor:
    """Pad ``(batch, channels, time)`` so a stride-1 conv keeps the length."""
    if causal:
        return F.pad(x, (kernel - 1, 0))
    return F.pad(x, (kernel // 2, kernel - 1 - kernel // 2))


class StandardConv(nn.Module):
    def __init__(self, dim: int, kernel: int, causal: bool) -> None:
        super().__init__()
        self.kernel, self.causal = kernel, causal
        self.conv = nn.Conv1d(dim, dim, kernel)

    def forward(self, h: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        y = self.conv(_pad_time(h.transpose(1, 2), self.kernel, self.causal))
        return F.relu(y.transpose(1, 2))


class SeparableConv(nn.Module):
    def __init__(self, dim: int, kernel: int, causal: bool) -> None:
        super().__init__()
        self.kernel, self.causal = kernel, causal
        self.depthwise = nn.Conv1d(dim, dim, kernel, groups=dim)
        self.pointwise = nn.Linear(dim, dim)

    def forward(self, h: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        y = self.depthwise(_pad_time(h.transpose(1, 2), self.kernel, self.causal)).transpose(1, 2)
        return F.relu(self.pointwise(y))


class LightweightConv(nn.Module):
    """GLU projection -> softmax-normalised depthwise conv with ``dim / r`` kernels -> linear."""

    def __init__(self, dim: int, kernel: int, share: int, causal: bool) -> None:
        super().__init__()
        if dim % share:
            raise UsageError(f"dim {dim} is not divisible by lightweight-conv weight sharing r={share}")
        self.kernel, self.share, self.causal, self.dim = kernel, share, causal, dim
        self.heads = dim // share
        self.proj_in = nn.Linear(dim, 2 * dim)
        self.weight = nn.Parameter(torch.empty(self.heads, kernel))
        nn.init.xavier_uniform_(self.weight)
        self.proj_out = nn.Linear(dim, dim)

    def forward(self, h: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        u = F.glu(self.proj_in(h), dim=-1)
        if keep is not None:
            u = u * keep.unsqueeze(-1).to(u.dtype)
        # Channel c uses kernel c // r; expand (whose backward is a sum) instead of
        # repeat_interleave keeps the weight gradient a plain reduction.
        w = torch.softmax(self.weight, dim=-1)
        w = w.unsqueeze(1).expand(self.heads, self.share, self.kernel).reshape(self.dim, 1, self.kernel)
        y = F.conv1d(_pad_time(u.transpose(1, 2), self.kernel, self.causal), w, groups=self.dim)
        return self.proj_out(y.transpose(1, 2))


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Multi-head attention written as matmul + softmax. ``allowed`` broadcasts to (B, H, Tq, Tk)."""
    b, tq, d = q.shape
    tk = k.shape[1]
    hd = d // heads
    q = q.view(b, tq, heads, hd).transpose(1, 2)
    k = k.view(b, tk, heads, hd).transpose(1, 2)
    v = v.view(b, tk, heads, hd).transpose(1, 2)
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
    if allowed is not None:
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, tq, d)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool) -> None:
        super().__init__()
        if dim % heads:
            raise UsageError(f"dim {dim} is not divisible by {heads} attention heads")
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, h: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        t = h.shape[1]
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        allowed = None
        if keep is not None:
            allowed = keep[:, None, None, :]
        if self.causal:
            tri = torch.ones(t, t, dtype=torch.bool, device=h.device).tril()
            allowed = tri if allowed is None else allowed & tri
        return self.out(attention(q, k, v, self.heads, allowed))


class CrossAttention(nn.Module):
    """Decoder queries attend to the (normalised) encoder output, padded source keys masked."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise UsageError(f"dim {dim} is not divisible by {heads} cross-attention heads")
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, h: torch.Tensor, memory: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        k, v = self.kv(memory).chunk(2, dim=-1)
        return self.out(attention(self.q(h), k, v, self.heads, keep[:, None, None, :]))


class GatedLinearUnit(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, 2 * dim)

    def forward(self, h: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        return F.glu(self.proj(h), dim=-1)


def make_seq_op(name: str, dim: int, causal: bool) -> nn.Module:
    family, args = parse_seq_op(name)
    if family == "conv":
        return StandardConv(dim, args["kernel"], causal)
    if family == "sep":
        return SeparableConv(dim, args["kernel"], causal)
    if family == "light":
        return LightweightConv(dim, args["kernel"], args["share"], causal)
    if family == "attn":
        return SelfAttention(dim, args["heads"], causal)
    return GatedLinearUnit(dim)


__all__ = ["SEQ_OPS", "CrossAttention", "make_seq_op", "parse_seq_op", "seq_op_macs", "seq_op_sizes"]
