"""A search space without its layers: options, structure, per-layer compute and tensor sizes, no torch.

What a run plans with (the partitioner's costs, the simulator's layer sizes, the memory checks
of the launcher) follows from a space's options alone. :class:`SpaceShape` holds exactly that,
so ``naspipe simulate``, ``plan`` and the report price paper-size spaces without importing
torch (about 2.5 s of start-up per command, torch and ``torch._dynamo``). The torch space
(:class:`naspipe.space.base.SearchSpace`) is a subclass: the same options, checks and sizes,
plus the layers, the batches and the loss. Each space's sizes are analytic formulas next to
its ops (:mod:`naspipe.space.ops.seq_sizes`, :mod:`naspipe.space.ops.vision_sizes`);
``tests/test_space_sizes.py`` checks them against the layers built on torch's meta device,
for every preset, so they cannot drift.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from typing import Any, ClassVar, NamedTuple, cast

from naspipe.errors import UsageError
from naspipe.space.structure import SharedPolicy, SpaceStructure

FLOAT32_BYTES = 4
# The paper's largest space has 48 x 96 = 4608 choice layers; the simulator's scale runs use a few thousand.
MAX_CHOICE_LAYERS = 1_000_000
INT64_BYTES = 8


class TensorSizes(NamedTuple):
    """A layer's tensors: parameter elements, and bytes of parameters and buffers (float32 parameters)."""

    params: int
    bytes: int

    def __add__(self, other: object) -> TensorSizes:
        if not isinstance(other, TensorSizes):
            return NotImplemented
        return TensorSizes(self.params + other.params, self.bytes + other.bytes)


def parameters(count: int) -> TensorSizes:
    """``count`` float32 parameter elements."""
    return TensorSizes(count, FLOAT32_BYTES * count)


def buffers(nbytes: int) -> TensorSizes:
    """Buffers of ``nbytes`` bytes (running statistics, fixed tables): memory, not parameters."""
    return TensorSizes(0, nbytes)


def linear(n_in: int, n_out: int, bias: bool = True) -> TensorSizes:
    """``nn.Linear(n_in, n_out)``."""
    return parameters(n_in * n_out + (n_out if bias else 0))


def conv(c_in: int, c_out: int, kernel_elements: int, groups: int = 1, bias: bool = True) -> TensorSizes:
    """``nn.Conv1d``/``nn.Conv2d`` whose kernel has ``kernel_elements`` taps (k, or kh x kw)."""
    return parameters(c_out * (c_in // groups) * kernel_elements + (c_out if bias else 0))


def layer_norm(dim: int) -> TensorSizes:
    """``nn.LayerNorm(dim)``: a weight and a bias."""
    return parameters(2 * dim)


class SpaceShape(ABC):
    """A supernet family's options and what follows from them. Subclasses set ``defaults``.

    ``options`` override ``defaults`` key by key; unknown keys are an error naming the key,
    so a typo in ``--set space.dim=64`` never silently does nothing. ``space_class_name``
    names (``module:Class``) the torch space built from the same options; a torch space
    (a subclass of :class:`naspipe.space.base.SearchSpace`) is its own.
    """

    defaults: ClassVar[Mapping[str, Any]] = {}
    space_class_name: ClassVar[str] = ""

    def __init__(self, name: str, options: Mapping[str, Any], shared_policy: SharedPolicy = "frozen") -> None:
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            raise UsageError(
                f"space {name!r} has no option {unknown[0]!r}; its options are {', '.join(sorted(self.defaults))}"
            )
        self.name = name
        self.options: dict[str, Any] = {**self.defaults, **options}
        self.shared_policy = shared_policy
        self._check_size()
        self.structure = self._structure()

    def _check_size(self) -> None:
        """Refuse more than :data:`MAX_CHOICE_LAYERS` choice layers before the structure lists them: a
        ``space.blocks`` of 10**9 filled memory until the kernel killed the command."""
        sizes = [self.options.get(k) for k in ("blocks", "candidates")]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in sizes):
            return  # each shape's own checks name a missing or non-integer option
        blocks, candidates = cast("list[int]", sizes)
        if blocks * candidates > MAX_CHOICE_LAYERS:
            raise UsageError(f"space {self.name!r}: {blocks} blocks x {candidates} candidates is "
                             f"{blocks * candidates} choice layers; at most {MAX_CHOICE_LAYERS} are supported")

    @classmethod
    def space_class(cls) -> type[SpaceShape]:
        """The torch space of this shape (imports torch); a torch space answers itself.

        Typed as a shape (a torch space is a subclass of its shape): naming ``SearchSpace`` here would
        import ``naspipe.space.base``, which imports this module (tests/test_import_cycles.py)."""
        if not cls.space_class_name:
            raise TypeError(f"{cls.__name__} names no torch space (space_class_name)")
        module, _, name = cls.space_class_name.partition(":")
        return cast("type[SpaceShape]", getattr(importlib.import_module(module), name))

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
    def tensor_sizes(self, layer: int) -> TensorSizes:
        """Layer ``layer``'s tensors, computed from the options (exactly what building it allocates)."""

    def layer_cost(self, layer: int) -> float:
        """A device-free cost estimate (parameter count + 1) used when no profile is given."""
        return 1.0 + float(self.layer_tensors(layer)[0])

    def layer_tensors(self, layer: int) -> tuple[int, int]:
        """``(parameter elements, bytes of parameters and buffers)`` of a layer, without building it, so a
        layer too large for memory can be refused (with its size) before any process tries to build it.
        Layers with the same :meth:`shape_key` share one computation."""
        cache: dict[Hashable, TensorSizes] = self.__dict__.setdefault("_tensor_sizes", {})
        key = self.shape_key(layer)
        if key not in cache:
            cache[key] = self.tensor_sizes(layer)
        params, nbytes = cache[key]
        return params, nbytes

    def unmoved_bytes(self, layer: int) -> int:
        """Bytes of the layer's buffers outside its ``state_dict`` (non-persistent: derived tables such as
        positions), counted in :meth:`layer_tensors`. The device cache neither moves nor counts them: they stay
        where the layer was built (default: none)."""
        return 0

    def shape_key(self, layer: int) -> Hashable:
        """Layers with equal keys have equal tensor shapes (default: none share); spaces override it."""
        return layer
