"""Search spaces as torch modules: seeded layers, deterministic batches, the loss.

A :class:`SearchSpace` couples a pure :class:`SpaceStructure` with how to build each layer,
how to make batch ``i`` and how to score the output. Every layer is a :class:`SpaceLayer`
mapping a *state* (a tuple of tensors, e.g. ``(x,)`` or ``(x, encoder_out)``) to the next
state, so any position can be a stage boundary and the state crosses it as exact bytes.

Determinism sources live here: a layer's parameters come from a generator seeded by (seed,
layer id), whichever process builds it; batch ``i`` is a pure function of (seed, i); dropout
masks come from (seed, subnet, layer), so recomputation reproduces them.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from naspipe.errors import UsageError
from naspipe.seeding import derive_seed
from naspipe.space.structure import SharedPolicy, SpaceStructure

State = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class LayerContext:
    """What a layer may know about the call: whose step it is and whether it is a recompute.

    ``recompute`` is True when the backward re-runs the forward from a checkpoint: layers with
    running statistics (batch norm) must not update them a second time.
    """

    seed: int
    subnet: int
    layer: int
    recompute: bool = False

    def generator(self, device: torch.device) -> torch.Generator:
        gen = torch.Generator(device=device)
        gen.manual_seed(derive_seed(self.seed, "dropout", self.subnet, self.layer))
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


class SearchSpace(ABC):
    """A supernet family. Subclasses set ``defaults`` and implement the abstract methods.

    ``options`` override ``defaults`` key by key; unknown keys are an error naming the key,
    so a typo in ``--set space.dim=64`` never silently does nothing.
    """

    defaults: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, name: str, options: Mapping[str, Any], shared_policy: SharedPolicy = "frozen") -> None:
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            raise UsageError(
                f"space {name!r} has no option {unknown[0]!r}; its options are {', '.join(sorted(self.defaults))}"
            )
        self.name = name
        self.options: dict[str, Any] = {**self.defaults, **options}
        self.shared_policy = shared_policy
        self.structure = self._structure()

    def require_positive_ints(self, *keys: str) -> None:
        """Options that must be integers >= 1 (one-line error naming the option otherwise)."""
        for key in keys:
            value = self.options[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"space {self.name!r}: option {key!r} must be a positive integer, got {value!r}")

    @abstractmethod
    def _structure(self) -> SpaceStructure:
        """The pure structure (op names per prefix/candidate/suffix layer)."""

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

    def layer_cost(self, layer: int) -> float:
        """A device-free cost estimate (parameter count + 1) used when no profile is given."""
        return 1.0 + float(self.layer_tensors(layer)[0])

    def layer_tensors(self, layer: int) -> tuple[int, int]:
        """``(parameter elements, bytes of parameters and buffers)`` of a layer, from its shapes alone.

        The layer is constructed on torch's ``meta`` device, so nothing is allocated: a layer too
        large for memory can be refused (with its size) before any process tries to build it.
        Layers with the same :meth:`shape_key` share one estimate.
        """
        cache: dict[Hashable, tuple[int, int]] = self.__dict__.setdefault("_tensor_sizes", {})
        key = self.shape_key(layer)
        if key not in cache:
            try:
                with torch.random.fork_rng(devices=[]), torch.device("meta"):
                    module = self.make_layer(layer)
            except RuntimeError as exc:  # e.g. "Storage size calculation overflowed"
                raise UsageError(f"space {self.name!r}: layer {layer} ({self.structure.op_name(layer)}) "
                                 f"is too large to build ({exc})") from None
            params = sum(p.numel() for p in module.parameters())
            size = sum(t.numel() * t.element_size() for t in itertools.chain(module.parameters(), module.buffers()))
            cache[key] = (params, size)
        return cache[key]

    def shape_key(self, layer: int) -> Hashable:
        """Layers with equal keys have equal tensor shapes (default: none share); spaces override it."""
        return layer

    def build_layer(self, layer: int, seed: int) -> SpaceLayer:
        """Layer ``layer`` initialised from (seed, layer) alone; frozen if not trainable."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "init", layer))
            module = self.make_layer(layer)
        if not self.structure.is_trainable(layer):
            module.requires_grad_(False)
        return module
