"""Gradients a subnet keeps apart until its own update, summed over its parts in part order.

Two kinds of gradient wait for a subnet's update instead of landing in ``.grad``: those of the
gradient stash (``stash_gradients``: GPipe, VPipe, PipeDream, so two subnets of a bulk that share a
layer take two optimizer steps, each with its own gradient) and those of a windowed shared layer
(taken on the version the window gave the subnet; its update adds them to the window's sum). With
micro-batches, part ``j``'s gradients are added to parts ``0..j-1``'s as ``.grad`` accumulation adds
them (``a + b``, part 0 first), so a stash holds the bits that the sequential reference's ``.grad``
holds after the subnet's last part.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

ParamGrads = list[torch.Tensor | None]


class GradientSums:
    """Per subnet, per layer: the gradients of its parameters (in the layer's optimizer order), summed."""

    def __init__(self) -> None:
        self._sums: dict[int, dict[int, ParamGrads]] = {}

    def add(self, subnet: int, layer: int, grads: ParamGrads) -> None:
        """Add one part's gradients of ``layer`` (the first part's are kept as they are)."""
        sums = self._sums.setdefault(subnet, {})
        before = sums.get(layer)
        sums[layer] = grads if before is None else add_grads(before, grads)

    def get(self, subnet: int) -> dict[int, ParamGrads]:
        """``subnet``'s sums so far, by layer (empty when none)."""
        return self._sums.get(subnet, {})

    def put(self, subnet: int, sums: dict[int, ParamGrads]) -> None:
        """Replace ``subnet``'s sums (a replicated stage: the replicas' total, at the update)."""
        self._sums[subnet] = sums

    def pop(self, subnet: int) -> dict[int, ParamGrads]:
        """``subnet``'s sums, handed to its update."""
        return self._sums.pop(subnet, {})

    def move(self, subnet: int, move: Callable[[ParamGrads], ParamGrads]) -> None:
        """Replace each of ``subnet``'s sums by ``move(grads)`` (VPipe: to host memory and back)."""
        sums = self._sums.get(subnet, {})
        for layer, grads in sums.items():
            sums[layer] = move(grads)


def _add(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    """``a + b`` as ``.grad`` accumulation computes it (a missing term adds nothing)."""
    if a is None:
        return b
    return a if b is None else a + b


def add_grads(before: ParamGrads, grads: ParamGrads) -> ParamGrads:
    """Each of ``grads`` added to its running sum in ``before`` (the sum so far of earlier parts), as ``.grad``
    accumulation adds a part's gradients (shared by the stash and the replicas' ordered sum)."""
    return [_add(a, b) for a, b in zip(before, grads, strict=True)]
