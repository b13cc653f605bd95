"""The sequence operations by name, and what each costs without building it: MACs and tensor sizes.

Torch-free, so a space's shape (:mod:`naspipe.space.nlp_shape`) prices and sizes its layers
without importing torch; the modules themselves are in :mod:`naspipe.space.ops.seq`, and
``tests/test_space_sizes.py`` checks :func:`seq_op_sizes` against them built on the meta device.
"""

from __future__ import annotations

from naspipe.errors import UsageError
from naspipe.space.shape import TensorSizes, conv, linear, parameters

_STANDARD = ("conv3", "conv1", "conv5")
_SEPARABLE = ("sep3", "sep5", "sep7", "sep9", "sep11")
# All 12 (kernel, r) pairs, ordered so consecutive entries differ in both kernel and r.
_LIGHT = tuple(f"light{(3, 5, 7, 15)[i % 4]}r{(1, 4, 16)[i % 3]}" for i in range(12))
_ATTENTION = ("attn4", "attn8", "attn16")
_GLU = ("glu",)


def _interleave(*families: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for i in range(max(len(f) for f in families)):
        out.extend(f[i] for f in families if i < len(f))
    return tuple(out)


SEQ_OPS: tuple[str, ...] = _interleave(_STANDARD, _SEPARABLE, _LIGHT, _ATTENTION, _GLU)
if not len(SEQ_OPS) == len(set(SEQ_OPS)) == 24:
    raise ImportError(f"SEQ_OPS must be 24 distinct op names, got {SEQ_OPS}")


def parse_seq_op(name: str) -> tuple[str, dict[str, int]]:
    """``"light7r4"`` -> ``("light", {"kernel": 7, "share": 4})``; ValueError if unknown."""
    if name not in SEQ_OPS:
        raise UsageError(f"unknown sequence operation {name!r}; choose one of {', '.join(SEQ_OPS)}")
    if name == "glu":
        return "glu", {}
    if name.startswith("attn"):
        return "attn", {"heads": int(name[4:])}
    if name.startswith("light"):
        kernel, share = name[5:].split("r")
        return "light", {"kernel": int(kernel), "share": int(share)}
    if name.startswith("sep"):
        return "sep", {"kernel": int(name[3:])}
    return "conv", {"kernel": int(name[4:])}


def seq_op_macs(name: str, dim: int, time: int) -> float:
    """Multiply-accumulates per sequence of the op (forward), for analytic layer costs."""
    family, args = parse_seq_op(name)
    d, t = dim, time
    if family == "conv":
        return float(args["kernel"] * d * d * t)
    if family == "sep":
        return float((args["kernel"] * d + d * d) * t)
    if family == "light":
        return float((2 * d * d + args["kernel"] * d + d * d) * t)
    if family == "attn":
        return float(4 * d * d * t + 2 * t * t * d)
    return float(2 * d * d * t)


def seq_op_sizes(name: str, dim: int) -> TensorSizes:
    """The op's parameters (the causal and bidirectional forms have the same): ``make_seq_op(name, dim, c)``."""
    family, args = parse_seq_op(name)
    d = dim
    if family == "conv":
        return conv(d, d, args["kernel"])  # StandardConv
    if family == "sep":
        return conv(d, d, args["kernel"], groups=d) + linear(d, d)  # depthwise, pointwise
    if family == "light":
        return linear(d, 2 * d) + parameters(d // args["share"] * args["kernel"]) + linear(d, d)
    if family == "attn":
        return linear(d, 3 * d) + linear(d, d)  # qkv, out
    return linear(d, 2 * d)  # GLU


def cross_attention_sizes(dim: int) -> TensorSizes:
    """:class:`naspipe.space.ops.seq.CrossAttention`: query, key-value and output projections."""
    return linear(dim, dim) + linear(dim, 2 * dim) + linear(dim, dim)
