"""The toy space's shape: options, structure and layer sizes without torch (layers: :mod:`naspipe.space.toy`).

Token embedding (shared) -> ``blocks`` choice blocks -> LayerNorm + projection (shared). Each
block offers ``candidates`` layers cycling through :data:`TOY_OPS`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

from naspipe.errors import UsageError
from naspipe.space.shape import SpaceShape, TensorSizes, conv, layer_norm, linear, parameters
from naspipe.space.structure import SpaceStructure

TOY_OPS = ("mlp", "attention", "conv3")


class ToyShape(SpaceShape):
    defaults: ClassVar[dict[str, Any]] = {
        "blocks": 8,
        "candidates": 4,
        "dim": 32,
        "heads": 4,
        "vocab": 64,
        "seq_len": 16,
        "batch_size": 8,
        "dropout": 0.1,
    }
    space_class_name: ClassVar[str] = "naspipe.space.toy:ToySpace"

    def _structure(self) -> SpaceStructure:
        o = self.options
        self.require_positive_ints("blocks", "candidates", "dim", "heads", "vocab", "seq_len", "batch_size")
        if isinstance(o["dropout"], bool) or not isinstance(o["dropout"], (int, float)) or not 0 <= o["dropout"] < 1:
            raise UsageError(f"space {self.name!r}: option 'dropout' must be a number in [0, 1), got {o['dropout']!r}")
        if o["dim"] % o["heads"]:
            raise UsageError(
                f"space {self.name!r}: option 'dim' ({o['dim']}) must be divisible by 'heads' ({o['heads']})"
            )
        block = tuple(TOY_OPS[c % len(TOY_OPS)] for c in range(o["candidates"]))
        return SpaceStructure(self.name, ("embedding",), (block,) * o["blocks"], ("head",), self.shared_policy)

    def shape_key(self, layer: int) -> Hashable:
        """A layer's shapes follow from its op name (the options are fixed for the space)."""
        return self.structure.op_name(layer)

    def tensor_sizes(self, layer: int) -> TensorSizes:
        """The parameters of :mod:`naspipe.space.toy`'s layers (each a pre-norm residual but the embedding)."""
        o, op = self.options, self.structure.op_name(layer)
        d = o["dim"]
        if op == "embedding":
            return parameters(o["vocab"] * d + o["seq_len"] * d)  # tokens, learned positions
        if op == "head":
            return layer_norm(d) + linear(d, o["vocab"])
        if op == "mlp":
            return layer_norm(d) + linear(d, 2 * d) + linear(2 * d, d)
        if op == "attention":
            return layer_norm(d) + linear(d, 3 * d) + linear(d, d)
        return layer_norm(d) + conv(d, d, 3)
