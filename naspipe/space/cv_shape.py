"""The CV space's shape: options, structure, MACs and layer sizes without torch (layers: :mod:`naspipe.space.cv`).

A shared convolutional stem, ``blocks`` choice blocks (``reductions`` of them halve the
resolution and double the channels), a shared classifier; candidate ``c`` of a block runs
``IMAGE_OPS[c % 10]``. The paper's presets are registered here, with their sizes' derivation.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any, ClassVar

from naspipe.errors import UsageError
from naspipe.space.ops.vision_sizes import IMAGE_OPS, image_op_macs, image_op_sizes
from naspipe.space.registry import register_preset
from naspipe.space.shape import SpaceShape, TensorSizes, conv, linear
from naspipe.space.structure import SpaceStructure


class CvShape(SpaceShape):
    defaults: ClassVar[dict[str, Any]] = {
        "blocks": 6,
        "candidates": 6,
        "channels": 8,
        "image_size": 16,
        "stem_stride": 1,
        "reductions": 1,
        "classes": 10,
        "batch_size": 8,
        "dropout": 0.0,
        "bn_momentum": 0.1,
        "noise": 0.5,
        "data": None,
        "split": "train",
    }
    space_class_name: ClassVar[str] = "naspipe.space.cv:CvSpace"

    def _structure(self) -> SpaceStructure:
        o = self.options
        self.require_positive_ints(
            "blocks", "candidates", "channels", "image_size", "stem_stride", "classes", "batch_size"
        )
        stride = o["stem_stride"]
        if stride & (stride - 1):
            raise UsageError(f"space {self.name!r}: option 'stem_stride' must be a power of 2, got {stride}")
        if not isinstance(o["reductions"], int) or not 0 <= o["reductions"] < o["blocks"]:
            raise UsageError(
                f"space {self.name!r}: option 'reductions' must be an integer in [0, blocks), got {o['reductions']!r}"
            )
        if o["channels"] % 2:
            raise UsageError(f"space {self.name!r}: option 'channels' must be even, got {o['channels']}")
        if not 0.0 <= float(o["dropout"]) < 1.0:
            raise UsageError(f"space {self.name!r}: option 'dropout' must be in [0, 1), got {o['dropout']!r}")
        ops = [IMAGE_OPS[c % len(IMAGE_OPS)] for c in range(o["candidates"])]
        reduce_at = self.reduction_blocks
        blocks = tuple(tuple(("reduce." if b in reduce_at else "") + op for op in ops) for b in range(o["blocks"]))
        return SpaceStructure(self.name, ("stem",), blocks, ("classifier",), self.shared_policy)

    @property
    def reduction_blocks(self) -> frozenset[int]:
        o = self.options
        return frozenset((i + 1) * o["blocks"] // (o["reductions"] + 1) for i in range(o["reductions"]))

    def block_shape(self, block: int) -> tuple[int, int, int, int]:
        """``(c_in, c_out, stride, input_size)`` of choice block ``block``."""
        o = self.options
        c, size = o["channels"], math.ceil(o["image_size"] / o["stem_stride"])
        reduce_at = self.reduction_blocks
        for b in range(block):
            if b in reduce_at:
                c, size = 2 * c, math.ceil(size / 2)
        if block in reduce_at:
            return c, 2 * c, 2, size
        return c, c, 1, size

    def shape_key(self, layer: int) -> Hashable:
        """Op name and, inside a choice block, the block's channels, stride and input size."""
        op, block = self.structure.op_name(layer), self.structure.block_of(layer)
        return op if block is None else (op, self.block_shape(block))

    def tensor_sizes(self, layer: int) -> TensorSizes:
        """The parameters (and the batch norms' running statistics, buffers) of :mod:`naspipe.space.cv`'s layers."""
        o = self.options
        op = self.structure.op_name(layer)
        c = o["channels"]
        if op == "stem":  # a 3x3 conv from RGB, then one more stride-2 conv per remaining factor of 2
            extra = max(o["stem_stride"].bit_length() - 2, 0)
            sizes = conv(3, c, 9)
            for _ in range(extra):
                sizes = sizes + conv(c, c, 9)
            return sizes
        if op == "classifier":
            return linear(c * 2 ** o["reductions"], o["classes"])
        c_in, c_out, stride, _ = self.block_shape(self._block(layer, op))
        return image_op_sizes(op.removeprefix("reduce."), c_in, c_out, stride)

    def _block(self, layer: int, op: str) -> int:
        block = self.structure.block_of(layer)
        if block is None:
            raise ValueError(f"layer {layer} ({op!r}) is neither a prefix/suffix layer nor in a choice block")
        return block

    def layer_cost(self, layer: int) -> float:
        """Forward multiply-accumulates per batch (no layer is built)."""
        o = self.options
        op = self.structure.op_name(layer)
        if op == "stem":
            size, c = o["image_size"], o["channels"]
            macs, first = 0.0, True
            stride = o["stem_stride"]
            while True:
                step = 2 if stride > 1 else 1
                size = math.ceil(size / step)
                macs += 9.0 * (3 if first else c) * c * size * size
                first, stride = False, stride // 2
                if stride <= 1:
                    break
        elif op == "classifier":
            c_last = o["channels"] * 2 ** o["reductions"]
            macs = float(c_last * o["classes"])
        else:
            block = self.structure.block_of(layer)
            if block is None:
                raise ValueError(f"layer {layer} ({op!r}) is neither a prefix/suffix layer nor in a choice block")
            c_in, c_out, stride, size = self.block_shape(block)
            macs = image_op_macs(op.removeprefix("reduce."), c_in, c_out, stride, size, size)
        return 1.0 + o["batch_size"] * macs


# The paper's spaces (NASPipe Table 2): 32 blocks x 48/24/12 candidates on 224 x 224 ImageNet
# crops (Table 5's input size), batch 32. The paper gives whole-supernet sizes ("Para." of
# GPipe: CV.c1/c2/c3 = 7.4B/3.8B/1.7B parameters) but not the width; the stem width
# ``channels`` is fitted per preset so that these AmoebaNet ops give those sizes
# (7.14B/3.70B/1.71B, within 4%; tests/test_sim_presets.py checks 15%). One width cannot fit
# all three: c3's 12 candidates repeat the heaviest ops (the 10 ops cycle), so it is
# relatively larger than 1/4 of c1.
_FULL = {
    "blocks": 32,
    "image_size": 224,
    "stem_stride": 8,
    "reductions": 2,
    "classes": 1000,
    "batch_size": 32,
}
register_preset("cv.tiny", CvShape, {})
for _name, _candidates, _channels in (("cv.c1", 48, 480), ("cv.c2", 24, 496), ("cv.c3", 12, 448)):
    register_preset(_name, CvShape, {**_FULL, "candidates": _candidates, "channels": _channels})

__all__ = ["IMAGE_OPS", "CvShape"]
