"""A space's layers as the simulator sees them (:class:`~naspipe.sim.costs.LayerInfo`), without tensors.

Parameter counts come from :meth:`SpaceShape.layer_tensors` (analytic, equal to the layer
built on torch's meta device: ``tests/test_space_sizes.py``), forward multiply-accumulates
from the space's own analytic :meth:`layer_cost`, and activation sizes from the state the
space documents between positions. It takes a space's shape, so nothing here imports torch.

Activation bytes kept for the backward without recomputation are an estimate: a multiple
of the layer's output (pre-norm input, the op's intermediates, dropout masks, residual):
8x for an encoder block, 14x for a decoder block (it adds cross-attention), 4x for an
image block, 2x for a shared layer.

At a precision that computes in fewer bytes (bf16, :mod:`naspipe.precision`) the kept activations
shrink with it, and so does what crosses a stage boundary where the runtime's state is in that
dtype: every state of the image and toy spaces, the NLP logits. The NLP blocks' state stays float32
(each block adds its bf16 output to a float32 residual stream), as the runtime sends it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from naspipe.precision import activation_scale
from naspipe.sim.costs import FLOAT_BYTES, LayerInfo
from naspipe.space.cv_shape import CvShape
from naspipe.space.nlp_shape import NlpShape

if TYPE_CHECKING:
    from naspipe.space.shape import SpaceShape


def layer_infos(space: SpaceShape, precision: str = "fp32") -> list[LayerInfo]:
    """Every layer's sizes, its activations in ``precision``'s bytes."""
    scale = activation_scale(precision)
    if isinstance(space, NlpShape):
        return [_nlp(space, lid, scale) for lid in range(space.structure.num_layers)]
    if isinstance(space, CvShape):
        infos = [_cv(space, lid) for lid in range(space.structure.num_layers)]
    else:
        infos = [_generic(space, lid) for lid in range(space.structure.num_layers)]
    return infos if scale == 1.0 else [_scaled(i, scale) for i in infos]


def _scaled(info: LayerInfo, scale: float) -> LayerInfo:
    return LayerInfo(info.params, info.macs, info.out_bytes * scale, info.act_bytes * scale)


def _macs(space: SpaceShape, layer: int) -> float:
    return max(space.layer_cost(layer) - 1.0, 0.0) / int(space.options.get("batch_size", 1))


def _nlp(space: NlpShape, layer: int, scale: float) -> LayerInfo:
    o = space.options
    state = 2.0 * o["seq_len"] * o["dim"] * FLOAT_BYTES + o["seq_len"] * 8  # enc, dec, src tokens
    op = space.structure.op_name(layer)
    params = space.layer_tensors(layer)[0]
    macs = _macs(space, layer)
    if op == "output":
        logits = float(o["seq_len"] * o["vocab"] * FLOAT_BYTES) * scale
        return LayerInfo(params, macs, logits, 2.0 * logits)
    factor = 2.0 if op == "embedding" else (8.0 if op.startswith("enc.") else 14.0)
    return LayerInfo(params, macs, state, factor * state / 2 * scale)


def _cv(space: CvShape, layer: int) -> LayerInfo:
    o = space.options
    s = space.structure
    op, block = s.op_name(layer), s.block_of(layer)
    params = space.layer_tensors(layer)[0]
    macs = _macs(space, layer)
    if op == "classifier":
        return LayerInfo(params, macs, float(o["classes"] * FLOAT_BYTES), 2.0 * o["classes"] * FLOAT_BYTES)
    if block is None:  # stem
        size = math.ceil(o["image_size"] / o["stem_stride"])
        out = float(o["channels"] * size * size * FLOAT_BYTES)
        return LayerInfo(params, macs, out, 2.0 * out + 3.0 * o["image_size"] ** 2 * FLOAT_BYTES)
    _, c_out, stride, size = space.block_shape(block)
    side = math.ceil(size / stride)
    out = float(c_out * side * side * FLOAT_BYTES)
    return LayerInfo(params, macs, out, 4.0 * out)


def _generic(space: SpaceShape, layer: int) -> LayerInfo:
    """A dense sequence layer: MACs = parameters per token, state ``seq_len x dim``."""
    o = space.options
    params = space.layer_tensors(layer)[0]
    tokens = int(o.get("seq_len", 1))
    state = float(tokens * int(o.get("dim", 1)) * FLOAT_BYTES)
    return LayerInfo(params, float(params * tokens), state, 4.0 * state)
