"""Search spaces as torch modules: seeded layers, deterministic batches, the loss.

A :class:`SearchSpace` couples a pure :class:`SpaceStructure` with how to build each layer,
how to make batch ``i`` and how to score the output. Every layer is a :class:`SpaceLayer`
mapping a *state* (a tuple of tensors, e.g. ``(x,)`` or ``(x, encoder_out)``) to the next
state, so any position can be a stage boundary and the state crosses it as exact bytes.

Determinism sources live here: a layer's parameters come from a generator seeded by (seed,
layer id), whichever process builds it; batch ``i`` is a pure function of (seed, i); dropout
masks come from (seed, subnet, layer) (and the micro-batch, for parts after the first), so
recomputation reproduces them.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from naspipe.errors import UsageError
from naspipe.seeding import derive_seed
from naspipe.space.shape import SpaceShape, TensorSizes

State = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class LayerContext:
    """What a layer may know about the call: whose step it is and whether it is a recompute.

    ``recompute`` is True when the backward re-runs the forward from a checkpoint: layers with
    running statistics (batch norm) must not update them a second time. ``micro`` is the part of
    the subnet's batch being run (``micro_batches`` > 1; 0 otherwise): each part has its own
    dropout masks, and part 0 keeps the unsplit run's seeds.
    """

    seed: int
    subnet: int
    layer: int
    recompute: bool = False
    micro: int = 0

    def dropout_seed(self, *salt: str) -> int:
        """The seed of a dropout mask: (seed, subnet, layer, salt), and the part when it is not the first."""
        part = ("micro", self.micro) if self.micro else ()
        return derive_seed(self.seed, "dropout", self.subnet, self.layer, *salt, *part)

    def generator(self, device: torch.device) -> torch.Generator:
        gen = torch.Generator(device=device)
        gen.manual_seed(self.dropout_seed())
        return gen


def seeded_dropout(x: torch.Tensor, p: float, ctx: LayerContext) -> torch.Tensor:
    """Inverted dropout whose mask is a pure function of (seed, subnet, layer, shape)."""
    if p <= 0.0:
        return x
    keep = torch.rand(x.shape, generator=ctx.generator(x.device), device=x.device) >= p
    return x * keep.to(x.dtype) / (1.0 - p)


class SpaceLayer(nn.Module, ABC):
    """One layer at one position of the supernet."""

    @abstractmethod
    def forward(self, state: State, ctx: LayerContext) -> State: ...


@dataclass(frozen=True)
class Batch:
    """Model inputs (the state fed to the first layer) and the targets the loss needs."""

    inputs: State
    targets: tuple[torch.Tensor, ...]


class SearchSpace(SpaceShape):
    """A supernet family with its layers: a :class:`SpaceShape` (options, structure, sizes) that also builds
    the layers, makes batch ``i`` and scores the output. Subclasses implement the abstract methods; a space
    family's shape class comes first in its bases, so its analytic sizes win over :meth:`tensor_sizes` here.
    """

    @classmethod
    def space_class(cls) -> type[SearchSpace]:
        """A torch space is its own (a subclass of a preset's space registered under a name stays itself)."""
        return cls

    @abstractmethod
    def make_layer(self, layer: int) -> SpaceLayer:
        """Construct layer ``layer`` with torch's default init; :meth:`build_layer` seeds it."""

    def batch(self, step: int, seed: int) -> Batch:
        """Batch ``step``, on the CPU, as a pure function of (seed, step).

        From the prepared dataset named by option ``data`` when the space has one and it is set,
        otherwise generated.
        """
        if self.options.get("data") is not None:
            return self._dataset_batch(step, seed)
        return self._synthetic_batch(step, seed)

    @abstractmethod
    def _synthetic_batch(self, step: int, seed: int) -> Batch:
        """A generated batch: the embedded default when no dataset is given."""

    def _dataset_batch(self, step: int, seed: int) -> Batch:
        raise UsageError(f"space {self.name!r} reads no prepared dataset")

    def _reader(self, seed: int, open_reader: Callable[[int], Any]) -> Any:
        """The dataset reader for ``seed``, opened once per space instance."""
        readers = self.__dict__.setdefault("_readers", {})
        if seed not in readers:
            readers[seed] = open_reader(seed)
        return readers[seed]

    @abstractmethod
    def loss(self, output: State, batch: Batch) -> torch.Tensor:
        """Scalar training loss of the last layer's output."""

    def tensor_sizes(self, layer: int) -> TensorSizes:
        """A space without analytic sizes is measured (:meth:`meta_tensor_sizes`)."""
        return self.meta_tensor_sizes(layer)

    def meta_tensor_sizes(self, layer: int) -> TensorSizes:
        """Measured on the layer built on torch's ``meta`` device (shapes only, nothing allocated): the
        reference the shapes' analytic sizes are tested against."""
        try:
            with torch.random.fork_rng(devices=[]), torch.device("meta"):
                module = self.make_layer(layer)
        except RuntimeError as exc:  # e.g. "Storage size calculation overflowed"
            raise UsageError(f"space {self.name!r}: layer {layer} ({self.structure.op_name(layer)}) "
                             f"is too large to build ({exc})") from None
        params = sum(p.numel() for p in module.parameters())
        size = sum(t.numel() * t.element_size() for t in itertools.chain(module.parameters(), module.buffers()))
        return TensorSizes(params, size)

    def meta_unmoved_bytes(self, layer: int) -> int:
        """Measured on the ``meta`` build: the bytes of buffers outside ``state_dict`` (what
        :meth:`unmoved_bytes` computes from the shapes)."""
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            module = self.make_layer(layer)
        persistent = {id(t) for t in module.state_dict(keep_vars=True).values()}
        return sum(t.numel() * t.element_size() for t in module.buffers() if id(t) not in persistent)

    def build_layer(self, layer: int, seed: int) -> SpaceLayer:
        """Layer ``layer`` initialised from (seed, layer) alone; frozen if not trainable."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "init", layer))
            module = self.make_layer(layer)
        if not self.structure.is_trainable(layer):
            module.requires_grad_(False)
        return module
